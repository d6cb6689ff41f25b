"""The run's status and files at every way a job can end: crash, SIGTERM, exception, exit codes, bad disks."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profiler_agent.options import RUN_DIR_ENV
from profiler_agent.runformat import (
    RunStatus,
    create_run,
    effective_status,
    layout,
    list_runs,
    read_jsonl,
    read_manifest,
)

from .helpers import BASELINE, PROJECT_ROOT, SCHEDULE, TINY, env, only_run, torchscope, wait_for_steps

LONG = ["--steps", "100000", "--epochs", "100000"]


def start_wrapped(root: Path, *job: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "app", "run", "--root", str(root), *SCHEDULE, "--",
                             sys.executable, str(BASELINE), *TINY, *job],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
                            cwd=PROJECT_ROOT)


def _pid_gone(pid: int, timeout: float = 30) -> bool:
    """True once ``pid`` has exited (a zombie nobody reaped counts as exited)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                return True
        except (ProcessLookupError, FileNotFoundError):
            return True
        time.sleep(0.1)
    return False


def test_sigkilled_launcher_leaves_a_readable_crashed_run(tmp_path: Path) -> None:
    proc = start_wrapped(tmp_path, *LONG)
    try:
        run_dir = wait_for_steps(tmp_path, 3, proc=proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    m = read_manifest(run_dir)
    assert m.status is RunStatus.RUNNING  # nobody could mark it...
    # ...but its heartbeat, still fresh, is not waited for: the launcher (m.pid) is gone, on this host.
    assert effective_status(m) is RunStatus.CRASHED
    # The job itself is stopped with its launcher, not left training as an orphan.
    assert _pid_gone(int(m.extra["job_pid"]))
    read = read_jsonl(run_dir / layout.METRICS)
    assert len([r for r in read.records if "loss" in r]) >= 3 and not read.skipped


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_or_sigint_marks_killed_and_passes_the_signal_on(tmp_path: Path, sig: signal.Signals) -> None:
    proc = start_wrapped(tmp_path, *LONG)
    try:
        run_dir = wait_for_steps(tmp_path, 2, proc=proc)
        proc.send_signal(sig)  # to the launcher only, as `kill` would: it must forward it
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
    assert code == 128 + sig
    m = read_manifest(run_dir)
    assert m.status is RunStatus.KILLED and m.exit_code == code and m.ended_at is not None
    assert read_jsonl(run_dir / layout.METRICS).records


def test_exception_marks_failed_and_saves_the_traceback(tmp_path: Path) -> None:
    proc = torchscope("run", "--root", str(tmp_path), *SCHEDULE, "--", sys.executable, str(BASELINE), *TINY,
                      "--steps", "10", "--fail-at-step", "4")
    assert proc.returncode == 1
    run_dir = only_run(tmp_path)
    m = read_manifest(run_dir)
    assert m.status is RunStatus.FAILED and m.exit_code == 1
    tb = (run_dir / layout.TRACEBACK_LOG).read_text()
    assert "RuntimeError: failing on purpose at step 4" in tb and "rank 0" in tb
    assert "failing on purpose" in (run_dir / layout.STDERR_LOG).read_text()
    steps = [r["step"] for r in read_jsonl(run_dir / layout.METRICS).records if "loss" in r]
    assert steps == [0, 1, 2, 3]


def test_exit_code_passes_through_for_any_command(tmp_path: Path) -> None:
    proc = torchscope("run", "--root", str(tmp_path), "--name", "shell", "--", "sh", "-c",
                      "echo out; echo err >&2; exit 3")
    assert proc.returncode == 3
    assert "out" in proc.stdout and "err" in proc.stderr
    run_dir = only_run(tmp_path)
    m = read_manifest(run_dir)
    assert m.status is RunStatus.FAILED and m.exit_code == 3 and m.name == "shell"
    assert (run_dir / layout.STDOUT_LOG).read_text() == "out\n"
    assert (run_dir / layout.STDERR_LOG).read_text() == "err\n"


def test_missing_command_is_exit_127_and_failed(tmp_path: Path) -> None:
    proc = torchscope("run", "--root", str(tmp_path), "--", "no-such-command-xyz")
    assert proc.returncode == 127
    assert "cannot start" in proc.stderr
    assert read_manifest(only_run(tmp_path)).status is RunStatus.FAILED


def test_no_command_is_a_usage_error() -> None:
    proc = torchscope("run", "--name", "x")
    assert proc.returncode == 2
    assert "no command to run" in proc.stderr and "Traceback" not in proc.stderr


def test_unusable_store_still_runs_the_job(tmp_path: Path) -> None:
    store = tmp_path / "store-is-a-file"
    store.write_text("not a folder")
    proc = torchscope("run", "--root", str(store), "--", sys.executable, str(BASELINE), *TINY, "--steps", "3")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "done: 3 steps" in proc.stdout
    assert "running the command without recording" in proc.stderr


def test_agent_write_failures_are_recorded_and_the_job_goes_on(tmp_path: Path) -> None:
    # A run folder whose files cannot be written: metrics.jsonl and traces/ are folders/files of
    # the wrong kind, so every metrics append and trace export fails inside the job.
    run_dir, _ = create_run(tmp_path, "spoiled")
    (run_dir / layout.METRICS).mkdir()
    (run_dir / layout.TRACES_DIR).write_text("a file where a folder should be")
    (run_dir / layout.GRAPH_DIR).write_text("a file where a folder should be")
    job_env = {**env(), RUN_DIR_ENV: str(run_dir),
               "PYTHONPATH": f"{PROJECT_ROOT / 'profiler_agent' / 'bootstrap'}{os.pathsep}{PROJECT_ROOT}"}
    # 12 steps: the default schedule (wait 5, warmup 2, active 3) opens and closes one window.
    proc = subprocess.run([sys.executable, str(BASELINE), *TINY, "--steps", "12", "--eval-every", "0"],
                          capture_output=True, text=True, env=job_env, cwd=PROJECT_ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "done: 12 steps" in proc.stdout
    errors = read_jsonl(run_dir / layout.AGENT_ERRORS).records
    where = {e["where"] for e in errors}
    assert "metrics write" in where and ("trace export" in where or "profiler start" in where)
    assert "module tree" in where or "find model" in where
    assert all(e["error"] and e["traceback"] for e in errors)
    assert "the job continues" in proc.stderr


def test_unreachable_run_folder_never_breaks_the_job(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    job_env = {**env(), RUN_DIR_ENV: str(blocker / "run"),
               "PYTHONPATH": f"{PROJECT_ROOT / 'profiler_agent' / 'bootstrap'}{os.pathsep}{PROJECT_ROOT}"}
    proc = subprocess.run([sys.executable, str(BASELINE), *TINY, "--steps", "6", "--eval-every", "0"],
                          capture_output=True, text=True, env=job_env, cwd=PROJECT_ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "done: 6 steps" in proc.stdout
    assert not list_runs(tmp_path).runs


def test_python_dash_m_profiler_agent_is_the_same_wrapper(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "profiler_agent", "run", "--root", str(tmp_path), "--name", "m",
                           "--", "sh", "-c", "echo hi; exit 5"], capture_output=True, text=True, env=env(),
                          cwd=PROJECT_ROOT, timeout=120)
    assert proc.returncode == 5 and proc.stdout == "hi\n"
    m = read_manifest(only_run(tmp_path))
    assert m.name == "m" and m.exit_code == 5 and m.status is RunStatus.FAILED
    assert m.command == ("sh", "-c", "echo hi; exit 5")


def test_bad_schedule_is_a_usage_error_naming_the_value(tmp_path: Path) -> None:
    proc = torchscope("run", "--root", str(tmp_path), "--active", "0", "--", "true")
    assert proc.returncode == 2
    assert "active=0 (need > 0)" in proc.stderr and "Traceback" not in proc.stderr
    assert not tmp_path.joinpath("x").exists() and not list(tmp_path.iterdir())


def test_a_background_process_holding_the_pipes_does_not_hang_the_launcher(tmp_path: Path) -> None:
    start = time.monotonic()
    proc = torchscope("run", "--root", str(tmp_path), "--", "sh", "-c", "sleep 30 & echo started", timeout=28)
    assert proc.returncode == 0 and "started" in proc.stdout
    assert time.monotonic() - start < 25
    assert read_manifest(only_run(tmp_path)).status is RunStatus.FINISHED
