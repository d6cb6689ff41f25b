"""System sample charts: CPU %, memory and GPU over the run's time (charts layer)."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

import pandas as pd
import plotly.graph_objects as go

__all__ = ["SeriesUnit", "make_system_figure"]


class SeriesUnit(StrEnum):
    """What a system chart's columns measure."""

    PERCENT = "percent"  # plotted as is
    BYTES = "bytes"  # plotted in MiB


def make_system_figure(system: pd.DataFrame, columns: list[str], *, unit: SeriesUnit, title: str,
                       labels: Mapping[str, str] | None = None) -> go.Figure:
    """One line per (column, rank) against ``time`` (seconds since start).

    ``unit`` is ``SeriesUnit.PERCENT`` (plotted as is) or ``SeriesUnit.BYTES`` (plotted in MiB); ``labels`` names
    the lines (the column name otherwise). The y axis starts at 0, so a flat 99.5–100 % does not
    look like a swing.
    """
    fig = go.Figure()
    scale = 1 / 2**20 if unit == SeriesUnit.BYTES else 1.0
    groups = system.groupby("rank", sort=True) if "rank" in system.columns else [(0, system)]
    multi = "rank" in system.columns and system["rank"].nunique() > 1
    for rank, part in groups:
        for col in columns:
            if col not in part.columns:
                continue
            y = pd.to_numeric(part[col], errors="coerce") * scale
            if y.notna().sum() == 0:
                continue
            label = (labels or {}).get(col, col)
            name = f"{label} · rank {rank}" if multi else label
            fig.add_trace(go.Scatter(x=part["time"], y=y, mode="lines", name=name))
    fig.update_layout(
        title=title,
        xaxis_title="time since start (s)",
        yaxis_title="MiB" if unit == SeriesUnit.BYTES else "%",
        height=300,
        # Plotly hides the legend of a one-line chart; the column name is the only label saying
        # what the line is (e.g. system_memory_used_bytes vs available).
        showlegend=True,
        # Legend above the plot, not beside it: every chart of the tab keeps the same plot width,
        # so their time axes line up.
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "x": 0},
        margin={"l": 10, "r": 10, "t": 70, "b": 10},
    )
    fig.update_yaxes(rangemode="tozero")
    return fig
