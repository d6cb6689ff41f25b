"""The server's background work (the Run page's warm-up, the tabs' prefetch) waits while a page
script runs, so that a click's rerun is never slowed by it (app.ui.warmup)."""
from __future__ import annotations

import threading
import time

from app.ui import warmup


def _waiter() -> tuple[threading.Thread, threading.Event]:
    done = threading.Event()
    thread = threading.Thread(target=lambda: (warmup.wait_until_idle(), done.set()), daemon=True)
    thread.start()
    return thread, done


def test_background_work_waits_while_a_script_runs_and_a_moment_after() -> None:
    with warmup.script_run():
        thread, done = _waiter()
        assert not done.wait(0.3), "it started while a script was running"
        with warmup.script_run():  # a second session's run, overlapping
            pass
        assert not done.wait(0.2), "one run ended but another is still running"
    ended = time.monotonic()
    assert done.wait(5)
    assert time.monotonic() - ended >= warmup.IDLE_S * 0.9, "it waited for the idle moment"
    thread.join(5)


def test_a_script_that_raises_still_ends_its_run() -> None:
    try:
        with warmup.script_run():
            raise RuntimeError("the page failed")
    except RuntimeError:
        pass
    _, done = _waiter()
    assert done.wait(5), "a failed run must not keep background work waiting forever"


def test_the_run_page_warm_up_imports_the_overview_modules() -> None:
    import sys

    warmup.warm_run_page().join(60)
    assert all(name in sys.modules for name in warmup.WARM_MODULES)
    assert warmup.warm_run_page() is warmup.warm_run_page(), "once per process"
