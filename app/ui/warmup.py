"""The server's warm-up for the Run page, started by the Runs page once it is drawn (UI layer).

A first visit of a Run page imported ~75 modules the Runs page does not need (narwhals' pandas
path, the trace engine's parser, the Overview's own modules; plotly's figure classes until the
Overview drew Vega-Lite charts) and built its first charts: about a third of that visit's server CPU on the
sample runs, paid after the click. ``warm_run_page()`` does that work once per server process in
a daemon thread while the user reads the Runs page. It reads no run and fills no data cache: a
first visit still parses and analyses the run's traces (caches cold).

The warm-up shares the interpreter's lock with the page scripts, so it works only while none runs:
the entry point marks each script run (:func:`script_run`), and each step (a module, the charts)
starts once no script has run for :data:`IDLE_S`. A rerun that comes right after the Runs page was
drawn (a click) is then not slowed by it; one that starts during a step waits for that step only
(the largest, ``app.ui.run_view``, ~30 ms). benchmarks/catalog_index.py times the rerun both ways.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import threading
import time
from collections.abc import Callable, Iterator

__all__ = ["warm_run_page", "script_run", "wait_until_idle", "WARM_MODULES", "IDLE_S"]

# What the Run page's first visit imports beyond the Runs page's modules (the Overview tab).
WARM_MODULES = ("app.ui.run_view", "app.ui.tabs.overview", "app.ui.trace_view", "app.workspace.traces",
                "app.data.trace_parse", "app.charts.steps")
# A step starts only once no script has run for this long: a click's rerun comes in milliseconds.
IDLE_S = 0.05

_thread: threading.Thread | None = None
_lock = threading.Lock()
_busy = threading.Condition()
_running = 0  # script runs in progress, every session together
_last_end = 0.0  # monotonic time the last one ended


@contextlib.contextmanager
def script_run() -> Iterator[None]:
    """Mark a script run in progress (the entry point wraps each run of the app in it)."""
    global _running, _last_end
    with _busy:
        _running += 1
    try:
        yield
    finally:
        with _busy:
            _running -= 1
            _last_end = time.monotonic()
            _busy.notify_all()


def wait_until_idle() -> None:
    """Return once no script run is in progress and none ended in the last IDLE_S."""
    with _busy:
        while True:
            if _running:
                _busy.wait()  # woken when a run ends
                continue
            left = _last_end + IDLE_S - time.monotonic()
            if left <= 0:
                return
            _busy.wait(left)


def _charts() -> None:
    import json

    import pandas as pd

    from app.charts.steps import DEVICE_CATEGORIES, breakdown_chart, step_time_chart

    # The Overview's two charts, of three made-up steps, serialised as st.vega_lite_chart does
    metrics = pd.DataFrame({"step": [1, 2, 3], "step_time_s": [0.1, 0.2, 0.15], "rank": [0, 0, 0]})
    json.dumps(step_time_chart(metrics))
    steps = pd.DataFrame({"rank": [0, 0], "step": [1, 2], "duration_us": [10.0, 12.0], "cpu_exec_us": [5.0, 6.0]})
    json.dumps(breakdown_chart(steps, DEVICE_CATEGORIES))


def _steps() -> list[Callable[[], object]]:
    return [*(functools.partial(importlib.import_module, name) for name in WARM_MODULES), _charts]


def _warm() -> None:
    try:
        for step in _steps():
            wait_until_idle()
            step()
    except Exception:  # noqa: BLE001 - a warm-up only: the page imports what it needs itself, and says why not
        pass


def warm_run_page() -> threading.Thread:
    """Start the warm-up (once per process) and return its thread; callers do not wait for it."""
    global _thread
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_warm, daemon=True, name="torchscope-run-page-warmup")
            _thread.start()
        return _thread
