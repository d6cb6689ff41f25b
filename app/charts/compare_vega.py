"""The Compare page's first tab as Vega-Lite specs: step times and the waterfall (charts layer).

The same charts as app.charts.compare's plotly figures, which the self-contained HTML report keeps
(it inlines plotly.js once). On the page they are Vega-Lite, as the Run page's Overview
(app.charts.steps): a fresh browser would otherwise load and compile plotly.js (4.7 MB) before the
first tab is drawn (benchmarks/README.md, issue 16). Same content: every step of each side, the
dropped ones hollow with the reason, each side's dashed median; the waterfall's bars and labels.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["step_time_chart", "waterfall_chart"]

# plotly's first colours (app.charts.compare's _PALETTE), so a side keeps its colour in the report
_PALETTE = ("#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A", "#19D3F3", "#FF6692", "#B6E880")
_UP, _DOWN, _TOTAL = "#d62728", "#2ca02c", "#1f77b4"  # a delta that costs time is red, a saving green


def _title(text: str) -> dict[str, Any]:
    return {"text": text, "anchor": "start", "fontSize": 14}


def step_time_chart(tables: Mapping[str, pd.DataFrame], *, height: int = 380) -> dict[str, Any]:
    """Per-step times of each side (table of ``compute_step_times``), kept steps solid, warm-up
    and profiled steps hollow (the reason in the tooltip), with each side's steady-state median
    as a dashed line."""
    points, medians, sides = [], [], []
    for label, t in tables.items():
        sides.append(label)
        if len(t) == 0:
            continue
        kept = t["kept"].astype(bool)
        for step, s, k, why in zip(t["step"], t["step_time_s"], kept, t["reason"]):
            points.append({"side": label, "step": int(step), "ms": round(float(s) * 1e3, 3), "kept": bool(k),
                           "why": "steady state" if k else str(why or "dropped")})
        if kept.any():
            med = float(np.median(t.loc[kept, "step_time_s"])) * 1e3
            medians.append({"side": label, "ms": round(med, 3), "label": f"{label} median {med:.2f} ms"})
    colour = {"field": "side", "type": "nominal", "title": None, "legend": {"orient": "top"},
              "scale": {"domain": sides, "range": [_PALETTE[i % len(_PALETTE)] for i in range(len(sides))]}}
    x = {"field": "step", "type": "quantitative", "title": "step", "axis": {"format": "d", "tickMinStep": 1},
         "scale": {"zero": False}}
    y = {"field": "ms", "type": "quantitative", "title": "step time (ms)"}
    tooltip = [{"field": "side"}, {"field": "step"}, {"field": "ms", "title": "step time (ms)", "format": ".2f"},
               {"field": "why", "title": "median"}]
    layers: list[dict[str, Any]] = [
        {"data": {"values": points}, "transform": [{"filter": "datum.kept"}],
         "mark": {"type": "line", "point": {"filled": True, "size": 20}, "strokeWidth": 1},
         "encoding": {"x": x, "y": y, "color": colour, "tooltip": tooltip}},
        {"data": {"values": points}, "transform": [{"filter": "!datum.kept"}],
         "mark": {"type": "point", "filled": False, "size": 45},
         "encoding": {"x": x, "y": y, "color": colour, "tooltip": tooltip}},
    ]
    if medians:
        layers.append({"data": {"values": medians}, "mark": {"type": "rule", "strokeDash": [5, 4], "opacity": 0.7},
                       "encoding": {"y": {"field": "ms", "type": "quantitative"}, "color": colour,
                                    "tooltip": [{"field": "label", "title": "median"}]}})
    return {"title": _title("Step time per step (dashed: steady-state median)"), "layer": layers, "height": height}


def waterfall_chart(breakdown: pd.DataFrame, *, view: str = "device", height: int = 400,
                    steps: tuple[int, int] | None = None) -> dict[str, Any]:
    """Baseline mean profiled step → each category's change → candidate mean profiled step
    (per-step means, ms), from ``diff_breakdown``'s rows of one ``view``. ``steps`` (profiled
    steps averaged on each side) goes into the end labels; these are trace means, not the
    median step time of the verdict."""
    part = breakdown[breakdown["view"] == view] if len(breakdown) else breakdown
    if len(part) == 0:
        return {"title": _title("No per-step breakdown (needs traces on both sides)"),
                "layer": [{"data": {"values": []}, "mark": "bar"}], "height": height}
    step = part[part["category"] == "step"].iloc[0]
    cats = part[(part["category"] != "step") & (part["delta_us"].abs() > 0)]
    counts = [f" ({n} step{'s' if n != 1 else ''})" if steps else "" for n in (steps or (0, 0))]
    base, cand = float(step["baseline_us"]) / 1e3, float(step["candidate_us"]) / 1e3
    ends: list[tuple[str, float, float, str, str]] = [  # (bar, start, end, kind, label), ms
        (f"baseline: mean profiled step{counts[0]}", 0.0, base, "total", f"{base:.2f} ms")]
    level = base
    for name, delta in zip(cats["category"].astype(str), cats["delta_us"].astype(float) / 1e3):
        ends.append((name, level, level + delta, "up" if delta > 0 else "down", f"{delta:+.2f}"))
        level += delta
    ends.append((f"candidate: mean profiled step{counts[1]}", 0.0, cand, "total", f"{cand:.2f} ms"))
    bars = [{"bar": bar, "order": i, "start": round(a, 4), "end": round(b, 4), "top": round(max(a, b), 4),
             "kind": kind, "text": text} for i, (bar, a, b, kind, text) in enumerate(ends)]
    x = {"field": "bar", "type": "nominal", "sort": [b["bar"] for b in bars], "title": None,
         "axis": {"labelAngle": -30, "labelLimit": 220}}
    return {
        "title": _title(f"Where the time went ({view} view, per step)"),
        "layer": [
            {"data": {"values": bars}, "mark": {"type": "bar"},
             "encoding": {"x": x, "y": {"field": "start", "type": "quantitative", "title": "ms per step"},
                          "y2": {"field": "end"},
                          "color": {"field": "kind", "type": "nominal", "legend": None,
                                    "scale": {"domain": ["total", "up", "down"], "range": [_TOTAL, _UP, _DOWN]}},
                          "tooltip": [{"field": "bar", "title": "part"}, {"field": "text", "title": "ms per step"}]}},
            {"data": {"values": bars}, "mark": {"type": "text", "dy": -6, "baseline": "bottom", "fontSize": 11},
             "encoding": {"x": x, "y": {"field": "top", "type": "quantitative"}, "text": {"field": "text"}}},
        ],
        "height": height,
    }
