"""GPU kernel charts: time share of the top kernels, device busy/idle per step (charts layer)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

from app.analysis.compare.labels import unique_labels

__all__ = ["make_kernel_share_figure", "make_gpu_busy_figure", "OTHER_COLOR"]

# The "other (N kernels)" slice is grey so it never reads as one more kernel; the kernels take
# colours from a palette with no grey in it (D3's grey left out), cycling past 19 kernels.
OTHER_COLOR = "#bdbdbd"
_KERNEL_COLORS = list(dict.fromkeys(
    c.lower() for c in (*qualitative.Plotly, *qualitative.D3) if c.upper() != "#7F7F7F"
))

# Horizontal legend above the plot, clear of the x-axis title.
_LEGEND_TOP = {"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0}


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def make_kernel_share_figure(kernels: pd.DataFrame, *, n: int = 15) -> go.Figure:
    """Donut of the kernels' time (``total_us``): the ``n`` largest and the rest as "other"."""
    k = kernels.sort_values("total_us", ascending=False)
    top, rest = k.head(n), k.iloc[n:]
    full = [str(x) for x in top["name"]]
    labels = unique_labels([_short(x) for x in full])
    values = list(pd.to_numeric(top["total_us"], errors="coerce") / 1e3)
    colors = [_KERNEL_COLORS[i % len(_KERNEL_COLORS)] for i in range(len(labels))]
    if len(rest):
        colors.append(OTHER_COLOR)
        labels.append(f"other ({len(rest)} kernels)")
        full.append(labels[-1])
        values.append(float(pd.to_numeric(rest["total_us"], errors="coerce").sum()) / 1e3)
    fig = go.Figure(
        go.Pie(
            labels=labels,
            values=values,
            customdata=full,
            hole=0.45,
            sort=False,
            marker={"colors": colors},
            textinfo="percent",
            hovertemplate="%{customdata}<br>%{value:.3f} ms (%{percent})<extra></extra>",
        )
    )
    fig.update_layout(
        height=420,
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        showlegend=True,
        legend={"font": {"size": 10}},
    )
    return fig


def make_gpu_busy_figure(steps: pd.DataFrame) -> go.Figure:
    """Per profiled step: % of the step the device ran kernels, copies or memsets, and % idle.

    ``steps`` is the trace engine's step table (``duration_us``, ``kernel_us``, ``memcpy_us``,
    ``memset_us``, ``communication_us``, ``rank``, ``step``).
    """
    dur = pd.to_numeric(steps["duration_us"], errors="coerce").where(lambda s: s > 0)
    busy_cols = [c for c in ("kernel_us", "memcpy_us", "memset_us", "communication_us") if c in steps.columns]
    busy = steps[busy_cols].apply(pd.to_numeric, errors="coerce").fillna(0).sum(axis=1)
    busy_pct = (busy / dur * 100).clip(upper=100)
    x = [f"r{r}·{s}" if steps["rank"].nunique() > 1 else str(s) for r, s in zip(steps["rank"], steps["step"])]
    fig = go.Figure(
        [
            go.Bar(x=x, y=busy_pct, name="busy", hovertemplate="busy %{y:.1f}%<extra></extra>"),
            go.Bar(x=x, y=100 - busy_pct, name="idle", hovertemplate="idle %{y:.1f}%<extra></extra>"),
        ]
    )
    fig.update_layout(
        barmode="stack",
        yaxis_title="% of step",
        xaxis_title="profiled step",
        height=300,
        xaxis={"type": "category"},
        yaxis={"range": [0, 100]},
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        legend=_LEGEND_TOP,
    )
    return fig
