"""Plotly figure of a trace window: lanes of thread/stream rows, one WebGL trace per event
category (charts layer: tables → figures, no Streamlit)."""
from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

from app.analysis.trace.timeline import Timeline

__all__ = ["CATEGORY_LABELS", "make_timeline_figure", "lane_rows"]

_PALETTE = qualitative.Plotly + qualitative.Safe
_NAME_CHARS = 120
# Kineto's event categories as a reader names them, each with the same colour in every trace.
CATEGORY_LABELS = {
    "cpu_op": "CPU op", "user_annotation": "annotation (record_function)", "python_function": "Python function",
    "cuda_runtime": "CUDA runtime", "cuda_driver": "CUDA driver", "hip_runtime": "HIP runtime",
    "hip_driver": "HIP driver", "privateuse1_runtime": "device runtime", "kernel": "kernel",
    "gpu_memcpy": "GPU memcpy", "gpu_memset": "GPU memset", "gpu_user_annotation": "GPU annotation",
    "cuda_sync": "CUDA sync", "cuda_profiler_range": "CUDA profiler range",
}
_COLOURS = {
    "cpu_op": "#636EFA", "user_annotation": "#B6B6C8", "python_function": "#FECB52", "cuda_runtime": "#EF553B",
    "cuda_driver": "#FF7F0E", "hip_runtime": "#EF553B", "hip_driver": "#FF7F0E", "privateuse1_runtime": "#EF553B",
    "kernel": "#00CC96", "gpu_memcpy": "#AB63FA", "gpu_memset": "#FF6692", "gpu_user_annotation": "#FFA15A",
    "cuda_sync": "#8C564B", "cuda_profiler_range": "#7F7F7F",
}


def lane_rows(timeline: Timeline) -> tuple[np.ndarray, list[float], list[str], int]:
    """Return (y row of each event, tick positions, tick labels, number of rows).

    Each lane takes as many rows as its deepest nesting; lanes are stacked in
    ``timeline.lanes`` order.
    """
    events = timeline.events
    offsets: dict[str, int] = {}
    ticks: list[float] = []
    row = 0
    for lane in timeline.lanes:
        depth = int(events.loc[events["lane"] == lane, "depth"].max()) + 1 if len(events) else 1
        offsets[lane] = row
        ticks.append(float(row))
        row += depth
    y = events["lane"].map(offsets).to_numpy(np.int64) + events["depth"].to_numpy(np.int64)
    return y, ticks, list(timeline.lanes), max(row, 1)


def _hover(frame: pd.DataFrame) -> list[str]:
    """Hover text per event. Names, lanes and shapes repeat a lot, so each distinct one is
    escaped and truncated once."""
    memo: dict[str, str] = {}

    def clean(text: str) -> str:
        out = memo.get(text)
        if out is None:
            short = text if len(text) <= _NAME_CHARS else text[: _NAME_CHARS - 1] + "…"
            out = memo[text] = html.escape(short)
        return out

    texts = []
    columns = (frame[c].to_numpy(dtype=object) for c in ("name", "cat", "lane", "input_shapes"))
    for name, cat, lane, shapes, dur in zip(*columns, frame["dur_us"].to_numpy(np.float64).tolist()):
        text = f"<b>{clean(name)}</b><br>{dur:,.1f} µs · {clean(CATEGORY_LABELS.get(cat, cat))}<br>{clean(lane)}"
        if shapes:
            text += f"<br>shapes {clean(shapes)}"
        texts.append(text)
    return texts


def _segments(start: np.ndarray, end: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each event becomes a start → end segment followed by a NaN gap. Float arrays (not lists
    with None) let plotly skip its per-element validation: 10× faster figures."""
    n = len(start)
    xs = np.full(3 * n, np.nan)
    ys = np.full(3 * n, np.nan)
    xs[0::3], xs[1::3] = start, end
    ys[0::3] = ys[1::3] = y
    return xs, ys


def _category_traces(sub: pd.DataFrame, y: np.ndarray, cat: str, colour: str, *, span_ms: float,
                     width_px: float) -> list[go.Scattergl]:
    """The two traces of one category's events: their segments, and an invisible hover marker each."""
    start = sub["start_ms"].to_numpy(np.float64)
    # Zero-length events still get a visible sliver (1/5000 of the window).
    end = start + np.maximum(sub["dur_us"].to_numpy(np.float64) / 1000.0, span_ms / 5000)
    xs, ys = _segments(start, end, y)
    name = CATEGORY_LABELS.get(cat, cat or "(no category)")
    segments = go.Scattergl(
        x=xs, y=ys, mode="lines", name=name, legendgroup=name, hoverinfo="skip",
        line={"width": width_px, "color": colour}, connectgaps=False,
    )
    # Hover text once per event, on an invisible marker at its middle: three copies (one
    # per segment end) would triple the payload sent to the browser.
    markers = go.Scattergl(
        x=(start + end) / 2, y=y, text=np.asarray(_hover(sub), dtype=object),
        mode="markers", name=name,
        legendgroup=name, showlegend=False, marker={"size": width_px, "color": colour, "opacity": 0},
        hovertemplate="%{text}<extra></extra>",
    )
    return [segments, markers]


def make_timeline_figure(timeline: Timeline, *, title: str | None = None) -> go.Figure:
    """Return the timeline figure: x in ms from the window start, one row per lane and depth.

    Events are drawn as thick WebGL line segments (one trace per category), which stays fluid
    for tens of thousands of events where one shape per event would not; hovering the middle of
    an event shows its name, duration, category, lane and input shapes.
    """
    events = timeline.events
    rows_of_events, ticks, labels, rows = lane_rows(timeline)
    # Row r is drawn at y = -r on a normal axis: Streamlit's plotly.js draws WebGL traces wrongly
    # on a reversed axis (everything collapses to one edge), so the top-down order is made with
    # negative values instead of autorange="reversed".
    y = -rows_of_events.astype(np.float64)
    height = int(min(1600, max(300, 130 + rows * 18)))
    width_px = float(max(2.0, min(12.0, (height - 130) / rows * 0.7)))
    span_ms = (timeline.end_us - timeline.start_us) / 1000.0
    traces: list[go.Scattergl] = []
    cats = sorted(events["cat"].unique()) if len(events) else []
    for i, cat in enumerate(cats):
        mask = (events["cat"] == cat).to_numpy()
        traces += _category_traces(events[mask], y[mask], cat, _COLOURS.get(cat, _PALETTE[i % len(_PALETTE)]),
                                   span_ms=span_ms, width_px=width_px)
    fig = go.Figure(data=traces)
    for tick in ticks[1:]:  # a thin rule between lanes
        fig.add_hline(y=-(tick - 0.5), line={"width": 1, "color": "rgba(120,120,120,0.35)"})
    fig.update_layout(
        title={"text": title, "x": 0.01} if title else None,
        height=height,
        # Room above the plot for the title and the legend row, so neither covers the first lane.
        margin={"l": 10, "r": 10, "t": 90 if title else 60, "b": 40},
        hovermode="closest",
        hoverdistance=40,
        dragmode="zoom",
        legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0, "title": {"text": ""}},
    )
    fig.update_xaxes(title_text="ms since window start", range=[0, span_ms], showgrid=True, zeroline=False)
    fig.update_yaxes(
        tickvals=[-t for t in ticks], ticktext=[html.escape(label) for label in labels], automargin=True,
        range=[-(rows - 0.5), 0.5], showgrid=False, zeroline=False, fixedrange=False,
    )
    return fig
