"""Starting a Session in this process: hooks, crash handlers and exit flushing (agent layer).

Used by the bootstrap once torch is imported (``activate_from_environment``) and by the API
(``start_session``). A process-wide exit handler flushes the session; an exception hook
saves the traceback to logs/traceback.txt; SIGTERM flushes and then dies as SIGTERM would.
Forked children (DataLoader workers) get a disabled session: they must not write the run.

Both the exception hook and the exit flush defer the signals that have Python handlers until they
are done: such a handler may raise (torch's DataLoader raises from SIGCHLD when a worker dies,
Ctrl-C raises KeyboardInterrupt), and an exception raised inside the agent's guarded writes would
cut the traceback or the last metrics short. The deferred signals are raised again right after.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType, TracebackType

from . import argcapture, frameworks
from .compilation import watch_compilation
from .hooks import install_hooks
from .options import RUN_DIR_ENV, T0_ENV, AgentOptions, read_env_options
from .runformat import RunStatus, layout
from .session import Session, get_session, set_session
from .tensorboard import watch_tensorboard

__all__ = ["activate_from_environment", "start_session", "stop_session", "write_traceback"]


def activate_from_environment() -> Session | None:
    """Start the session a launcher asked for through the environment (once per process)."""
    existing = get_session()
    if existing is not None:
        return existing
    run_dir = os.environ.get(RUN_DIR_ENV)
    if not run_dir:
        return None
    t0 = None
    with contextlib.suppress(KeyError, ValueError):
        t0 = float(os.environ[T0_ENV])
    return start_session(Path(run_dir), read_env_options(), t0=t0)


def start_session(run_dir: Path, options: AgentOptions, *, t0: float | None = None) -> Session:
    """Create this process's session, install its hooks and exit handlers, and return it."""
    session = Session(run_dir, options, t0=t0)
    uninstall = install_hooks(session)
    session.uninstall_hooks = uninstall
    set_session(session)
    argcapture.install_argparse_capture()
    frameworks.install_framework_capture()
    argcapture.set_config_sink(session.record_config)
    watch_tensorboard()  # SummaryWriter scalars -> metrics, once torch.utils.tensorboard loads
    watch_compilation(session.compilation)  # torch.compile: compile steps and counts, once dynamo loads
    _install_process_handlers()
    return session


def stop_session(session: Session) -> None:
    """Flush and close ``session`` and remove its hooks."""
    with contextlib.suppress(Exception):
        session.close()
    with contextlib.suppress(Exception):
        session.uninstall_hooks()
    session.compilation.unregister()
    if get_session() is session:
        set_session(None)
        argcapture.set_config_sink(None)


def write_traceback(run_dir: Path, exc: BaseException, *, rank: int) -> None:
    """Append the traceback of ``exc`` to logs/traceback.txt, headed by rank, pid and time."""
    path = run_dir / layout.TRACEBACK_LOG
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    text = "".join(traceback.format_exception(exc))
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"--- rank {rank}, pid {os.getpid()}, {stamp} ---\n{text}")
        f.flush()
        os.fsync(f.fileno())


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """While the body runs, the signals that have Python handlers are only noted; they are raised
    again, to their own handlers, once it is done.

    Blocking them would not do: a signal sent to the process reaches any thread that does not
    block it (torch runs several), and its Python handler then runs in the main thread anyway.
    Python calls handlers whose signal came in earlier from ``signal.signal`` itself: such a
    handler may raise here, with the handlers swapped so far put back (``_shielded`` tries again).
    """
    if threading.current_thread() is not threading.main_thread():  # handlers run in the main thread only
        yield
        return
    noted: list[int] = []
    swapped: dict[signal.Signals | int, object] = {}
    try:
        for signum in signal.valid_signals():
            with contextlib.suppress(ValueError, OSError):
                if callable(signal.getsignal(signum)):
                    swapped[signum] = signal.signal(signum, lambda n, _frame: noted.append(n))
        yield
    finally:
        escaped: BaseException | None = None
        for swapped_signal, handler in swapped.items():
            try:
                signal.signal(swapped_signal, handler)  # type: ignore[arg-type]
            except ValueError:
                pass
            except BaseException as e:  # noqa: BLE001 - a handler put back ran for an earlier signal
                escaped = escaped or e
        for noted_signal in dict.fromkeys(noted):
            with contextlib.suppress(ValueError, OSError):
                signal.raise_signal(noted_signal)  # its own handler, now
        if escaped is not None:
            raise escaped


def _shielded(work: Callable[[], None], *, tries: int = 5) -> None:
    """Run ``work`` once, whole, with the Python-handled signals deferred (``_signals_deferred``).

    A handler can still raise before they are deferred (then ``work`` is tried again) or when
    they are raised again after it (then the job is ending anyway: the error is dropped).
    ``work`` must catch its own errors: only a handler's escape this way.
    """
    done = False
    for _ in range(tries):
        try:
            with _signals_deferred():
                if not done:
                    work()
                    done = True
        except (Exception, KeyboardInterrupt):  # noqa: BLE001 - raised by a signal handler around the work
            pass
        if done:
            return


_handlers_installed = False
_recorded: BaseException | None = None  # the exception the exception hook recorded, if any


def _install_process_handlers() -> None:
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    # A signal handler that raises (torch's DataLoader does, from SIGCHLD) can run at the very first
    # instruction of a hook, before any `try` in it: Python then reports that error and goes on.
    # Registered twice, the exit hook runs whole once (the second call finds the session stopped);
    # an exception hook cut that way is made good at exit from `sys.last_value`, which Python sets
    # before it calls the hook.
    atexit.register(_at_exit)
    atexit.register(_at_exit)
    previous_hook = sys.excepthook

    def excepthook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        session = get_session()
        if session is not None and not session.disabled:
            _shielded(lambda: _record_exception(session, exc))
        previous_hook(kind, exc, tb)

    sys.excepthook = excepthook
    os.register_at_fork(after_in_child=_disable_in_child)
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


def _record_exception(session: Session, exc: BaseException) -> None:
    global _recorded
    _recorded = exc
    if not isinstance(exc, KeyboardInterrupt):
        with contextlib.suppress(Exception):
            write_traceback(session.run_dir, exc, rank=session.rank)
    with contextlib.suppress(Exception):  # an out-of-memory error dumps an allocator snapshot
        session.windows.on_exception(exc)
    _finalize(session, RunStatus.KILLED if isinstance(exc, KeyboardInterrupt) else RunStatus.FAILED)


def _stop_finished(session: Session) -> None:
    stop_session(session)
    _finalize(session, RunStatus.FINISHED)


def _finalize(session: Session, status: RunStatus) -> None:
    # Only a session that owns its run (the API without a launcher) sets the final status.
    finalize = session.finalize
    if finalize is not None:
        session.finalize = None
        with contextlib.suppress(Exception):
            finalize(status)


def _at_exit() -> None:
    session = get_session()
    if session is None or session.disabled:
        return
    missed = _unrecorded_exit_exception()
    if missed is not None:  # the exception hook was cut before it recorded
        _shielded(lambda: _record_exception(session, missed))
    _shielded(lambda: _stop_finished(session))


def _unrecorded_exit_exception() -> BaseException | None:
    """The exception that ended the main script, when the agent's exception hook did not record it.

    Python sets ``sys.last_value`` for that exception; IPython sets it for every error a cell
    shows, with a traceback whose outermost frame is its own (not ``__main__``'s, nor runpy's
    under ``python -m``): those are not the job's end.
    """
    exc, tb = getattr(sys, "last_value", None), getattr(sys, "last_traceback", None)
    if exc is None or exc is _recorded or tb is None:
        return None
    return exc if tb.tb_frame.f_globals.get("__name__") in ("__main__", "runpy") else None


def _disable_in_child() -> None:
    session = get_session()
    if session is not None:
        session.disabled = True
        with contextlib.suppress(Exception):  # a fork during evaluation must not record in the child
            session.evaluation.uninstall()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    # Flush what we have, then die of SIGTERM exactly as the job would have without us.
    session = get_session()
    if session is not None:
        with contextlib.suppress(Exception):
            session.close()
        _finalize(session, RunStatus.KILLED)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
