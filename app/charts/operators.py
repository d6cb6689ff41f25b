"""Operator charts: the top operators by time (charts layer)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

__all__ = ["make_top_ops_figure"]


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
