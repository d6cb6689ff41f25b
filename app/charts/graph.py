"""Plotly figures of the model's structure: a zoomable view of the graph's SVG and an icicle of
the module tree (charts layer: tables → figures, no Streamlit)."""
from __future__ import annotations

import base64
import html

import pandas as pd
import plotly.graph_objects as go

from app.analysis.module_tree import ROOT_LABEL

__all__ = ["make_svg_figure", "make_module_icicle_figure"]


def make_svg_figure(svg: str, width_pt: float, height_pt: float, *, height_px: int = 700) -> go.Figure:
    """Return a figure showing ``svg`` as an image on fixed-ratio axes, so plotly's zoom (drag a
    box, scroll) and pan work on it. The SVG is passed as a data-URI image, never as HTML, so
    nothing in it runs."""
    uri = "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")
    fig = go.Figure()
    # An invisible trace gives the axes their extent (plotly needs data to autorange).
    fig.add_trace(go.Scatter(x=[0, width_pt], y=[0, height_pt], mode="markers", marker={"opacity": 0},
                             hoverinfo="skip", showlegend=False))
    fig.add_layout_image(source=uri, xref="x", yref="y", x=0, y=height_pt, sizex=width_pt, sizey=height_pt,
                         sizing="stretch", layer="below")
    fig.update_xaxes(visible=False, range=[0, width_pt], constrain="domain")
    fig.update_yaxes(visible=False, range=[0, height_pt], scaleanchor="x", scaleratio=1, constrain="domain")
    fig.update_layout(height=height_px, margin={"l": 0, "r": 0, "t": 0, "b": 0}, dragmode="pan",
                      plot_bgcolor="white")
    return fig


def make_module_icicle_figure(table: pd.DataFrame, *, value: str = "params", height: int = 520) -> go.Figure:
    """Return an icicle of the module tree (the table of ``compute_module_table``), each module
    sized by ``value`` ("params" or "flops", children included). Click a module to zoom into it."""
    if value not in ("params", "flops"):
        raise ValueError(f"value must be 'params' or 'flops', got {value!r}")
    rows = table
    values = rows[value].clip(lower=0)
    # branchvalues="total" needs each parent to be at least the sum of its children, which holds
    # for params and flops as the agent writes them (children included).
    labels = [html.escape(p.rsplit(".", 1)[-1]) if p != ROOT_LABEL else ROOT_LABEL for p in rows["path"]]
    custom = list(zip(rows["type"], rows["params"], rows["flops"], rows["path"]))
    fig = go.Figure(go.Icicle(
        ids=rows["path"], parents=rows["parent"], labels=labels, values=values, branchvalues="total",
        customdata=[[html.escape(str(t)), p, f, html.escape(str(path))] for t, p, f, path in custom],
        hovertemplate="<b>%{customdata[3]}</b> (%{customdata[0]})<br>params %{customdata[1]:,}<br>"
                      "FLOPs %{customdata[2]:,}<br>%{percentRoot:.1%} of the model<extra></extra>",
        root={"color": "lightgrey"}, tiling={"orientation": "v"}, maxdepth=4,
    ))
    fig.update_layout(height=height, margin={"l": 0, "r": 0, "t": 10, "b": 0})
    return fig
