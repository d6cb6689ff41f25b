"""Plotly figure of memory by category, baseline vs candidate (charts layer: table → figure).

Input is the table of ``app.analysis.compare.memory_categories.diff_memory_categories``.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

from app.charts.memory import byte_unit

__all__ = ["make_memory_category_figure"]

_PALETTE = qualitative.Plotly


def make_memory_category_figure(table: pd.DataFrame, baseline: str, candidate: str, *, at_peak: bool = True,
                                height: int = 360) -> go.Figure:
    """Grouped bars per category (``total`` left out): the bytes each category held at the
    moment of the total peak (``at_peak``) or each category's own peak, one bar per side. A
    side without data draws no bars and says so in its legend entry."""
    body = table[table["category"] != "total"] if len(table) else table
    suffix = "bytes" if at_peak else "peak_bytes"
    cols = {baseline: f"baseline_{suffix}", candidate: f"candidate_{suffix}"}
    values = {label: pd.to_numeric(body[col], errors="coerce").astype(float).to_numpy() if len(body) else
              np.array([]) for label, col in cols.items()}
    finite = [v[np.isfinite(v)] for v in values.values()]
    top = max((float(v.max()) for v in finite if len(v)), default=0.0)
    div, unit = byte_unit(top)
    fig = go.Figure()
    for i, (label, v) in enumerate(values.items()):
        missing = len(v) > 0 and not np.isfinite(v).any()
        fig.add_bar(x=body["category"].astype(str) if len(body) else [], y=v / div,
                    name=f"{label} (no memory timeline)" if missing else label,
                    marker={"color": _PALETTE[i % len(_PALETTE)]},
                    hovertemplate=f"{label}<br>%{{x}}: %{{y:,.2f}} {unit}<extra></extra>")
    what = "at the total peak" if at_peak else "each category's own peak"
    fig.update_layout(barmode="group", title=f"Memory by category, {what}", height=height,
                      margin={"l": 50, "r": 20, "t": 50, "b": 40}, legend={"orientation": "h", "y": -0.25})
    fig.update_yaxes(title=unit)
    return fig
