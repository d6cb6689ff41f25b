"""The server's warm-up for the Run page, started by the Runs page once it is drawn (UI layer).

A first visit of a Run page imported ~75 modules the Runs page does not need (narwhals' pandas
path, the trace engine's parser, the Overview's own modules; plotly's figure classes until the
Overview drew Vega-Lite charts) and built its first charts: about a third of that visit's server CPU on the
sample runs, paid after the click. ``warm_run_page()`` does that work once per server process in
a daemon thread while the user reads the Runs page. It reads no run and fills no data cache: a
first visit still parses and analyses the run's traces (caches cold).
"""
from __future__ import annotations

import importlib
import threading

__all__ = ["warm_run_page", "WARM_MODULES"]

# What the Run page's first visit imports beyond the Runs page's modules (the Overview tab).
WARM_MODULES = ("app.ui.run_view", "app.ui.tabs.overview", "app.ui.trace_view", "app.workspace.traces",
                "app.data.trace_parse", "app.charts.steps")

_thread: threading.Thread | None = None
_lock = threading.Lock()


def _warm() -> None:
    try:
        for name in WARM_MODULES:
            importlib.import_module(name)
        import json

        import pandas as pd

        from app.charts.steps import DEVICE_CATEGORIES, breakdown_chart, step_time_chart

        # The Overview's two charts, of three made-up steps, serialised as st.vega_lite_chart does
        metrics = pd.DataFrame({"step": [1, 2, 3], "step_time_s": [0.1, 0.2, 0.15], "rank": [0, 0, 0]})
        json.dumps(step_time_chart(metrics))
        steps = pd.DataFrame({"rank": [0, 0], "step": [1, 2], "duration_us": [10.0, 12.0], "cpu_exec_us": [5.0, 6.0]})
        json.dumps(breakdown_chart(steps, DEVICE_CATEGORIES))
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
