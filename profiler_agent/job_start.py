"""Starting the wrapped job first: the launcher's hot path, before the rest of it loads (agent layer, stdlib only).

The agent's fixed cost per job (issue 11) is mostly the launcher's own start: Python, then the
run format's schema and writer, the options, the environment probes. None of that is needed to
start the job, so ``torchscope run`` names and makes the run folder (two ``mkdir``), starts the
job, and only then loads the rest and writes run.json while the job's interpreter starts.

The job must not write into the run before run.json exists: it gets the read end of a pipe
(``autoinstrument.GATE_ENV``) whose write end the launcher closes once run.json is written, or
once it gave up making the run; the agent waits for that end of file at ``import torch``
(``autoinstrument.wait_for_run``), long after the launcher is done.

This module imports only ``os``, ``signal``, ``subprocess``, ``sys``, ``ctypes`` and the light
``runformat.layout``; ``tests/agent/test_early_start.py`` checks that.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

from .autoinstrument import GATE_ENV

TYPE_CHECKING = False  # typing itself costs ~3 ms before the job starts; mypy reads the name as True
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import FrameType

__all__ = ["Background", "JobProcess", "child_env", "default_run_name", "exit_code", "run_plain", "start_job", "wait_for",
           "BOOTSTRAP_DIR", "PACKAGE_HOME"]

_HERE = os.path.dirname(os.path.realpath(__file__))
BOOTSTRAP_DIR = os.path.join(_HERE, "bootstrap")
PACKAGE_HOME = os.path.dirname(_HERE)
# The names of options.py (which loads dataclasses and json); a test keeps them equal.
RUN_DIR_ENV = "TORCHSCOPE_RUN_DIR"
OPTIONS_ENV = "TORCHSCOPE_AGENT_OPTIONS"
OWNER_ENV = "TORCHSCOPE_RUN_OWNER_PID"
AGENT_HOME_ENV = "TORCHSCOPE_AGENT_HOME"
T0_ENV = "TORCHSCOPE_RUN_T0"

_KILL_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGKILL, signal.SIGHUP}
# Signals that reach the launcher are passed on to the job (their default action would end the
# launcher and leave the job alone); the first four ask it to stop, and make the run `killed`.
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_FORWARDED = (*_STOP_SIGNALS, signal.SIGUSR1, signal.SIGUSR2)
# What a terminal sends to its whole foreground group: the job, in that group, has it already.
_TERMINAL_SIGNALS = {signal.SIGINT, signal.SIGQUIT, signal.SIGHUP}


class Background:
    """A function run in a thread of its own, started without waiting for the thread to run.

    ``threading.Thread.start`` waits until the new thread has run: on a loaded machine that is one
    wait for the scheduler per thread, and the launcher starts five beside the job (issue 11).
    ``_thread.start_new_thread`` returns at once; ``join`` waits for the function's end. The
    thread is a daemon: it never keeps the launcher alive. ``fn`` must catch its own errors.

    The thread blocks the signals the launcher forwards (it is started with them blocked, so
    there is no moment when it could take one): the kernel then delivers them to the main thread,
    whose wait for the job they interrupt. A signal taken by another thread would wait for the
    main thread to wake by itself -- in ``Popen.wait()``, until the job ends.
    """

    def __init__(self, fn: Callable[..., object], *args: object) -> None:
        import _thread
        import threading

        self._done = threading.Event()
        self._fn = fn
        self._args = args
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)
        try:
            _thread.start_new_thread(self._run, ())
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def _run(self) -> None:
        try:
            self._fn(*self._args)
        except Exception as e:  # noqa: BLE001 - one line, not a thread's traceback
            try:
                print(f"torchscope run: {getattr(self._fn, '__name__', 'a thread')} failed "
                      f"({type(e).__name__}: {e})", file=sys.stderr)
            except Exception:  # noqa: BLE001, S110 - the terminal may be gone
                pass
        finally:
            self._done.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait at most ``timeout`` seconds for the function's end; True when it has ended."""
        return self._done.wait(timeout)

    def is_alive(self) -> bool:
        return not self._done.is_set()


def default_run_name(command: Sequence[str]) -> str:
    """A name from the command: the script (``train`` for ``python train.py``) or the module."""
    from pathlib import Path

    args = list(command)
    if args and Path(args[0]).name.startswith("python"):
        args = args[1:]
        while args and args[0].startswith("-") and args[0] != "-m":
            args = args[1:]
        if args[:1] == ["-m"] and len(args) > 1:
            return args[1].rsplit(".", 1)[-1]
    return Path(args[0]).stem if args else "run"


def exit_code(returncode: int) -> int:
    """A shell's code for a child's return code: 128 + N when signal N killed it."""
    return returncode if returncode >= 0 else 128 - returncode


def run_plain(command: Sequence[str]) -> int:
    """Become the command (exec in place): unrecorded, it gets exactly its signals and its exit code."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(command[0], list(command))  # noqa: S606 - the user's own command
    except OSError as e:
        print(f"torchscope run: cannot start {command[0]!r}: {e}", file=sys.stderr)
    return 127


def child_env(run_dir: str, options_json: str, *, owner_pid: int, t0: float, gate: str | None = None) -> dict[str, str]:
    """The job's environment: the bootstrap first on PYTHONPATH, the run folder and the options."""
    env = dict(os.environ)
    paths = [BOOTSTRAP_DIR, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env[AGENT_HOME_ENV] = PACKAGE_HOME
    env.setdefault("PYTHONUNBUFFERED", "1")  # the job's output reaches the terminal and logs live
    env[RUN_DIR_ENV] = os.path.realpath(run_dir)
    env[OPTIONS_ENV] = options_json
    env[OWNER_ENV] = str(owner_pid)
    env[T0_ENV] = repr(t0)
    if gate is not None:
        env[GATE_ENV] = gate
    else:
        env.pop(GATE_ENV, None)  # a launcher inside a wrapped job: its own job needs no gate of ours
    return env


def _die_with_parent() -> None:
    # Linux: if the launcher is killed (even SIGKILL) the job gets SIGTERM, flushes and stops.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001, S110 - the job starts regardless
        pass


def in_terminal_foreground() -> bool:
    """True when the launcher is the terminal's foreground group (a Ctrl-C there reaches the job too)."""
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


class JobProcess:
    """The job's process, the signals that reached the launcher, and the gate the job waits on."""

    def __init__(self, command: Sequence[str]) -> None:
        self.command = tuple(command)
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_error: OSError | None = None
        self.signals: list[int] = []
        self.own_group = False  # the job runs in a process group of its own (no terminal)
        self._previous: dict[int, object] = {}
        self._gate_w: int | None = None

    def install_handlers(self) -> None:
        """Handlers first: a signal arriving while the job starts is forwarded once it exists."""
        for sig in _FORWARDED:
            if signal.getsignal(sig) is not signal.SIG_IGN:  # inherited as ignored: keep it so
                self._previous[sig] = signal.signal(sig, self._on_signal)

    def restore_handlers(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def start(self, run_dir: str, options_json: str, *, t0: float) -> None:
        """Start the command with the agent armed; an OSError is kept in ``start_error``."""
        self.own_group = not in_terminal_foreground()
        gate_r, self._gate_w = os.pipe()
        try:
            info = os.fstat(gate_r)
            env = child_env(run_dir, options_json, owner_pid=os.getpid(), t0=t0,
                            gate=f"{gate_r}:{info.st_dev}:{info.st_ino}")
            self.proc = subprocess.Popen(  # noqa: S603 - the user's own command
                list(self.command), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(gate_r,),
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
                process_group=0 if self.own_group else None,
            )
        except OSError as e:
            self.start_error = e
            self.open_gate()
        finally:
            os.close(gate_r)
        for pending in self.signals:
            self.send(pending)

    def open_gate(self) -> None:
        """Tell the job that run.json is written, or that there will be none (idempotent)."""
        fd, self._gate_w = self._gate_w, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def send(self, signum: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signum)

    def asked_to_stop(self) -> bool:
        return any(s in _STOP_SIGNALS for s in self.signals)

    def status_killed(self, returncode: int) -> bool | None:
        """True when the run is ``killed`` (asked to stop, or killed by a stop signal), False when
        killed by another signal (``failed``), None when the job exited by itself."""
        if self.asked_to_stop():
            return True
        if returncode < 0:
            return -returncode in _KILL_SIGNALS
        return None

    def wait_unrecorded(self) -> int:
        """Wait for a job whose run could not be made: its output is its own, its code is returned."""
        assert self.proc is not None
        copies = [Background(_copy, src, dst) for src, dst in ((self.proc.stdout, sys.stdout),
                                                                (self.proc.stderr, sys.stderr))]
        returncode = wait_for(self.proc)
        for thread in copies:
            thread.join(timeout=10)
        return exit_code(returncode)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals.append(signum)
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        if signum in _STOP_SIGNALS and sum(s in _STOP_SIGNALS for s in self.signals) >= 3:
            proc.kill()  # asked three times: stop waiting for a clean exit
        elif self.own_group or not (signum in _TERMINAL_SIGNALS and in_terminal_foreground()):
            # In its own group the job got nothing from the group's sender: forward exactly once.
            proc.send_signal(signum)


def wait_for(proc: subprocess.Popen[bytes]) -> int:
    """``proc.wait()`` that never sleeps through a signal to be forwarded; returns the return code.

    A bare ``Popen.wait()`` blocks in ``waitpid``. A signal that arrives after the last point
    where the interpreter ran handlers and before ``waitpid`` enters the kernel (the main thread
    is often preempted right there, as it releases the GIL) sets Python's flag but interrupts
    nothing: its handler -- and so the forward to the job -- then ran only once the job had
    ended by itself (a job that saves on Ctrl-C slept on, exited 0 and saved nothing). Here the
    wait is a ``select`` on the job's pidfd and a wakeup pipe that the C-level signal handler
    writes to, so a signal in that window ends the ``select`` at once and its handler runs.
    Without pidfds (not Linux, or Linux before 5.3) it polls every 50 ms.
    """
    import select

    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd, or the job was reaped already
        pidfd = None
    if pidfd is None:
        while True:
            try:
                return proc.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                continue
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    try:
        previous = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    except ValueError:  # not the main thread: no handler of ours runs here, so no window either
        previous = None
    try:
        while proc.poll() is None:
            select.select([pidfd, wake_r], [], [])
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
        return proc.wait()
    finally:
        if previous is not None:
            signal.set_wakeup_fd(previous)
        for fd in (pidfd, wake_r, wake_w):
            os.close(fd)


def _copy(source: object, terminal: object) -> None:
    fd = source.fileno()  # type: ignore[attr-defined]
    out = getattr(terminal, "buffer", None)
    try:
        while chunk := os.read(fd, 1 << 16):
            if out is not None:
                try:
                    out.write(chunk)
                    out.flush()
                except Exception:  # noqa: BLE001, S112 - the terminal may be gone
                    continue
    finally:
        try:
            source.close()  # type: ignore[attr-defined]
        except OSError:
            pass


def start_job(command: Sequence[str], run_dir: str, options_json: str, *, t0: float) -> JobProcess:
    """Install the signal handlers and start ``command`` armed for ``run_dir`` (its run.json not yet written)."""
    job = JobProcess(command)
    job.install_handlers()
    job.start(run_dir, options_json, t0=t0)
    return job
