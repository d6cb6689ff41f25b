"""Operator charts: the top operators and the top modules by time (charts layer).

Vega-Lite specs (``st.vega_lite_chart``), as the Overview's charts (app.charts.steps): the
Operators tab, opened after the Overview, then needs no plotly.js in the browser.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

__all__ = ["top_ops_chart", "top_modules_chart"]

_LABEL = {"self_us": "self time", "total_us": "total time", "device_self_us": "device self time"}


def _ms(values: pd.Series) -> list[float]:
    return [round(float(v), 4) for v in (pd.to_numeric(values, errors="coerce").fillna(0.0) / 1e3)]


def _bars(rows: list[dict[str, Any]], order: list[str], *, x_title: str, tooltip: list[dict[str, Any]],
          color: dict[str, Any] | None = None, extra: int = 80) -> dict[str, Any]:
    encoding: dict[str, Any] = {
        "y": {"field": "name", "type": "nominal", "sort": order, "title": None, "axis": {"labelLimit": 420}},
        "x": {"field": "ms", "type": "quantitative", "title": x_title, "stack": "zero"},
        "tooltip": tooltip,
    }
    if color is not None:
        encoding["color"] = color
    return {"layer": [{"data": {"values": rows}, "mark": {"type": "bar"}, "encoding": encoding}],
            "height": max(260, 22 * len(order) + extra)}


def top_ops_chart(ops: pd.DataFrame, *, n: int = 20, value: str = "self_us") -> dict[str, Any]:
    """Horizontal bars of the ``n`` largest ``value`` (µs) of the op table, largest on top (ms)."""
    top = ops.nlargest(n, value) if len(ops) else ops
    names = top["name"].astype(str).tolist()
    calls = top["calls"].tolist() if "calls" in top.columns else [None] * len(top)
    rows = [{"name": name, "ms": ms, "calls": None if c is None else int(c)}
            for name, ms, c in zip(names, _ms(top[value]), calls)]
    label = _LABEL.get(value, value)
    tooltip = [{"field": "name", "title": "operator"}, {"field": "ms", "title": f"{label} (ms)", "format": ".3f"}]
    if "calls" in top.columns:
        tooltip.append({"field": "calls", "title": "calls"})
    return _bars(rows, list(dict.fromkeys(names)), x_title=f"{label} (ms)", tooltip=tooltip)


def top_modules_chart(modules: pd.DataFrame, *, n: int = 20, value: str = "self_us") -> dict[str, Any]:
    """Horizontal bars of the ``n`` modules with the largest ``value`` (µs, ``self_us`` or
    ``total_us`` of compute_module_table), largest on top (ms); self time is split into its
    forward and backward parts."""
    top = modules.nlargest(n, value) if len(modules) else modules
    names = top["module"].astype(str).tolist()
    calls = [int(c) for c in top["calls"]]
    parts: tuple[tuple[str, str], ...]
    if value == "self_us":
        parts = (("forward_self_us", "forward"), ("backward_self_us", "backward"))
        title = "self time (ms): ops run directly in the module"
    else:
        parts = ((value, "total"),)
        title = "total time (ms): the module and its submodules"
    rows = [{"name": name, "part": part, "ms": ms, "calls": c}
            for col, part in parts for name, ms, c in zip(names, _ms(top[col]), calls)]
    tooltip = [{"field": "name", "title": "module"}, {"field": "part", "title": "part"},
               {"field": "ms", "title": "time (ms)", "format": ".3f"}, {"field": "calls", "title": "calls"}]
    color = {"field": "part", "type": "nominal", "title": None, "legend": {"orient": "top"},
             "scale": {"domain": [p for _, p in parts]}}
    return _bars(rows, list(dict.fromkeys(names)), x_title=title, tooltip=tooltip, color=color, extra=100)
