"""Signals and exit codes of a wrapped job: it sees exactly the signals it would see plain, and the
wrapper exits with the job's own code (tiny torch-free jobs, each run plain and wrapped)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from profiler_agent.runformat import RunStatus, list_runs

from ..agent.helpers import PROJECT_ROOT, env

# Each job prints READY once its handlers are in place, then waits for the test's signal.
JOBS = {
    # Catches Ctrl-C to save a checkpoint (which takes a while), then exits 3.
    "checkpoint": """
        import sys, time
        try:
            print("READY", flush=True)
            time.sleep(30)
        except KeyboardInterrupt:
            time.sleep(0.5)  # a second SIGINT here would cut the save
            open(sys.argv[1], "w").write("saved")
            sys.exit(3)
    """,
    # No handler: Python's KeyboardInterrupt traceback, death by SIGINT.
    "plain": """
        import time
        print("READY", flush=True)
        time.sleep(30)
    """,
    # Goes on after an ignored SIGINT and finishes normally.
    "short": """
        import sys, time
        print("READY", flush=True)
        time.sleep(1.0)
        open(sys.argv[1], "w").write("done")
    """,
    # Saves on SIGTERM and exits 143 itself; a second SIGTERM during the save would kill it unsaved.
    "term": """
        import signal, sys, time
        def save(*_):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            time.sleep(0.5)
            open(sys.argv[1], "w").write("saved")
            sys.exit(143)
        signal.signal(signal.SIGTERM, save)
        print("READY", flush=True)
        time.sleep(30)
    """,
    # Checkpoints on SIGUSR1 (as a cluster's "time is nearly up" signal asks) and finishes normally.
    "usr1": """
        import signal, sys, time
        got = []
        signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
        print("READY", flush=True)
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)  # a second SIGUSR1 would be counted
        open(sys.argv[1], "w").write(str(len(got)))
    """,
}


def _ignore_sigint() -> None:
    # What a non-interactive shell does for `cmd &`: SIGINT and SIGQUIT ignored.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _start(tmp_path: Path, job: str, wrapped: bool, *, ignore_sigint: bool = False) -> tuple[subprocess.Popen[str], Path]:
    script = tmp_path / f"{job}.py"
    script.write_text(textwrap.dedent(JOBS[job]))
    out = tmp_path / f"{job}-{'wrapped' if wrapped else 'plain'}.out"
    cmd = [sys.executable, str(script), str(out)]
    if wrapped:
        cmd = [sys.executable, "-m", "app", "run", "--root", str(tmp_path / "runs"), "--", *cmd]
    # A session of its own: no controlling terminal, and the test can signal the whole group.
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env(), cwd=PROJECT_ROOT, start_new_session=True,
                            preexec_fn=_ignore_sigint if ignore_sigint else None)
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if "READY" in line or not line:
            break
    return proc, out


def _both(tmp_path: Path, job: str, send: Callable[[subprocess.Popen[str]], None],
          **kw: bool) -> dict[bool, tuple[int, bool, str]]:
    """(exit code, output file written, stderr) of the job plain and wrapped, the same signal sent to each."""
    procs = {wrapped: _start(tmp_path, job, wrapped, **kw) for wrapped in (False, True)}
    try:
        for proc, _ in procs.values():
            send(proc)
        results = {}
        for wrapped, (proc, out) in procs.items():
            _, err = proc.communicate(timeout=60)
            code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode  # as a shell says it
            results[wrapped] = (code, out.exists(), err)
        return results
    finally:
        for proc, _ in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _to_group(sig: int) -> Callable[[subprocess.Popen[str]], None]:
    return lambda proc: os.killpg(proc.pid, sig)


def _status(tmp_path: Path) -> RunStatus:
    (_run_dir, manifest), = list_runs(tmp_path / "runs").runs
    return manifest.status


@pytest.mark.fault("signals")
def test_sigint_to_the_group_lets_a_checkpointing_job_save_once(tmp_path: Path) -> None:
    res = _both(tmp_path, "checkpoint", _to_group(signal.SIGINT))
    assert res[False][:2] == (3, True)
    assert res[True][:2] == (3, True), res[True][2]
    assert _status(tmp_path) is RunStatus.KILLED


@pytest.mark.fault("signals")
def test_sigint_without_a_handler_keeps_the_excepthook_whole(tmp_path: Path) -> None:
    res = _both(tmp_path, "plain", _to_group(signal.SIGINT))
    assert res[False][0] == res[True][0] == 128 + signal.SIGINT
    assert "KeyboardInterrupt" in res[True][2]
    assert "Error in sys.excepthook" not in res[True][2] and "Exception ignored" not in res[True][2]


@pytest.mark.fault("signals")
def test_inherited_ignored_sigint_stays_ignored(tmp_path: Path) -> None:
    res = _both(tmp_path, "short", _to_group(signal.SIGINT), ignore_sigint=True)
    assert res[False][:2] == (0, True)
    assert res[True][:2] == (0, True), res[True][2]
    assert _status(tmp_path) is RunStatus.FINISHED


@pytest.mark.fault("signals")
def test_sigterm_to_the_group_reaches_the_job_once(tmp_path: Path) -> None:
    res = _both(tmp_path, "term", _to_group(signal.SIGTERM))
    assert res[False][:2] == (143, True)
    assert res[True][:2] == (143, True), res[True][2]
    assert _status(tmp_path) is RunStatus.KILLED


@pytest.mark.fault("signals")
def test_sigterm_to_the_launcher_alone_is_forwarded(tmp_path: Path) -> None:
    res = _both(tmp_path, "term", lambda proc: proc.send_signal(signal.SIGTERM))
    assert res[False][:2] == (143, True)
    assert res[True][:2] == (143, True), res[True][2]


@pytest.mark.fault("signals")
def test_unrecordable_store_runs_the_job_plain_with_its_signals(tmp_path: Path) -> None:
    # The store is a file: no run can be made; the job runs unrecorded, exec'd in place.
    (tmp_path / "runs").write_text("not a folder")
    res = _both(tmp_path, "checkpoint", _to_group(signal.SIGINT))
    assert res[True][:2] == (3, True), res[True][2]
    assert "running the command without recording" in res[True][2]


@pytest.mark.fault("signals")
@pytest.mark.parametrize("to_group", [True, False])
def test_sigusr1_reaches_the_job_once_and_is_no_stop(tmp_path: Path, to_group: bool) -> None:
    send = _to_group(signal.SIGUSR1) if to_group else (lambda proc: proc.send_signal(signal.SIGUSR1))
    res = _both(tmp_path, "usr1", send)
    assert res[False][:2] == res[True][:2] == (0, True), res[True][2]
    assert (tmp_path / "usr1-wrapped.out").read_text() == "1"
    assert _status(tmp_path) is RunStatus.FINISHED


@pytest.mark.fault("signals")
@pytest.mark.parametrize("wait", ["wait_for", "Popen.wait"])
def test_a_signal_taken_by_another_thread_wakes_the_launchers_wait(wait: str) -> None:
    # The launcher's race, made certain: the C-level handler runs in a thread other than the main
    # one (here by pthread_kill; in the launcher, a signal landing just before waitpid blocks), so
    # nothing interrupts the main thread's wait. wait_for wakes at once and runs the Python handler;
    # a bare Popen.wait() runs it only when the job ends by itself (the flake this test pins down).
    import threading

    from profiler_agent.job_start import wait_for

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"])
    handled: list[float] = []

    def handler(signum: int, frame: object) -> None:
        handled.append(time.monotonic())
        proc.kill()  # as the launcher forwards a stop: the job ends

    previous = signal.signal(signal.SIGUSR1, handler)
    helper = threading.Thread(target=lambda: (time.sleep(0.3), signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)))
    try:
        start = time.monotonic()
        helper.start()
        returncode = wait_for(proc) if wait == "wait_for" else proc.wait()
        took = time.monotonic() - start
    finally:
        helper.join()
        signal.signal(signal.SIGUSR1, previous)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if wait == "wait_for":
        assert handled and returncode == -signal.SIGKILL and took < 2, (handled, returncode, took)
    else:  # the control: the same wait without the wakeup sleeps through the signal
        assert returncode == 0 and took >= 2.5, (handled, returncode, took)
