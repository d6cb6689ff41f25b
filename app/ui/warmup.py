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
                "app.data.trace_parse", "plotly.graph_objects")

_thread: threading.Thread | None = None
_lock = threading.Lock()


def _warm() -> None:
    try:
        for name in WARM_MODULES:
            importlib.import_module(name)
        import pandas as pd
        import plotly.graph_objects as go

        # plotly's first figure loads its bar and scatter validators and narwhals' pandas path;
        # to_json its serialiser, as st.plotly_chart does
        x = pd.Series([1.0, 2.0])
        fig = go.Figure([go.Bar(x=["1", "2"], y=x, customdata=x), go.Scatter(x=x, y=x, mode="lines+markers")],
                        layout={"barmode": "stack", "xaxis": {"type": "category", "title": "x"},
                                "yaxis": {"title": "y", "rangemode": "tozero"}, "margin": {"l": 10},
                                "legend": {"orientation": "h"}})
        fig.add_hline(y=1.0, line_dash="dash", annotation_text="median")
        fig.to_json()
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
