"""Plotly figure of a trace window: lanes of thread/stream rows, one WebGL trace per event
category, names on the wide slices, flow arrows (charts layer: tables → figures, no Streamlit)."""
from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

from app.analysis.trace.timeline import Timeline

__all__ = ["CATEGORY_LABELS", "MAX_LABELS", "make_timeline_figure", "lane_rows", "slice_labels"]

_PALETTE = qualitative.Plotly + qualitative.Safe
_NAME_CHARS = 120
# Names are written on slices at least this many characters wide, at most MAX_LABELS of them
# (SVG text: a few hundred stay fluid), assuming a plot about PLOT_PX wide (the page's width).
MAX_LABELS = 400
PLOT_PX = 1200.0
_CHAR_PX = 6.5
_MIN_LABEL_CHARS = 4
_ROW_PX = 20
_MAX_HEIGHT = 3200
_FLOW_COLOUR = "rgba(200,30,30,0.75)"
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
    """Hover text per shape. Names, lanes and shapes repeat a lot, so each distinct one is
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
    numbers = zip(frame["dur_us"].to_numpy(np.float64).tolist(), frame["count"].to_numpy(np.int64).tolist())
    for name, cat, lane, shapes, (dur, count) in zip(*columns, numbers):
        if count > 1:
            text = (f"<b>{count:,} events</b> merged at this zoom over {dur:,.1f} µs<br>longest: {clean(name)}"
                    f"<br>{clean(lane)}<br>narrow the window to see them apart")
        else:
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
    """The traces of one category's shapes: slices, merged runs of sub-pixel slices (paler), and
    an invisible hover marker each."""
    start = sub["start_ms"].to_numpy(np.float64)
    # Zero-length events still get a visible sliver (1/2000 of the window: about a pixel).
    end = np.maximum(sub["end_ms"].to_numpy(np.float64), start + span_ms / 2000)
    merged = sub["count"].to_numpy(np.int64) > 1
    name = CATEGORY_LABELS.get(cat, cat or "(no category)")
    traces = []
    for mask, opacity, legend in ((~merged, 1.0, True), (merged, 0.45, not (~merged).any())):
        if not mask.any():
            continue
        xs, ys = _segments(start[mask], end[mask], y[mask])
        traces.append(go.Scattergl(
            x=xs, y=ys, mode="lines", name=name, legendgroup=name, hoverinfo="skip", showlegend=legend,
            opacity=opacity, line={"width": width_px, "color": colour}, connectgaps=False,
        ))
    # Hover text once per shape, on an invisible marker at its middle: three copies (one
    # per segment end) would triple the payload sent to the browser.
    traces.append(go.Scattergl(
        x=(start + end) / 2, y=y, text=np.asarray(_hover(sub), dtype=object),
        mode="markers", name=name,
        legendgroup=name, showlegend=False, marker={"size": width_px, "color": colour, "opacity": 0},
        hovertemplate="%{text}<extra></extra>",
    ))
    return traces


def slice_labels(timeline: Timeline, y: np.ndarray, *, plot_px: float = PLOT_PX,
                 max_labels: int = MAX_LABELS) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(x, y, text) of the names drawn on slices wide enough to hold some of them at a
    ``plot_px`` wide plot: the name cut to the slice's width (with "…"), the widest
    ``max_labels`` slices only; merged shapes are labelled with their event count."""
    events = timeline.events
    span_ms = max((timeline.end_us - timeline.start_us) / 1000.0, 1e-9)
    width = (events["end_ms"] - events["start_ms"]).to_numpy(np.float64)
    chars = np.floor(width / span_ms * plot_px / _CHAR_PX).astype(np.int64) - 1
    picked = np.flatnonzero(chars >= _MIN_LABEL_CHARS)
    if len(picked) > max_labels:
        picked = picked[np.argsort(-width[picked], kind="stable")[:max_labels]]
    names = events["name"].to_numpy(dtype=object)
    counts = events["count"].to_numpy(np.int64)
    texts = []
    for i in picked.tolist():
        text = f"{counts[i]:,} events" if counts[i] > 1 else str(names[i])
        n = int(chars[i])
        texts.append(html.escape(text if len(text) <= n else text[: max(1, n - 1)] + "…"))
    mid = (events["start_ms"].to_numpy(np.float64) + events["end_ms"].to_numpy(np.float64)) / 2
    return mid[picked], y[picked], texts


def _label_trace(timeline: Timeline, y: np.ndarray) -> go.Scatter | None:
    x, ys, texts = slice_labels(timeline, y)
    if not texts:
        return None
    # WebGL like the slices: plotly draws its WebGL canvas above the SVG layer, where text would hide.
    return go.Scattergl(x=x, y=ys, text=texts, mode="text", textposition="middle center", hoverinfo="skip",
                        textfont={"size": 10, "color": "#111111"}, showlegend=False, name="names")


def _flow_trace(timeline: Timeline, offsets: dict[str, int]) -> go.Scattergl | None:
    """Launch → device-event arrows: a line per flow with a triangle at the device event
    (WebGL, above the slices; pointing down or up the way the arrow goes)."""
    flows = timeline.flows
    if flows.empty:
        return None
    y0 = -(flows["from_lane"].map(offsets).to_numpy(np.float64) + flows["from_depth"].to_numpy(np.float64))
    y1 = -(flows["to_lane"].map(offsets).to_numpy(np.float64) + flows["to_depth"].to_numpy(np.float64))
    n = len(flows)
    xs, ys = np.full(3 * n, np.nan), np.full(3 * n, np.nan)
    xs[0::3], xs[1::3] = flows["from_ms"].to_numpy(np.float64), flows["to_ms"].to_numpy(np.float64)
    ys[0::3], ys[1::3] = y0, y1
    sizes = np.zeros(3 * n)
    sizes[1::3] = 9
    symbols = np.full(3 * n, "circle", dtype=object)
    symbols[1::3] = np.where(y1 <= y0, "triangle-down", "triangle-up")
    return go.Scattergl(x=xs, y=ys, mode="lines+markers", name="launch → kernel", connectgaps=False,
                        hoverinfo="skip", line={"width": 1, "color": _FLOW_COLOUR},
                        marker={"symbol": symbols, "size": sizes, "color": _FLOW_COLOUR})


def make_timeline_figure(timeline: Timeline, *, title: str | None = None) -> go.Figure:
    """Return the timeline figure: x in ms from the window start, one row per lane and depth.

    Shapes are drawn as thick WebGL line segments (one trace per category, merged runs paler),
    which stays fluid for the few thousand shapes a Timeline holds; names are written on the
    slices wide enough for them; flow arrows (when the timeline has them) go from each launch to
    its device event. Hovering the middle of a shape shows its name, duration, category, lane and
    input shapes (or, for a merged run, how many events it stands for).
    """
    events = timeline.events
    rows_of_events, ticks, labels, rows = lane_rows(timeline)
    offsets = dict(zip(labels, (int(t) for t in ticks)))
    # Row r is drawn at y = -r on a normal axis: Streamlit's plotly.js draws WebGL traces wrongly
    # on a reversed axis (everything collapses to one edge), so the top-down order is made with
    # negative values instead of autorange="reversed".
    y = -rows_of_events.astype(np.float64)
    height = int(min(_MAX_HEIGHT, max(300, 130 + rows * _ROW_PX)))
    width_px = float(max(2.0, min(14.0, (height - 130) / rows * 0.72)))
    span_ms = (timeline.end_us - timeline.start_us) / 1000.0
    traces: list[go.Scattergl] = []
    cats = sorted(events["cat"].unique()) if len(events) else []
    for i, cat in enumerate(cats):
        mask = (events["cat"] == cat).to_numpy()
        traces += _category_traces(events[mask], y[mask], cat, _COLOURS.get(cat, _PALETTE[i % len(_PALETTE)]),
                                   span_ms=span_ms, width_px=width_px)
    extra = [_label_trace(timeline, y), _flow_trace(timeline, offsets)]
    fig = go.Figure(data=traces + [t for t in extra if t is not None])
    # A thin rule between lanes, as plain layout shapes (add_hline validates each: 0.1 s a line).
    rules = [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": -(t - 0.5), "y1": -(t - 0.5),
              "line": {"width": 1, "color": "rgba(120,120,120,0.35)"}} for t in ticks[1:]]
    fig.update_layout(
        shapes=rules,
        title={"text": html.escape(title), "x": 0.01} if title else None,
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
