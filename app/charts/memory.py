"""Charts of memory over time: allocated/reserved with the peak marked (a Vega-Lite spec), and
memory by category stacked (a plotly figure) (charts layer: tables → charts, no Streamlit)."""
from __future__ import annotations

import html
import math
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

__all__ = ["byte_unit", "memory_timeline_chart", "make_category_figure", "CATEGORY_COLOURS"]

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
    and its value written beside it. Hovering shows the nearest event's x, allocated and reserved;
    the wheel zooms x. A Vega-Lite spec, not a plotly figure: the Memory tab, opened first in a
    browser session, then needs no plotly.js (benchmarks/README.md, issue 16).
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
    color = {"field": "what", "type": "nominal", "title": None, "legend": {"orient": "top"},
             "scale": {"domain": names, "range": ["#1f77b4", "#ff7f0e"][:len(names)]}}
    xe = {"field": "x", "type": "quantitative", "title": x_title, "scale": {"zero": False, "nice": False}}
    ye = {"type": "quantitative", "title": unit, "scale": {"zero": True}}
    layers: list[dict[str, Any]] = []
    if reserved:
        layers.append({"transform": [{"calculate": "'reserved'", "as": "what"}],
                       "mark": {"type": "line", "interpolate": "step-after", "strokeWidth": 1.5, "clip": True},
                       "encoding": {"x": xe, "y": {**ye, "field": "reserved"}, "color": color}})
    layers += [
        {"transform": [{"calculate": "'allocated'", "as": "what"}],
         "mark": {"type": "area", "interpolate": "step-after", "opacity": 0.3, "clip": True},
         "encoding": {"x": xe, "y": {**ye, "field": "allocated"}, "color": color}},
        {"transform": [{"calculate": "'allocated'", "as": "what"}],
         "mark": {"type": "line", "interpolate": "step-after", "strokeWidth": 1.5, "clip": True},
         "encoding": {"x": xe, "y": {**ye, "field": "allocated"}, "color": color}},
    ]
    tooltip = [{"field": "x", "title": x_title, "format": ",.2f"},
               {"field": "allocated", "title": f"allocated ({unit})", "format": ",.2f"}]
    if reserved:
        tooltip.append({"field": "reserved", "title": f"reserved ({unit})", "format": ",.2f"})
    # The nearest event is highlighted and its totals shown (plotly's unified hover did the same).
    layers.append({"mark": {"type": "point", "filled": True, "size": 40, "color": "#1f77b4", "clip": True},
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
    spec: dict[str, Any] = {"data": {"values": rows}, "layer": layers, "height": 340}
    if title:  # SVG text: shown as written, no markup
        spec["title"] = {"text": title, "anchor": "start"}
    return spec


def make_category_figure(categories: pd.DataFrame, *, title: str | None = None) -> go.Figure:
    """Return memory held per category as stacked areas over ``time_ms`` (the table of
    ``compute_category_timeline``), parameters at the bottom like torch's own plot."""
    cols = [f"{c}_bytes" for c in CATEGORY_COLOURS if f"{c}_bytes" in categories.columns]
    top = float(categories["total_bytes"].max()) if len(categories) else 0.0
    div, unit = byte_unit(top)
    fig = go.Figure()
    for col in cols:
        name = col.removesuffix("_bytes")
        values = categories[col].to_numpy(np.float64) / div
        if not np.any(values):
            continue
        fig.add_trace(go.Scatter(
            x=categories["time_ms"], y=values, mode="lines", name=name.replace("_", " "), stackgroup="memory",
            line={"width": 0.5, "color": CATEGORY_COLOURS[name], "shape": "hv"},
            hovertemplate=f"{name} %{{y:,.2f}} {unit}<extra></extra>",
        ))
    fig.update_layout(
        title={"text": html.escape(title), "x": 0.01} if title else None,
        height=360, margin={"l": 50, "r": 10, "t": 40 if title else 20, "b": 40}, hovermode="x unified",
        legend={"orientation": "h", "y": -0.2},
    )
    fig.update_xaxes(title_text="ms since profiling started")
    fig.update_yaxes(title_text=unit, rangemode="tozero")
    return fig
