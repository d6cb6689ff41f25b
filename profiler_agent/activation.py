"""Starting a Session in this process: hooks, crash handlers and exit flushing (agent layer).

Used by the bootstrap once torch is imported (``activate_from_environment``) and by the API
(``start_session``). A process-wide exit handler flushes the session; an exception hook
saves the traceback to logs/traceback.txt; SIGTERM flushes and then dies as SIGTERM would.
Forked children (DataLoader workers) get a disabled session: they must not write the run.
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


_handlers_installed = False


def _install_process_handlers() -> None:
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(_at_exit)
    previous_hook = sys.excepthook

    def excepthook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        session = get_session()
        if session is not None and not session.disabled:
            with contextlib.suppress(Exception):  # an out-of-memory error dumps an allocator snapshot
                session.windows.on_exception(exc)
            if not isinstance(exc, KeyboardInterrupt):
                with contextlib.suppress(Exception):
                    write_traceback(session.run_dir, exc, rank=session.rank)
            _finalize(session, RunStatus.KILLED if isinstance(exc, KeyboardInterrupt) else RunStatus.FAILED)
        previous_hook(kind, exc, tb)

    sys.excepthook = excepthook
    os.register_at_fork(after_in_child=_disable_in_child)
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


def _finalize(session: Session, status: RunStatus) -> None:
    # Only a session that owns its run (the API without a launcher) sets the final status.
    finalize = session.finalize
    if finalize is not None:
        session.finalize = None
        with contextlib.suppress(Exception):
            finalize(status)


def _at_exit() -> None:
    session = get_session()
    if session is not None and not session.disabled:
        stop_session(session)
        _finalize(session, RunStatus.FINISHED)


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
