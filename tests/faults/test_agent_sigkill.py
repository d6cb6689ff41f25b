"""The SIGKILL matrix: a wrapped tiny job killed at 20+ moments, from before its first step to its
shutdown; after each the run's status is right, its metrics are readable, and ls, analyze and
advise work on the partial run (run in-process over one store, so the matrix stays cheap).

The moments are found from the job's own markers on stdout (no test hook in the agent), plus a
delay: the profiler exports its trace right after the window's last step (step 4 here), the graph
is rendered after the first backward, the shutdown follows "M done". Even cases SIGKILL the
launcher (the job gets SIGTERM from PR_SET_PDEATHSIG and the run is left `running`, which readers
show as `crashed` at once), odd ones the job itself (the launcher marks it `killed`, exit 137).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from profiler_agent.runformat import RunStatus, effective_status, layout, read_jsonl, read_manifest

from ..agent.helpers import PROJECT_ROOT, env

JOB = """
    import sys, time
    print("M start", flush=True)
    import torch
    print("M imported", flush=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    for step in range(1, 9):
        print(f"M begin {step}", flush=True)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        print(f"M step {step}", flush=True)
        time.sleep(0.05)
    print("M done", flush=True)
"""
SCHEDULE = ["--wait", "1", "--warmup", "1", "--active", "2", "--system-interval", "0.2"]

# (marker on the job's stdout, or "" for the launcher's start; seconds after it)
MOMENTS = [
    ("", 0.0), ("", 0.15), ("M start", 0.0), ("M imported", 0.0),      # before the first step
    ("M begin 1", 0.0), ("M begin 1", 0.01), ("M step 1", 0.0),        # first step, graph rendering
    ("M step 1", 0.03), ("M step 1", 0.1),
    ("M step 3", 0.0), ("M begin 4", 0.0),                              # mid-run, in the window
    ("M step 4", 0.0), ("M step 4", 0.005), ("M step 4", 0.02),         # trace export
    ("M step 4", 0.06), ("M step 6", 0.0),
    ("M done", 0.0), ("M done", 0.1), ("M done", 0.4), ("M done", 1.0),  # shutdown
]


@dataclass
class Case:
    index: int
    marker: str
    delay: float
    kill_launcher: bool
    code: int | None = None
    run_dir: Path | None = None
    seen: str = ""


def _job_pid(launcher: int) -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split()[0])
    return None


def _wait_job_pid(launcher: subprocess.Popen[str], timeout: float = 30) -> int:
    """The job's pid once the launcher has started it. A job-kill case must kill the job: under load
    the launcher may not have forked it yet at the case's moment, and killing the launcher instead
    (as this matrix once fell back to) tests another case, in the window before run.json exists."""
    deadline = time.monotonic() + timeout
    while (pid := _job_pid(launcher.pid)) is None and launcher.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    return pid if pid is not None else launcher.pid


def _kill_at(case: Case, script: Path, root: Path) -> Case:
    proc = subprocess.Popen([sys.executable, "-m", "app", "run", "--root", str(root), "--name", f"k{case.index:02d}",
                             *SCHEDULE, "--", sys.executable, str(script)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=env(), cwd=PROJECT_ROOT, start_new_session=True, text=True)
    assert proc.stdout is not None
    lines: list[str] = []
    reached = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.strip())
            if case.marker and line.strip() == case.marker:
                reached.set()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        if case.marker:
            reached.wait(timeout=120)
        time.sleep(case.delay)
        target = proc.pid if case.kill_launcher else _wait_job_pid(proc)
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signal.SIGKILL)
        case.code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=10)
    case.seen = lines[-1] if lines else ""
    return case


def _cli(*argv: str) -> tuple[int, str, str]:
    from app.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _wait_gone(pid: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def _jobs_alive(script: Path) -> list[int]:
    """Processes still running this matrix's job script (orphaned jobs whose launcher was killed)."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if str(script).encode() in argv and state != "Z":
                alive.append(int(entry.name))
    return alive


def _assert_no_job_left(script: Path, timeout: float = 30) -> None:
    """Every orphaned job got SIGTERM from the dead launcher and must flush and exit, never hang
    (wave 9: one blocked for good on its own manifest lock)."""
    deadline = time.monotonic() + timeout
    while (alive := _jobs_alive(script)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not alive, f"jobs still running {timeout:.0f} s after their launcher died: pids {alive}"


@pytest.mark.slow
@pytest.mark.fault("SIGKILL mid-run")
@pytest.mark.parametrize("part", ["start", "end"])  # two halves of the moments: the test workers share them
def test_sigkill_at_twenty_moments_leaves_readable_runs(tmp_path: Path, part: str) -> None:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(JOB))
    root = tmp_path / "runs"
    half = len(MOMENTS) // 2
    chosen = range(half) if part == "start" else range(half, len(MOMENTS))
    cases = [Case(i, *MOMENTS[i], kill_launcher=i % 2 == 0) for i in chosen]
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = list(pool.map(lambda c: _kill_at(c, script, root), cases))
    code, out, err = _cli("ls", "--root", str(root), "--json")
    assert code == 0, err
    listed = json.loads(out)
    assert isinstance(listed, (list, dict))
    by_name = {p.name.split("-")[2]: p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")}
    for case in done:
        where = f"case {case.index} ({case.marker or 'launch'} +{case.delay}s, last output {case.seen!r})"
        run_dir = by_name.get(f"k{case.index:02d}")
        if run_dir is None:  # killed before the run was created: nothing may be left half-made
            assert not case.marker, where
            continue
        assert (run_dir / layout.MANIFEST).is_file(), where
        m = read_manifest(run_dir)
        if m.status is RunStatus.RUNNING and m.extra.get("job_pid"):
            _wait_gone(int(m.extra["job_pid"]))  # the orphaned job got SIGTERM: let it flush and go
            m = read_manifest(run_dir)
        status = effective_status(m)
        if case.kill_launcher:
            assert status in (RunStatus.CRASHED, RunStatus.FINISHED), f"{where}: {status}"
        else:
            assert status in (RunStatus.KILLED, RunStatus.FINISHED, RunStatus.CRASHED), f"{where}: {status}"
            if status is RunStatus.KILLED:
                assert m.exit_code == case.code == 128 + signal.SIGKILL, where
        temps = [p for p in run_dir.rglob("*") if layout.is_temp_file(p.name) and layout.CACHE_DIR not in p.parts]
        if not case.kill_launcher:  # the launcher lived to the end: it removed what the job left
            assert not temps, f"{where}: {temps}"
        assert not any(layout.is_temp_file(p.name) for p in layout.list_trace_files(run_dir)), where
        for name in (layout.METRICS, layout.SYSTEM):
            read = read_jsonl(run_dir / name)
            assert not read.skipped, f"{where}: {read.skipped}"
        for argv in (("analyze", str(run_dir), "--json"), ("advise", str(run_dir))):
            code, out, err = _cli(*argv)
            # A partial run: a result, or one clear line saying what is missing -- never a traceback.
            assert code in (0, 2), f"{where}: {argv[0]} exited {code}: {err}"
            assert "Traceback" not in err and (code == 0 or err.strip()), f"{where}: {err}"
        if layout.list_trace_files(run_dir):
            assert _cli("analyze", str(run_dir), "--json")[0] == 0, where
    _assert_no_job_left(script)
