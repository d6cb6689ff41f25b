"""Charts of memory over time: allocated/reserved with the peak marked (a Vega-Lite spec), and
memory by category stacked (also Vega-Lite) (charts layer: tables → charts, no Streamlit)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from app.analysis.curves.smoothing import minmax_downsample_indices

__all__ = ["byte_unit", "memory_timeline_chart", "category_chart", "CATEGORY_COLOURS", "HOVER_POINTS"]

# The hover layer (a point per row, found by a Voronoi diagram over all of them) cost the browser
# about as much as the areas themselves: each of its items has a tooltip and a selection test that
# Streamlit's Vega expression interpreter evaluates (~0.4 ms an item in Chromium on 2 cores). It
# gets at most this many rows, picked by min/max so the peaks keep their hover (one per ~5 px of a
# full-width chart). The areas and lines keep every row they are given.
HOVER_POINTS = 100

# Both charts are drawn on a canvas: the hover layer's points are then no SVG elements of their own
# (Vega still hit-tests them for the tooltip), and the views are drawn faster (benchmarks/README.md,
# issue 16, wave 15). Streamlit passes ``usermeta.embedOptions`` to vega-embed.
_CANVAS = {"embedOptions": {"renderer": "canvas"}}

# Same colours as torch.profiler's own memory timeline plot, so users recognise them.
CATEGORY_COLOURS = {
    "parameter": "darkgreen",
    "optimizer_state": "goldenrod",
    "input": "black",
    "temporary": "mediumpurple",
    "activation": "red",
    "gradient": "mediumblue",
    "autograd_detail": "royalblue",
    "unknown": "grey",
}


def byte_unit(max_bytes: float) -> tuple[float, str]:
    """Return (divisor, unit name) that keeps ``max_bytes`` between 1 and 1024 of the unit."""
    for div, unit in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if max_bytes >= div:
            return float(div), unit
    return 1.0, "B"


def _num(v: float) -> float | None:
    f = float(v)
    return float(f"{f:.7g}") if math.isfinite(f) else None


def _hover_indices(values: np.ndarray) -> np.ndarray:
    """Positions of at most HOVER_POINTS of ``values``, the minimum and maximum of each bucket kept."""
    return minmax_downsample_indices(np.asarray(values, dtype=np.float64), HOVER_POINTS)


def memory_timeline_chart(
    frame: pd.DataFrame,
    *,
    x: str,
    x_title: str,
    title: str | None = None,
    peak_index: int | None = None,
) -> dict[str, Any]:
    """Return a Vega-Lite spec of allocated (and reserved, when the column has values) bytes over ``x``.

    ``frame`` has ``x``, ``allocated_bytes`` and optionally ``reserved_bytes``; both are drawn as
    steps (a total holds until the next event), allocated filled to zero, in the unit of
    :func:`byte_unit` for the largest value. ``peak_index`` (a row label of ``frame``) gets a cross
    and its value written beside it. Hovering shows the nearest event's x, allocated and reserved
    (among at most HOVER_POINTS events, the extremes kept); the wheel zooms x. A Vega-Lite spec,
    not a plotly figure: the Memory tab, opened first in a browser session, then needs no
    plotly.js (benchmarks/README.md, issue 16).
    """
    cols = [c for c in ("allocated_bytes", "reserved_bytes") if c in frame.columns and frame[c].notna().any()]
    top = float(frame[cols].max().max()) if cols and len(frame) else 0.0
    div, unit = byte_unit(top)
    reserved = "reserved_bytes" in cols
    nan = pd.Series(math.nan, index=frame.index)
    allocated = pd.to_numeric(frame["allocated_bytes"], errors="coerce") if "allocated_bytes" in cols else nan
    held = pd.to_numeric(frame["reserved_bytes"], errors="coerce") if reserved else nan
    rows = [{"x": _num(xv), "allocated": _num(a / div), "reserved": _num(r / div)}
            for xv, a, r in zip(pd.to_numeric(frame[x], errors="coerce"), allocated, held)]
    names = ["allocated", "reserved"] if reserved else ["allocated"]
    # A constant `datum` per layer names the series for the legend: a `calculate` per row would be
    # run by Streamlit's Vega expression interpreter for every row of every layer.
    legend = {"type": "nominal", "title": None, "legend": {"orient": "top"},
              "scale": {"domain": names, "range": ["#1f77b4", "#ff7f0e"][:len(names)]}}
    xe = {"field": "x", "type": "quantitative", "title": x_title, "scale": {"zero": False, "nice": False}}
    ye = {"type": "quantitative", "title": unit, "scale": {"zero": True}}
    layers: list[dict[str, Any]] = []
    if reserved:
        layers.append({"mark": {"type": "line", "interpolate": "step-after", "strokeWidth": 1.5, "clip": True},
                       "encoding": {"x": xe, "y": {**ye, "field": "reserved"}, "color": {**legend, "datum": "reserved"}}})
    allocated_colour = {**legend, "datum": "allocated"}
    layers += [
        {"mark": {"type": "area", "interpolate": "step-after", "opacity": 0.3, "clip": True},
         "encoding": {"x": xe, "y": {**ye, "field": "allocated"}, "color": allocated_colour}},
        {"mark": {"type": "line", "interpolate": "step-after", "strokeWidth": 1.5, "clip": True},
         "encoding": {"x": xe, "y": {**ye, "field": "allocated"}, "color": allocated_colour}},
    ]
    tooltip = [{"field": "x", "title": x_title, "format": ",.2f"},
               {"field": "allocated", "title": f"allocated ({unit})", "format": ",.2f"}]
    if reserved:
        tooltip.append({"field": "reserved", "title": f"reserved ({unit})", "format": ",.2f"})
    # The nearest event is highlighted and its totals shown (plotly's unified hover did the same).
    layers.append({"data": {"values": [rows[int(i)] for i in _hover_indices(allocated.to_numpy(np.float64))]},
                   "mark": {"type": "point", "filled": True, "size": 40, "color": "#1f77b4", "clip": True},
                   "encoding": {"x": xe, "y": {**ye, "field": "allocated"}, "tooltip": tooltip,
                                "opacity": {"condition": {"param": "near", "empty": False, "value": 1}, "value": 0}},
                   "params": [{"name": "near", "select": {"type": "point", "on": "mouseover", "nearest": True,
                                                          "fields": ["x"], "clear": "mouseout"}},
                              {"name": "zoom", "select": {"type": "interval", "encodings": ["x"]}, "bind": "scales"}]})
    if peak_index is not None and peak_index in frame.index and "allocated_bytes" in cols:
        py = float(frame.at[peak_index, "allocated_bytes"]) / div
        peak = [{"x": _num(frame.at[peak_index, x]), "y": _num(py), "label": f"peak {py:,.2f} {unit}"}]
        enc = {"x": xe, "y": {**ye, "field": "y"}}
        layers += [
            {"data": {"values": peak}, "mark": {"type": "point", "shape": "cross", "angle": 45, "filled": True,
                                                 "size": 140, "color": "crimson"},
             "encoding": {**enc, "tooltip": [{"field": "label", "title": "peak"}]}},
            {"data": {"values": peak}, "mark": {"type": "text", "align": "right", "dx": -10, "fontSize": 12,
                                                 "color": "crimson"},
             "encoding": {**enc, "text": {"field": "label"}}},
        ]
    spec: dict[str, Any] = {"data": {"values": rows}, "layer": layers, "height": 340, "usermeta": _CANVAS}
    if title:  # SVG text: shown as written, no markup
        spec["title"] = {"text": title, "anchor": "start"}
    return spec


def category_chart(categories: pd.DataFrame, *, title: str | None = None) -> dict[str, Any]:
    """Return a Vega-Lite spec of memory held per category as stacked areas over ``time_ms`` (the
    table of ``compute_category_timeline``), parameters at the bottom like torch's own plot.

    Values are in the unit of :func:`byte_unit` for the largest total. Every category with a
    column is drawn and named in the legend, even when it holds nothing at the timestamps kept
    (min/max of the total can drop every moment a brief one, e.g. temporaries, held memory). The
    stack is summed here: each category is an area layer from the top of the one below
    (``top_<i-1>``) to its own top (``top_<i>``), over one row per timestamp.
    Hovering shows, at the nearest timestamp (among at most HOVER_POINTS, the extremes of the
    total kept), every category's value and the total; the wheel zooms x. A Vega-Lite spec, not a
    plotly figure, so that the Memory tab needs no plotly.js in the browser (benchmarks/README.md,
    issue 16).
    """
    top = float(categories["total_bytes"].max()) if len(categories) else 0.0
    div, unit = byte_unit(top)
    names = [c for c in CATEGORY_COLOURS if f"{c}_bytes" in categories.columns]
    time_ms = pd.to_numeric(categories["time_ms"], errors="coerce").to_numpy(np.float64)
    held = {n: categories[f"{n}_bytes"].to_numpy(np.float64) / div for n in names}
    total = categories["total_bytes"].to_numpy(np.float64) / div if len(categories) else np.array([])
    labels = [n.replace("_", " ") for n in names]
    # Stacked here, not by Vega: a stack transform grouped by colour over one row per (timestamp,
    # category) cost the browser ~0.2 s more at 1,000 timestamps, and every row is an item whose
    # encodings Streamlit's Vega expression interpreter evaluates one by one.
    tops = np.cumsum(np.vstack([held[n] for n in names]), axis=0) if names else np.empty((0, len(time_ms)))
    rows = [{"time_ms": _num(t), **{f"top_{i}": _num(v) for i, v in enumerate(col)}}
            for t, col in zip(time_ms, tops.T)]
    xe = {"field": "time_ms", "type": "quantitative", "title": "ms since profiling started",
          "scale": {"zero": False, "nice": False}}
    colour = {"type": "nominal", "title": None, "legend": {"orient": "bottom"},
              "scale": {"domain": labels, "range": [CATEGORY_COLOURS[n] for n in names]}}
    layers: list[dict[str, Any]] = []
    for i, label in enumerate(labels):
        encoding = {"x": xe, "y": {"field": f"top_{i}", "type": "quantitative", "title": unit, "scale": {"zero": True}},
                    "color": {**colour, "datum": label}}
        if i:
            encoding["y2"] = {"field": f"top_{i - 1}"}
        layers.append({"mark": {"type": "area", "interpolate": "step-after", "opacity": 0.85, "clip": True},
                       "encoding": encoding})
    hover_rows = [{"time_ms": _num(time_ms[j]), **{n: _num(held[n][j]) for n in names}, "total": _num(total[j])}
                  for j in map(int, _hover_indices(total))]
    tooltip = [{"field": "time_ms", "title": "ms", "format": ",.2f"},
               *({"field": n, "title": f"{label} ({unit})", "format": ",.2f"} for n, label in zip(names, labels)),
               {"field": "total", "title": f"total ({unit})", "format": ",.2f"}]
    # The total at the nearest timestamp is marked and carries every category's value (plotly's
    # unified hover did the same).
    layers.append({"data": {"values": hover_rows},
                   "mark": {"type": "point", "filled": True, "size": 40, "color": "#333", "clip": True},
                   "encoding": {"x": xe, "y": {"field": "total", "type": "quantitative", "title": unit},
                                "tooltip": tooltip,
                                "opacity": {"condition": {"param": "near", "empty": False, "value": 1}, "value": 0}},
                   "params": [{"name": "near", "select": {"type": "point", "on": "mouseover", "nearest": True,
                                                          "fields": ["time_ms"], "clear": "mouseout"}},
                              {"name": "zoom", "select": {"type": "interval", "encodings": ["x"]}, "bind": "scales"}]})
    spec: dict[str, Any] = {"data": {"values": rows}, "layer": layers, "height": 360, "usermeta": _CANVAS}
    if title:  # SVG text: shown as written, no markup
        spec["title"] = {"text": title, "anchor": "start"}
    return spec
