"""System sample charts: CPU %, memory and GPU over the run's time (charts layer).

Vega-Lite specs (``st.vega_lite_chart``), as the Overview's, Metrics' and Timeline's charts
(app.charts.steps, app.charts.curves): the System tab, opened first in a browser session, then
needs no plotly.js (~4.7 MB to load and compile, benchmarks/README.md, issue 16).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

import pandas as pd

from app.charts.curves import RANK_COLOURS

__all__ = ["SeriesUnit", "system_chart"]


class SeriesUnit(StrEnum):
    """What a system chart's columns measure."""

    PERCENT = "percent"  # plotted as is
    BYTES = "bytes"  # plotted in MiB


_AXIS_TITLE = {SeriesUnit.PERCENT: "%", SeriesUnit.BYTES: "MiB"}
_SCALE = {SeriesUnit.PERCENT: 1.0, SeriesUnit.BYTES: 1 / 2**20}


def _num(v: float) -> float | None:
    f = float(v)
    return float(f"{f:.7g}") if math.isfinite(f) else None


def _rows(system: pd.DataFrame, columns: list[str], unit: SeriesUnit,
          labels: Mapping[str, str]) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per sample and line (``series``: its label, "· rank N" when there are several
    ranks), and the lines in drawing order; samples without a number are left out."""
    rows: list[dict[str, Any]] = []
    order: list[str] = []
    groups = system.groupby("rank", sort=True) if "rank" in system.columns else [(0, system)]
    multi = "rank" in system.columns and system["rank"].nunique() > 1
    for rank, part in groups:
        times = pd.to_numeric(part["time"], errors="coerce")
        for col in columns:
            if col not in part.columns:
                continue
            y = pd.to_numeric(part[col], errors="coerce") * _SCALE[unit]
            if y.notna().sum() == 0:
                continue
            label = labels.get(col, col)
            name = f"{label} · rank {rank}" if multi else label
            order.append(name)
            rows += [{"series": name, "time_s": _num(t), "value": _num(v)}
                     for t, v in zip(times, y) if v == v and t == t]
    return rows, order


def system_chart(system: pd.DataFrame, columns: list[str], *, unit: SeriesUnit, title: str,
                 labels: Mapping[str, str] | None = None, height: int = 300) -> dict[str, Any]:
    """Return a Vega-Lite spec: one line per (column, rank) against ``time`` (seconds since start).

    ``unit`` is ``SeriesUnit.PERCENT`` (plotted as is) or ``SeriesUnit.BYTES`` (plotted in MiB);
    ``labels`` names the lines (the column name otherwise). The legend is shown even for one line
    (the label is all that says what the line is, e.g. memory used vs available) and sits above the
    plot, and the y axis takes a fixed width, so the tab's charts keep one plot width and their time
    axes line up. The y axis starts at 0, so a flat 99.5–100 % does not look like a swing. Hovering
    shows the nearest sample's line, time and value; the wheel zooms the time axis.
    """
    rows, order = _rows(system, columns, unit, labels or {})
    x = {"field": "time_s", "type": "quantitative", "title": "time since start (s)", "scale": {"zero": False, "nice": False}}
    y = {"field": "value", "type": "quantitative", "title": _AXIS_TITLE[unit], "scale": {"zero": True},
         "axis": {"minExtent": 56, "maxExtent": 56}}
    colours = [RANK_COLOURS[i % len(RANK_COLOURS)] for i in range(len(order))]
    color = {"field": "series", "type": "nominal", "title": None, "sort": order,
             "scale": {"domain": order, "range": colours}, "legend": {"orient": "top", "labelLimit": 360}}
    tooltip = [{"field": "series", "title": "line"},
               {"field": "time_s", "title": "time since start (s)", "format": ".1f"},
               {"field": "value", "title": _AXIS_TITLE[unit], "format": ",.1f" if unit is SeriesUnit.BYTES else ".1f"}]
    layers: list[dict[str, Any]] = [
        {"mark": {"type": "line", "strokeWidth": 2, "clip": True}, "encoding": {"x": x, "y": y, "color": color}},
        # The nearest sample is highlighted and its values shown: a line's own tooltip needs the
        # pointer exactly on the line.
        {"mark": {"type": "point", "filled": True, "size": 40, "clip": True},
         "encoding": {"x": x, "y": y, "color": color, "tooltip": tooltip,
                      "opacity": {"condition": {"param": "near", "empty": False, "value": 1}, "value": 0}},
         "params": [{"name": "near", "select": {"type": "point", "on": "mouseover", "nearest": True,
                                                "clear": "mouseout"}},
                    {"name": "zoom", "select": {"type": "interval", "encodings": ["x"]}, "bind": "scales"}]},
    ]
    return {"title": {"text": title, "anchor": "start"}, "data": {"values": rows}, "layer": layers,
            "height": height}
