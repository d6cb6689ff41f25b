"""GPU kernel charts as Vega-Lite specs: time share of the top kernels, device busy/idle per step
(charts layer)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from app.analysis.compare.labels import unique_labels

__all__ = ["kernel_share_chart", "gpu_busy_chart", "OTHER_COLOR"]

# The "other (N kernels)" slice is grey so it never reads as one more kernel; the kernels take
# colours from a palette with no grey in it (D3's grey left out), cycling past 19 kernels.
OTHER_COLOR = "#bdbdbd"
# Plotly's and D3's qualitative palettes, written out so the Run page imports no plotly.
_PLOTLY = ("#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A", "#19D3F3", "#FF6692", "#B6E880", "#FF97FF",
           "#FECB52")
_D3 = ("#1F77B4", "#FF7F0E", "#2CA02C", "#D62728", "#9467BD", "#8C564B", "#E377C2", "#7F7F7F", "#BCBD22", "#17BECF")
_KERNEL_COLORS = list(dict.fromkeys(c.lower() for c in (*_PLOTLY, *_D3) if c.upper() != "#7F7F7F"))



def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _num(v: float) -> float | None:
    f = float(v)
    return f if math.isfinite(f) else None


def kernel_share_chart(kernels: pd.DataFrame, *, n: int = 15) -> dict[str, Any]:
    """Return a Vega-Lite donut of the kernels' time (``total_us``, drawn in ms): the ``n`` largest,
    largest first, and the rest as one grey "other (N kernels)" slice. Each slice has its own
    label (names cut to 60 characters, made unique) and colour; the tooltip gives the full name,
    the time and the share, and slices of 4 % or more write their share on the ring. A Vega-Lite
    spec, not a plotly figure: the Kernels tab then needs no plotly.js (issue 16)."""
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
    rows = [{"label": lb, "name": nm, "ms": _num(v), "order": i}
            for i, (lb, nm, v) in enumerate(zip(labels, full, values))]
    theta = {"field": "ms", "type": "quantitative", "stack": True}
    order = {"field": "order", "type": "quantitative"}
    color = {"field": "label", "type": "nominal", "title": None, "sort": labels,
             "scale": {"domain": labels, "range": colors},
             "legend": {"orient": "right", "labelLimit": 360, "labelFontSize": 10}}
    return {
        "data": {"values": rows},
        "transform": [{"joinaggregate": [{"op": "sum", "field": "ms", "as": "all_ms"}]},
                      {"calculate": "datum.all_ms > 0 ? datum.ms / datum.all_ms : 0", "as": "share"}],
        "encoding": {"theta": theta, "order": order},
        "layer": [
            {"mark": {"type": "arc", "innerRadius": 80, "outerRadius": 150},
             "encoding": {"color": color, "tooltip": [
                 {"field": "name", "title": "kernel"},
                 {"field": "ms", "title": "time (ms)", "format": ",.3f"},
                 {"field": "share", "title": "share", "format": ".1%"}]}},
            {"transform": [{"filter": "datum.share >= 0.04"}],
             "mark": {"type": "text", "radius": 115, "fontSize": 11, "fill": "white"},
             "encoding": {"text": {"field": "share", "type": "quantitative", "format": ".0%"}}},
        ],
        "height": 340,
        "view": {"stroke": None},
    }


def gpu_busy_chart(steps: pd.DataFrame) -> dict[str, Any]:
    """Return a Vega-Lite stacked bar per profiled step: % of the step the device ran kernels,
    copies or memsets ("busy") and the rest ("idle"), 0–100 %.

    ``steps`` is the trace engine's step table (``duration_us``, ``kernel_us``, ``memcpy_us``,
    ``memset_us``, ``communication_us``, ``rank``, ``step``); steps of several ranks are
    labelled ``r<rank>·<step>``. A step without a positive duration has no bar.
    """
    dur = pd.to_numeric(steps["duration_us"], errors="coerce").where(lambda s: s > 0)
    busy_cols = [c for c in ("kernel_us", "memcpy_us", "memset_us", "communication_us") if c in steps.columns]
    busy = steps[busy_cols].apply(pd.to_numeric, errors="coerce").fillna(0).sum(axis=1)
    busy_pct = (busy / dur * 100).clip(upper=100)
    many = steps["rank"].nunique() > 1
    x = [f"r{r}·{s}" if many else str(s) for r, s in zip(steps["rank"], steps["step"])]
    rows = [{"step": label, "what": what, "pct": _num(v), "order": o}
            for label, b in zip(x, busy_pct) for what, v, o in (("busy", b, 0), ("idle", 100 - b, 1))]
    return {
        "data": {"values": rows},
        "mark": {"type": "bar"},
        "encoding": {
            "x": {"field": "step", "type": "ordinal", "title": "profiled step", "sort": list(dict.fromkeys(x)),
                  "axis": {"labelAngle": 0}},
            "y": {"field": "pct", "type": "quantitative", "title": "% of step", "stack": "zero",
                  "scale": {"domain": [0, 100]}},
            "color": {"field": "what", "type": "nominal", "title": None, "legend": {"orient": "top"},
                      "scale": {"domain": ["busy", "idle"], "range": ["#1f77b4", "#ff7f0e"]}},
            "order": {"field": "order", "type": "quantitative"},
            "tooltip": [{"field": "step", "title": "step"}, {"field": "what", "title": "device"},
                        {"field": "pct", "title": "% of step", "format": ".1f"}],
        },
        "height": 300,
    }
