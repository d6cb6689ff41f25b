"""Vega-Lite spec of a trace window: lanes of thread/stream rows, one colour per event category,
names on the wide slices, flow arrows (charts layer: tables → specs, no Streamlit).

Vega-Lite rather than plotly, as the Run page's other first-opened charts (app.charts.steps): the
Timeline tab then needs no plotly.js in the browser (~4.7 MB to load and compile; benchmarks/README.md,
issue 16). A window holds at most ``SHAPE_BOUND`` shapes (app.analysis.trace.timeline): the spec
has one row per shape, so the browser's SVG stays bounded whatever the trace's size.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from app.analysis.trace.timeline import Timeline

__all__ = ["CATEGORY_LABELS", "MAX_LABELS", "timeline_chart", "lane_rows", "slice_labels"]

# Colours for categories outside _COLOURS (plotly's qualitative sets, as the app's other charts).
_PALETTE = ("#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A", "#19D3F3", "#FF6692", "#B6E880", "#FF97FF",
            "#FECB52", "#88CCEE", "#CC6677", "#DDCC77", "#117733", "#332288", "#AA4499", "#44AA99", "#999933",
            "#882255", "#661100", "#6699CC", "#888888")
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


def slice_labels(timeline: Timeline, y: np.ndarray, *, plot_px: float = PLOT_PX,
                 max_labels: int = MAX_LABELS) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(x, y, text) of the names drawn on slices wide enough to hold some of them at a
    ``plot_px`` wide plot: the name cut to the slice's width (with "…"), the widest
    ``max_labels`` slices only; merged shapes are labelled with their event count. Plain text:
    the chart writes it as SVG text, never as markup."""
    events = timeline.events
    span_ms = max((timeline.end_us - timeline.start_us) / 1000.0, 1e-9)
    width = (events["end_ms"] - events["start_ms"]).to_numpy(np.float64)
    chars = np.floor(width / span_ms * plot_px / _CHAR_PX).astype(np.int64) - 1
    picked = _labelled(timeline, plot_px=plot_px, max_labels=max_labels)
    names = events["name"].to_numpy(dtype=object)
    counts = events["count"].to_numpy(np.int64)
    texts = []
    for i in picked.tolist():
        text = f"{counts[i]:,} events" if counts[i] > 1 else str(names[i])
        n = int(chars[i])
        texts.append(text if len(text) <= n else text[: max(1, n - 1)] + "…")
    mid = (events["start_ms"].to_numpy(np.float64) + events["end_ms"].to_numpy(np.float64)) / 2
    return mid[picked], y[picked], texts




def _short(text: str) -> str:
    return text if len(text) <= _NAME_CHARS else text[: _NAME_CHARS - 1] + "…"


def _shape_rows(timeline: Timeline, rows_of_events: np.ndarray, span_ms: float) -> pd.DataFrame:
    """One row per shape: its row, x extent (a zero-length event keeps a sliver of 1/2000 of the
    window, about a pixel), category label, hover texts and its label (empty when not written)."""
    events = timeline.events
    start = events["start_ms"].to_numpy(np.float64)
    end = np.maximum(events["end_ms"].to_numpy(np.float64), start + span_ms / 2000)
    memo: dict[str, str] = {}  # names and lanes repeat a lot: each distinct one is cut once

    def short(values: pd.Series) -> list[str]:
        out = []
        for v in values.astype(str).tolist():
            cut = memo.get(v)
            if cut is None:
                cut = memo[v] = _short(v)
            out.append(cut)
        return out

    label = np.full(len(events), "", dtype=object)
    label[_labelled(timeline)] = slice_labels(timeline, rows_of_events.astype(np.float64))[2]
    cats = events["cat"].astype(str)
    dur = events["dur_us"].to_numpy(np.float64)
    return pd.DataFrame({
        "row": rows_of_events.astype(np.int64),
        "x0": np.round(start, 6), "x1": np.round(end, 6),
        "cat": [CATEGORY_LABELS.get(c, c or "(no category)") for c in cats],
        "name": short(events["name"]), "lane": short(events["lane"]),
        "shapes": short(events["input_shapes"].fillna("")) if "input_shapes" in events else "",
        "dur": [f"{d:,.1f} µs" for d in dur.tolist()],
        "count": events["count"].to_numpy(np.int64),
        "label": label,
    })


def _labelled(timeline: Timeline, *, plot_px: float = PLOT_PX, max_labels: int = MAX_LABELS) -> np.ndarray:
    """The positions (in ``timeline.events``) of the shapes slice_labels writes on, in its order."""
    events = timeline.events
    span_ms = max((timeline.end_us - timeline.start_us) / 1000.0, 1e-9)
    width = (events["end_ms"] - events["start_ms"]).to_numpy(np.float64)
    chars = np.floor(width / span_ms * plot_px / _CHAR_PX).astype(np.int64) - 1
    picked = np.flatnonzero(chars >= _MIN_LABEL_CHARS)
    if len(picked) > max_labels:
        picked = picked[np.argsort(-width[picked], kind="stable")[:max_labels]]
    return picked


# The hover box: the event's name as its heading, then its duration, category, lane and shapes;
# a merged shape says how many events it stands for. (An object tooltip: entries it lacks are not shown.)
_TOOLTIP = (
    "datum.count > 1 ? {'title': format(datum.count, ',') + ' events merged at this zoom', 'over': datum.dur, "
    "'longest': datum.name, 'lane': datum.lane, 'to see them apart': 'narrow the window'} "
    ": datum.shapes ? {'title': datum.name, 'duration': datum.dur, 'category': datum.cat, 'lane': datum.lane, "
    "'input shapes': datum.shapes} "
    ": {'title': datum.name, 'duration': datum.dur, 'category': datum.cat, 'lane': datum.lane}"
)


def _flow_layers(timeline: Timeline, offsets: dict[str, int]) -> list[dict[str, Any]]:
    """Launch → device-event arrows: a line per flow with a triangle at the device event, pointing
    the way the arrow goes (rows grow downwards)."""
    flows = timeline.flows
    if flows.empty:
        return []
    rows: list[dict[str, Any]] = []
    for f in flows.itertuples():
        y0, y1 = offsets[str(f.from_lane)] + int(f.from_depth), offsets[str(f.to_lane)] + int(f.to_depth)
        rows.append({"x0": float(f.from_ms), "x1": float(f.to_ms), "y0": y0, "y1": y1,
                     "shape": "triangle-down" if y1 >= y0 else "triangle-up"})
    data = {"values": rows}
    x = {"field": "x0", "type": "quantitative"}
    y = {"field": "y0", "type": "quantitative"}
    return [
        {"data": data, "mark": {"type": "rule", "color": _FLOW_COLOUR, "strokeWidth": 1, "clip": True},
         "encoding": {"x": x, "y": y, "x2": {"field": "x1"}, "y2": {"field": "y1"},
                      "tooltip": {"value": "launch → kernel (matched by correlation id)"}}},
        {"data": data, "mark": {"type": "point", "filled": True, "size": 50, "color": _FLOW_COLOUR, "clip": True},
         "encoding": {"x": {**x, "field": "x1"}, "y": {**y, "field": "y1"}, "shape": {"field": "shape", "type": "nominal",
                      "scale": None}}},
    ]


def timeline_chart(timeline: Timeline, *, title: str | None = None) -> dict[str, Any]:
    """Return the timeline as a Vega-Lite spec: x in ms from the window start, one row per lane
    and depth, top to bottom in ``timeline.lanes`` order, each lane's name at its first row.

    One rect per shape (merged runs of sub-pixel slices paler), coloured by category; names are
    written on the slices wide enough for them (:func:`slice_labels`); flow arrows (when the
    timeline has them) go from each launch to its device event. Hovering a shape shows its name,
    duration, category, lane and input shapes (or, for a merged run, how many events it stands
    for). The mouse wheel zooms, dragging pans, a double-click resets.
    """
    events = timeline.events
    rows_of_events, ticks, labels, rows = lane_rows(timeline)
    offsets = dict(zip(labels, (int(t) for t in ticks)))
    span_ms = max((timeline.end_us - timeline.start_us) / 1000.0, 1e-9)
    shapes = _shape_rows(timeline, rows_of_events, span_ms)
    height = int(min(_MAX_HEIGHT, max(240, 70 + rows * _ROW_PX)))
    band = float(max(0.1, min(0.45, (height - 70) / rows / _ROW_PX * 0.36)))
    cats = sorted(events["cat"].astype(str).unique()) if len(events) else []
    domain = [CATEGORY_LABELS.get(c, c or "(no category)") for c in cats]
    colours = [_COLOURS.get(c, _PALETTE[i % len(_PALETTE)]) for i, c in enumerate(cats)]
    tick_names = json.dumps({str(int(t)): _short(lane) for t, lane in zip(ticks, labels)})
    x = {"field": "x0", "type": "quantitative", "title": "ms since window start",
         "scale": {"domain": [0, span_ms], "zero": False, "nice": False}}
    y = {"field": "y0", "type": "quantitative", "title": None,
         "scale": {"domain": [rows - 0.5, -0.5], "nice": False, "zero": False},
         "axis": {"values": [int(t) for t in ticks], "labelExpr": f"{tick_names}[datum.value] || ''",
                  "grid": False, "labelLimit": 320, "ticks": False, "domain": False,
                  "labelOverlap": False}}  # every lane named: Vega would drop labels it finds crowded
    layers: list[dict[str, Any]] = [
        {"transform": [{"calculate": f"datum.row - {band}", "as": "y0"}, {"calculate": f"datum.row + {band}", "as": "y1"}],
         "mark": {"type": "rect", "clip": True, "tooltip": {"signal": _TOOLTIP}},
         "encoding": {"x": x, "x2": {"field": "x1"}, "y": y, "y2": {"field": "y1"},
                      "color": {"field": "cat", "type": "nominal", "title": None,
                                "scale": {"domain": domain, "range": colours},
                                "legend": {"orient": "top", "labelLimit": 320}},
                      "opacity": {"condition": {"test": "datum.count > 1", "value": 0.45}, "value": 1.0}},
         "params": [{"name": "zoom", "select": {"type": "interval", "encodings": ["x", "y"]}, "bind": "scales"}]},
        {"transform": [{"filter": "datum.label != ''"}, {"calculate": "(datum.x0 + datum.x1) / 2", "as": "mid"},
                       {"calculate": "datum.row", "as": "y0"}],
         "mark": {"type": "text", "fontSize": 10, "color": "#111111", "baseline": "middle", "clip": True},
         "encoding": {"x": {**x, "field": "mid"}, "y": y, "text": {"field": "label"}}},
    ]
    if len(ticks) > 1:  # a thin rule between lanes
        layers.append({"data": {"values": [{"y0": t - 0.5} for t in ticks[1:]]},
                       "mark": {"type": "rule", "color": "rgba(120,120,120,0.35)", "strokeWidth": 1},
                       "encoding": {"y": {"field": "y0", "type": "quantitative"}}})
    layers += _flow_layers(timeline, offsets)
    # The shapes as a table: Streamlit sends a spec's top-level data to the browser as Arrow.
    spec: dict[str, Any] = {"data": {"values": shapes}, "layer": layers, "height": height}
    if title:
        spec["title"] = {"text": title, "anchor": "start"}
    return spec
