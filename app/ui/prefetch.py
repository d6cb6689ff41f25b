"""Background loading of the Run page's other tabs, once the open one is built (UI layer).

A tab module may expose ``prefetch(ctx: RunContext) -> None``: it loads into the app's caches
(``app.ui.cache``, ``app.ui.deep_cache``, its own ``st.cache_resource`` views) what its
``render`` would load, with no Streamlit element. After a visit builds the open tab,
:func:`prefetch_tabs` queues the prefetching tabs of that run on one daemon worker, so that
while the user reads the open tab the server reads the others' data, and a tab switch finds its
tables and charts ready (the Memory tab's first switch spent ~0.35 s of server time on them,
benchmarks/README.md, "Wave 14"). Like the Run page's warm-up, each job starts only once no
script has run for a moment (``app.ui.warmup.wait_until_idle``), and the worker runs at a lower
priority, so that it never delays what the user waits for.

Nothing here changes what a tab shows: a prefetch fills the same caches with the same keys its
``render`` uses, and Streamlit's per-key compute locks make a switch that arrives while the
value is being computed wait for it rather than compute it twice. A prefetch that fails is
dropped (the tab says why when it is opened). ``TORCHSCOPE_PREFETCH=0`` turns this off (the
AppTest suite does, to keep its runs one thread each).
"""
from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from app.ui.tabs import RunContext
from app.ui.warmup import wait_until_idle

__all__ = ["PREFETCH_ENV", "IDLE_EXIT_S", "prefetch_tabs", "prefetch_enabled", "wait_idle", "wait_stopped"]

PREFETCH_ENV = "TORCHSCOPE_PREFETCH"
# Keys (run folder, signature, rank, tab module) already queued; the oldest are forgotten first.
# A key queued longer ago than REQUEUE_S is queued again: the tabs' caches expire (ttl 600–900 s).
_SEEN_MAX = 256
REQUEUE_S = 300.0
# The worker exits once it has had nothing to do for this long (the next visit starts another):
# no thread is left behind in a process that no longer serves pages.
IDLE_EXIT_S = 30.0

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_jobs: queue.Queue[Callable[[], None]] = queue.Queue()
_seen: OrderedDict[tuple[object, ...], float] = OrderedDict()  # key → when queued (monotonic)
_worker: threading.Thread | None = None


def prefetch_enabled() -> bool:
    """False when ``$TORCHSCOPE_PREFETCH`` is ``0``, ``false`` or ``no``."""
    return os.environ.get(PREFETCH_ENV, "1").strip().lower() not in ("0", "false", "no")


# The worker's scheduling priority (nice value): its reads yield the CPU to what the user waits
# for, the browser drawing the open tab and other sessions' script runs (Linux; elsewhere unchanged).
NICE = 10


def _lower_priority() -> None:
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)  # a thread's own id on Linux
    except (AttributeError, OSError):  # no setpriority, or not allowed: run at the usual priority
        pass


def _work() -> None:
    global _worker
    _lower_priority()
    while True:
        try:
            job = _jobs.get(timeout=IDLE_EXIT_S)
        except queue.Empty:
            with _lock:  # jobs are queued under the lock: none can slip in between
                if _jobs.empty():
                    _worker = None
                    return
            continue
        try:
            wait_until_idle()  # each job starts once no script has run for a moment (app.ui.warmup)
            job()
        except Exception:  # noqa: BLE001 - best effort: the tab shows its own error when opened
            _log.debug("prefetch failed", exc_info=True)
        finally:
            _jobs.task_done()


def _job(load: Callable[[], object], ctx: RunContext) -> Callable[[], None]:
    def run() -> None:
        prefetch = getattr(load(), "prefetch", None)
        if prefetch is not None:
            prefetch(ctx)
    return run


def prefetch_tabs(ctx: RunContext, tabs: Sequence[tuple[str, Callable[[], object]]], signature: object) -> int:
    """Queue the ``prefetch`` of each ``(module name, loader)`` in ``tabs`` for ``ctx``'s run;
    a key (run, ``signature``, rank, module) queued in the last REQUEUE_S is skipped. Returns how many were
    queued (0 when turned off). Never waits for them."""
    if not prefetch_enabled() or ctx.live:  # a live run's files change under it: nothing to keep
        return 0
    global _worker
    queued = 0
    with _lock:
        now = time.monotonic()
        for module, load in tabs:
            key = (str(ctx.run_dir), signature, ctx.rank, module)
            if now - _seen.get(key, -REQUEUE_S) < REQUEUE_S:
                continue
            _seen.pop(key, None)
            _seen[key] = now
            while len(_seen) > _SEEN_MAX:
                _seen.popitem(last=False)
            _jobs.put(_job(load, ctx))
            queued += 1
        if queued and _worker is None:
            _worker = threading.Thread(target=_work, daemon=True, name="torchscope-tab-prefetch")
            _worker.start()
    return queued


def wait_idle() -> None:
    """Block until every queued prefetch has run (tests and benchmarks)."""
    _jobs.join()


def wait_stopped(timeout: float) -> bool:
    """Block until the worker has exited (it does once idle for IDLE_EXIT_S), at most ``timeout``
    seconds; True when no worker is left."""
    with _lock:
        worker = _worker
    if worker is not None:
        worker.join(timeout)
    return worker is None or not worker.is_alive()
