"""Plotly figures of memory over time: allocated/reserved with the peak marked, and memory by
category stacked (charts layer: tables → figures, no Streamlit)."""
from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go

__all__ = ["byte_unit", "make_memory_timeline_figure", "make_category_figure", "CATEGORY_COLOURS"]

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


def make_memory_timeline_figure(
    frame: pd.DataFrame,
    *,
    x: str,
    x_title: str,
    title: str | None = None,
    peak_index: int | None = None,
) -> go.Figure:
    """Return allocated (and reserved, when the column has values) bytes over ``x``.

    ``frame`` has ``x``, ``allocated_bytes`` and optionally ``reserved_bytes``; ``peak_index``
    (a row label of ``frame``) gets a marker and an annotation with its value.
    """
    cols = [c for c in ("allocated_bytes", "reserved_bytes") if c in frame.columns and frame[c].notna().any()]
    top = float(frame[cols].max().max()) if cols and len(frame) else 0.0
    div, unit = byte_unit(top)
    fig = go.Figure()
    styles = {"allocated_bytes": ("allocated", "#1f77b4", "tozeroy"), "reserved_bytes": ("reserved", "#ff7f0e", None)}
    for col in reversed(cols):  # reserved first, so allocated is drawn on top
        label, colour, fill = styles[col]
        fig.add_trace(go.Scattergl(
            x=frame[x], y=frame[col] / div, mode="lines", name=label, line={"color": colour, "width": 1.5,
                                                                            "shape": "hv"},
            fill=fill, hovertemplate=f"{label} %{{y:,.2f}} {unit}<extra></extra>",
        ))
    if peak_index is not None and peak_index in frame.index and cols:
        px, py = frame.at[peak_index, x], float(frame.at[peak_index, "allocated_bytes"]) / div
        fig.add_trace(go.Scatter(x=[px], y=[py], mode="markers", name="peak",
                                 marker={"color": "crimson", "size": 11, "symbol": "x"},
                                 hovertemplate=f"peak %{{y:,.2f}} {unit}<extra></extra>"))
        fig.add_annotation(x=px, y=py, text=f"peak {py:,.2f} {unit}", showarrow=True, arrowhead=2, ay=-30)
    fig.update_layout(
        title={"text": html.escape(title), "x": 0.01} if title else None,
        height=340, margin={"l": 50, "r": 10, "t": 40 if title else 20, "b": 40}, hovermode="x unified",
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0.6},
    )
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text=unit, rangemode="tozero")
    return fig


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
