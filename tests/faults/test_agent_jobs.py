"""Jobs that end badly, and what is missing around them: the run's status and exit code are right,
and the agent's own failures (no graphviz, a profiler export that fails) never stop the job."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from profiler_agent.graph import GRAPH_SVG_SKIPPED
from profiler_agent.runformat import RunStatus, effective_status, layout, list_runs, read_jsonl, read_manifest

from ..agent.helpers import PROJECT_ROOT, env

SCHEDULE = ["--wait", "1", "--warmup", "1", "--active", "2"]

TRAIN = """
    import os, pathlib, sys, torch
    {before}
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in {batches}:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    print("trained", flush=True)
"""


def _wrapped(root: Path, script: str, *, path_env: str | None = None) -> tuple[subprocess.CompletedProcess[str], Path]:
    job = root.parent / f"job{len(list(root.parent.glob('job*.py')))}.py"
    job.write_text(textwrap.dedent(script))
    e = env()
    if path_env is not None:
        e["PATH"] = path_env
    res = subprocess.run([sys.executable, "-m", "app", "run", "--root", str(root), *SCHEDULE, "--", sys.executable,
                          str(job)], capture_output=True, text=True, env=e, cwd=PROJECT_ROOT, timeout=180)
    run_dir = max(p for p, _ in list_runs(root).runs)
    return res, run_dir


@pytest.mark.fault("job crash")
@pytest.mark.parametrize(("code", "expected"), [
    ("import os; print('bye', flush=True); os._exit(5)", 5),
    ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", 128 + signal.SIGSEGV),
    ("raise SystemExit(3)", 3),
])
def test_a_job_that_dies_its_own_way_keeps_its_exit_code(tmp_path: Path, code: str, expected: int) -> None:
    res, run_dir = _wrapped(tmp_path / "runs", code)
    assert res.returncode == expected, res.stderr
    m = read_manifest(run_dir)
    assert m.status is RunStatus.FAILED and m.exit_code == expected


@pytest.mark.slow
@pytest.mark.fault("job crash")
def test_a_lost_dataloader_worker_fails_the_run_with_the_jobs_code(tmp_path: Path) -> None:
    script = TRAIN.format(before=textwrap.dedent("""
        class Data(torch.utils.data.Dataset):
            def __len__(self): return 64
            def __getitem__(self, i):
                if i == 40:
                    os.kill(os.getpid(), 9)  # the worker process dies, as under the OOM killer
                return torch.randn(16), i % 4
    """).replace("\n", "\n    "), batches="torch.utils.data.DataLoader(Data(), batch_size=8, num_workers=1)")
    res, run_dir = _wrapped(tmp_path / "runs", script)
    # torch reports the lost worker in one of two ways, by a race: its own "DataLoader worker
    # (pid N) is killed" error, or a ConnectionResetError while it fetches the dead worker's
    # shared-memory tensor. Either way the job fails with exit code 1, as it would unwrapped.
    assert res.returncode == 1, res.stderr
    assert "DataLoader worker" in res.stderr or "ConnectionResetError" in res.stderr, res.stderr
    m = read_manifest(run_dir)
    assert m.status is RunStatus.FAILED and m.exit_code == 1
    assert read_jsonl(run_dir / layout.METRICS).records  # the steps before the loss are kept
    assert (run_dir / layout.TRACEBACK_LOG).is_file(), res.stderr


@pytest.mark.fault("job crash")
def test_a_raising_signal_handler_cannot_cut_the_traceback_or_the_last_metrics(tmp_path: Path) -> None:
    # As torch's DataLoader raises from its SIGCHLD handler when a worker dies, at any moment: here
    # one such signal per millisecond for 40 ms from the moment the job fails, through the agent's
    # exception hook and its exit flush.
    storm = textwrap.dedent("""
        import signal, threading, time
        def raising(*_): raise RuntimeError("raised by a signal handler")
        signal.signal(signal.SIGUSR2, raising)
        def storm():
            for _ in range(40):
                os.kill(os.getpid(), signal.SIGUSR2)
                time.sleep(0.001)
    """).replace("\n", "\n    ")
    script = textwrap.dedent(TRAIN.format(before=storm, batches="[(torch.randn(8, 16), torch.randint(0, 4, (8,)))] * 6")) \
        + "threading.Thread(target=storm, daemon=True).start()\nraise ValueError('the job fails')\n"
    res, run_dir = _wrapped(tmp_path / "runs", script)
    assert res.returncode == 1 and "trained" in res.stdout, res.stderr
    assert read_manifest(run_dir).status is RunStatus.FAILED
    text = (run_dir / layout.TRACEBACK_LOG).read_text()
    assert "the job fails" in text or "raised by a signal handler" in text, text
    assert len(read_jsonl(run_dir / layout.METRICS).records) >= 5  # the exit flush was not cut either


@pytest.mark.fault("job crash")
@pytest.mark.parametrize("hook", ["excepthook", "_at_exit"])
def test_a_signal_handler_raising_at_the_first_instruction_of_a_hook_loses_nothing(tmp_path: Path, hook: str) -> None:
    # The storm above leaves a window of microseconds untested: a handler that runs at the very
    # first instruction of the agent's exception hook or exit hook, before any `try` of theirs. Here
    # the signal is raised from a profile function at that moment, every time. The failing job must
    # keep its traceback; the job that ends inside its profiling window (3 steps of wait 1, warm-up 1,
    # active 2) must keep its trace, which only the exit hook writes, and its own exit code.
    aim = textwrap.dedent(f"""
        import signal, sys
        def raising(*_): raise RuntimeError("raised by a signal handler")
        signal.signal(signal.SIGUSR2, raising)
        def aim(frame, event, arg):
            if event == "call" and frame.f_code.co_name == {hook!r} and frame.f_code.co_filename.endswith("activation.py"):
                sys.setprofile(None)
                signal.raise_signal(signal.SIGUSR2)
    """).replace("\n", "\n    ")
    fails = hook == "excepthook"
    steps = 6 if fails else 3
    script = textwrap.dedent(TRAIN.format(before=aim, batches=f"[(torch.randn(8, 16), torch.randint(0, 4, (8,)))] * {steps}")) \
        + "sys.setprofile(aim)\n" + ("raise ValueError('the job fails')\n" if fails else "")
    res, run_dir = _wrapped(tmp_path / "runs", script)
    assert "raised by a signal handler" in res.stderr  # the handler did run, at the hook's start
    assert res.returncode == (1 if fails else 0) and "trained" in res.stdout, res.stderr
    assert read_manifest(run_dir).status is (RunStatus.FAILED if fails else RunStatus.FINISHED)
    if fails:
        assert "the job fails" in (run_dir / layout.TRACEBACK_LOG).read_text()
    else:
        assert list((run_dir / layout.TRACES_DIR).glob("*.json.gz")), "the exit hook's trace export was cut"
    assert len(read_jsonl(run_dir / layout.METRICS).records) == steps


@pytest.mark.fault("job crash")
def test_an_error_a_shell_showed_is_not_taken_for_the_jobs_end(tmp_path: Path) -> None:
    # IPython sets sys.last_value for every error a cell shows (its own frame outermost); the exit
    # hook's stand-in for a cut exception hook must not record it for a job that ended well.
    shell = textwrap.dedent("""
        import sys
        exec("def run_cell():\\n try:\\n  raise ValueError('a cell failed')\\n"
             " except ValueError:\\n  sys.last_type, sys.last_value, sys.last_traceback = sys.exc_info()\\n",
             shell := {"__name__": "IPython.core.interactiveshell", "sys": sys})
        shell["run_cell"]()
    """).replace("\n", "\n    ")
    script = TRAIN.format(before=shell, batches="[(torch.randn(8, 16), torch.randint(0, 4, (8,)))] * 6")
    res, run_dir = _wrapped(tmp_path / "runs", script)
    assert res.returncode == 0 and "trained" in res.stdout, res.stderr
    assert read_manifest(run_dir).status is RunStatus.FINISHED
    assert not (run_dir / layout.TRACEBACK_LOG).exists()


@pytest.mark.slow
@pytest.mark.fault("agent failure")
def test_no_graphviz_and_a_failing_trace_export_leave_the_job_alone(tmp_path: Path) -> None:
    # The job blocks the trace folder (a file where the folder should be): the export must fail.
    block = f"pathlib.Path(os.environ['TORCHSCOPE_RUN_DIR'], {layout.TRACES_DIR!r}).write_text('in the way')"
    script = TRAIN.format(before=block, batches="[(torch.randn(8, 16), torch.randint(0, 4, (8,)))] * 8")
    bin_dir = Path(sys.executable).parent  # PATH without graphviz's `dot`
    res, run_dir = _wrapped(tmp_path / "runs", script, path_env=str(bin_dir))
    assert res.returncode == 0 and "trained" in res.stdout, res.stderr
    m = read_manifest(run_dir)
    assert effective_status(m) is RunStatus.FINISHED
    assert (run_dir / layout.GRAPH_DOT).is_file() and not (run_dir / layout.GRAPH_SVG).exists()
    assert "dot" in m.extra[GRAPH_SVG_SKIPPED]
    errors = [json.loads(line) for line in (run_dir / layout.AGENT_ERRORS).read_text().splitlines()]
    assert any(e["where"] == "trace export" for e in errors)
    assert "trace export failed" in res.stderr  # said once on the job's stderr, and the job went on
    assert len(read_jsonl(run_dir / layout.METRICS).records) >= 8
    assert os.path.isfile(run_dir / layout.TRACES_DIR)
