"""Operator charts: the top operators and the top modules by time (charts layer)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

__all__ = ["make_top_ops_figure", "make_top_modules_figure"]


def make_top_ops_figure(ops: pd.DataFrame, *, n: int = 20, value: str = "self_us") -> go.Figure:
    """Horizontal bars of the ``n`` largest ``value`` (µs) of the op table, largest on top (ms)."""
    top = ops.nlargest(n, value) if len(ops) else ops
    top = top.iloc[::-1]
    calls = top["calls"] if "calls" in top.columns else None
    fig = go.Figure(
        go.Bar(
            x=pd.to_numeric(top[value], errors="coerce") / 1e3,
            y=top["name"].astype(str),
            orientation="h",
            customdata=calls,
            hovertemplate="%{y}<br>%{x:.3f} ms"
            + (" in %{customdata} calls" if calls is not None else "")
            + "<extra></extra>",
        )
    )
    label = {"self_us": "self time", "total_us": "total time", "device_self_us": "device self time"}.get(
        value, value
    )
    fig.update_layout(
        xaxis_title=f"{label} (ms)",
        height=max(260, 22 * len(top) + 80),
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        yaxis={"automargin": True},
    )
    return fig


def make_top_modules_figure(modules: pd.DataFrame, *, n: int = 20, value: str = "self_us") -> go.Figure:
    """Horizontal bars of the ``n`` modules with the largest ``value`` (µs, ``self_us`` or
    ``total_us`` of compute_module_table), largest on top (ms); self time is split into its
    forward and backward parts."""
    top = modules.nlargest(n, value) if len(modules) else modules
    top = top.iloc[::-1]
    labels = top["module"].astype(str)
    fig = go.Figure()
    if value == "self_us":
        for col, name in (("forward_self_us", "forward"), ("backward_self_us", "backward")):
            fig.add_bar(x=pd.to_numeric(top[col], errors="coerce") / 1e3, y=labels, orientation="h", name=name,
                        customdata=top["calls"],
                        hovertemplate="%{y}<br>" + name + " %{x:.3f} ms (%{customdata} calls)<extra></extra>")
        title = "self time (ms): ops run directly in the module"
    else:
        fig.add_bar(x=pd.to_numeric(top[value], errors="coerce") / 1e3, y=labels, orientation="h", name="total",
                    customdata=top["calls"],
                    hovertemplate="%{y}<br>%{x:.3f} ms incl. submodules (%{customdata} calls)<extra></extra>")
        title = "total time (ms): the module and its submodules"
    fig.update_layout(
        barmode="stack",
        xaxis_title=title,
        height=max(260, 22 * len(top) + 100),
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        yaxis={"automargin": True},
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom"},
    )
    return fig
