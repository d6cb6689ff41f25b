"""The server's warm-up for the Run page, started by the Runs page once it is drawn (UI layer).

A first visit of a Run page imported ~75 modules the Runs page does not need (plotly's figure
classes and validators, narwhals' pandas path, the trace engine's parser, the Overview's own
modules) and built plotly's first figure: about a third of that visit's server CPU on the
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
        import pandas as pd

        from app.charts.steps import DEVICE_CATEGORIES, make_breakdown_figure, make_step_time_figure

        # The Overview's two figures, of three made-up steps: plotly's bar and scatter validators,
        # its layout objects and narwhals' pandas path load; to_json as st.plotly_chart serialises
        metrics = pd.DataFrame({"step": [1, 2, 3], "step_time_s": [0.1, 0.2, 0.15], "rank": [0, 0, 0]})
        make_step_time_figure(metrics).to_json()
        steps = pd.DataFrame({"rank": [0, 0], "step": [1, 2], "duration_us": [10.0, 12.0], "cpu_exec_us": [5.0, 6.0]})
        make_breakdown_figure(steps, DEVICE_CATEGORIES).to_json()
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
