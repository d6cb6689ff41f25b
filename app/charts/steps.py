"""Step-time charts: time per step from metrics, step breakdown as stacked bars (charts layer).

Both are the Run page Overview's, its first screen: Vega-Lite specs (``st.vega_lite_chart``), not
plotly figures. In a fresh browser a page with plotly charts waits for plotly.js (4.7 MB) to load
and compile, about 1.5 empty-page loads; Vega-Lite about a quarter of that
(benchmarks/README.md, issue 16). Everything the plotly charts showed is there: every step, the
dropped ones hollow with the reason in the tooltip, the labelled medians, the parts' shares.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from app.analysis.run.step_time import StepTime, steady_step_time

__all__ = ["DEVICE_CATEGORIES", "LOOP_PHASES", "breakdown_chart", "breakdown_parts", "step_time_chart"]

# (column of the trace engine's step table, label) — device view, as torch-tb-profiler's Overview.
DEVICE_CATEGORIES: tuple[tuple[str, str], ...] = (
    ("kernel_us", "Kernel"),
    ("memcpy_us", "Memcpy"),
    ("memset_us", "Memset"),
    ("communication_us", "Communication"),
    ("runtime_us", "Runtime"),
    ("dataloader_us", "DataLoader"),
    ("cpu_exec_us", "CPU exec"),
    ("other_us", "Other"),
)
# Training-loop view; "rest" is the step's time outside forward, backward and optimizer.
LOOP_PHASES: tuple[tuple[str, str], ...] = (
    ("loop_dataloader_us", "Data loading"),
    ("forward_us", "Forward"),
    ("backward_us", "Backward"),
    ("optimizer_us", "Optimizer"),
    ("loop_other_us", "Rest of step"),
)
# Older step tables: the device view's data-loading column, and the rest computed here.
_FALLBACK = {"loop_dataloader_us": "dataloader_us"}
# Ranks whose median line gets a text label in the step-time chart (more would overlap).
_LABELLED_MEDIANS = 4
_REST = "loop_other_us"
# Distinct colours per rank (plotly's first ten, as the other tabs' charts use)
_RANK_COLOURS = ("#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A", "#19D3F3", "#FF6692", "#B6E880", "#FF97FF",
                 "#FECB52")
# Device-side categories: left out of the chart (bar and legend entry) when they are 0 in every step.
_DEVICE_ONLY = frozenset({"kernel_us", "memcpy_us", "memset_us", "communication_us", "runtime_us"})


def _rank_headlines(metrics: pd.DataFrame, value: str, from_trace: bool,
                    only: Sequence[int] | None) -> list[tuple[int, StepTime]]:
    """Each rank's steady-state step time (app.analysis.run.step_time), from every line of the table:
    evaluation lines carry no step time but still mark their step."""
    # Every column: the marks steady_step_time reads (profiled, evaluation, val_* ...) are the
    # run format's to define, and the Overview tile passes the whole table too.
    frame = metrics if value == "step_time_s" else metrics.drop(columns=["step_time_s"], errors="ignore").rename(
        columns={value: "step_time_s"})
    records = frame.to_dict(orient="records")
    ranks = sorted({int(r) for r in pd.to_numeric(metrics["rank"], errors="coerce").dropna()}) \
        if "rank" in metrics.columns else [0]
    if only is not None:
        ranks = [r for r in ranks if r in set(only)]
    out = [(r, steady_step_time(records, rank=r, from_trace=from_trace)) for r in ranks]
    return [(r, h) for r, h in out if h.steps]


def _ms(value: float) -> float:
    """Milliseconds rounded for the browser (µs resolution: the hover shows 2 decimals)."""
    return round(float(value), 3)


def _rank_points(rank: int, head: StepTime) -> list[dict[str, object]]:
    """One rank's step times (ms), each with whether the median keeps it and why not."""
    return [
        {"rank": f"rank {rank}", "step": int(s), "ms": _ms(t * 1e3), "kept": s not in head.dropped,
         "why": head.dropped.get(s, "steady state")}
        for s, t in zip(head.steps, head.times_s)
    ]


def _median_rules(groups: list[tuple[int, StepTime]], pooled: StepTime | None) -> list[dict[str, object]]:
    """The dashed median line of each rank (labelled while they stay readable) and the pooled one."""
    rules: list[dict[str, object]] = []
    for rank, head in groups:
        if head.value_s is None:
            continue
        med = head.value_s * 1e3
        label = ""
        if len(groups) == 1:
            label = f"median {med:.2f} ms"
        elif len(groups) <= _LABELLED_MEDIANS:
            label = f"rank {rank} median {med:.2f} ms"
        rules.append({"ms": _ms(med), "label": label, "pooled": False})
    if pooled is not None and pooled.value_s is not None and len(groups) > 1:
        rules.append({"ms": _ms(pooled.value_s * 1e3), "pooled": True,
                      "label": f"median, slowest rank per step {pooled.value_s * 1e3:.2f} ms"})
    return rules


_POINT_TOOLTIP = [{"field": "rank", "title": "rank"}, {"field": "step", "title": "step"},
                  {"field": "ms", "title": "step time (ms)", "format": ".2f"}, {"field": "why", "title": "median"}]


def step_time_chart(
    metrics: pd.DataFrame, *, value: str = "step_time_s", from_trace: bool = False,
    pooled: StepTime | None = None, ranks: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Time of every step (ms) per rank, with each rank's headline median dashed and labelled: a
    Vega-Lite spec (the Overview's first chart; Vega-Lite loads in the browser in a fraction of
    plotly.js's time, docs/app.md).

    ``metrics`` needs columns ``step`` and ``value`` (seconds), optionally ``rank``, ``profiled``
    and evaluation values (``val_*`` ...). The median line of a rank is app.analysis.run.step_time's
    :func:`steady_step_time` of that rank (warm-up, profiled and evaluation steps left out; steps
    from traces, ``from_trace``, all count), the same number as the Overview tile; its steps are
    drawn filled, the dropped ones hollow with the reason in the tooltip. ``pooled`` (the headline
    over every rank, slowest rank per step) adds its own dotted line when several ranks are drawn.
    ``ranks``: draw only these ranks (their medians still see every rank's evaluation marks).
    """
    groups = _rank_headlines(metrics, value, from_trace, ranks)
    points = [p for rank, head in groups for p in _rank_points(rank, head)]
    rules = _median_rules(groups, pooled)
    x_axis: dict[str, Any] = {"title": "step (hollow: left out of the median)", "format": "d", "tickMinStep": 1}
    x = {"field": "step", "type": "quantitative", "axis": x_axis, "scale": {"zero": False}}
    y = {"field": "ms", "type": "quantitative", "title": "step time (ms)", "scale": {"zero": True}}
    color = {"field": "rank", "type": "nominal", "title": None, "legend": {"orient": "top"},
             "scale": {"range": list(_RANK_COLOURS)}}
    layers: list[dict[str, Any]] = [
        {"data": {"values": points}, "mark": {"type": "line", "strokeWidth": 1.5},
         "encoding": {"x": x, "y": y, "color": color}},
        {"data": {"values": points}, "transform": [{"filter": "datum.kept"}],
         "mark": {"type": "point", "filled": True, "size": 30},
         "encoding": {"x": x, "y": y, "color": color, "tooltip": _POINT_TOOLTIP}},
        {"data": {"values": points}, "transform": [{"filter": "!datum.kept"}],
         "mark": {"type": "point", "filled": False, "size": 30, "strokeWidth": 1.5},
         "encoding": {"x": x, "y": y, "color": color, "tooltip": _POINT_TOOLTIP}},
    ]
    if rules:
        layers += [
            {"data": {"values": rules},
             "mark": {"type": "rule", "color": "#555"},
             "encoding": {"y": {"field": "ms", "type": "quantitative"},
                          "strokeDash": {"condition": {"test": "datum.pooled", "value": [2, 2]}, "value": [5, 4]},
                          "strokeWidth": {"condition": {"test": "datum.pooled", "value": 2}, "value": 1},
                          "opacity": {"condition": {"test": "datum.pooled", "value": 0.9}, "value": 0.6},
                          "tooltip": [{"field": "label", "title": "line"}]}},
        ]
        # One text layer per label, stacked above its line (the pooled one below its own): ranks'
        # medians are often within a few ms of each other, and labels at one place would overlap.
        above = 0
        for rule in (r for r in rules if r["label"]):
            dy = 14 if rule["pooled"] else -6 - 13 * above
            above += not rule["pooled"]
            layers.append({"data": {"values": [rule]},
                           "mark": {"type": "text", "align": "right", "x": "width", "dx": -2, "dy": dy, "fontSize": 11},
                           "encoding": {"y": {"field": "ms", "type": "quantitative"}, "text": {"field": "label"}}})
    return {"layer": layers, "height": 320, "config": {"legend": {"orient": "top"}}}


def _breakdown_x(steps: pd.DataFrame) -> list[str]:
    if "rank" in steps and steps["rank"].nunique() > 1:
        return [f"rank {r} · step {s}" for r, s in zip(steps["rank"], steps["step"])]
    return [str(s) for s in steps["step"]]


def breakdown_parts(steps: pd.DataFrame, categories: tuple[tuple[str, str], ...]
                    ) -> list[tuple[str, pd.Series]]:
    """(label, µs per step) of each category drawn: columns missing from ``steps`` are skipped,
    "Rest of step" is computed from the step's duration when the table lacks it, and device
    categories that are 0 in every step are left out (a CPU run: no all-zero legend entry)."""
    total = pd.to_numeric(steps.get("duration_us"), errors="coerce") if "duration_us" in steps else None
    out = []
    for col, label in categories:
        if col not in steps.columns and _FALLBACK.get(col) in steps.columns:
            col = _FALLBACK[col]
        if col == _REST and col not in steps.columns and total is not None:
            parts = [_FALLBACK.get(c, c) for c, _ in categories if c != _REST]
            parts = [c for c in parts if c in steps.columns]
            values = (total - steps[parts].apply(pd.to_numeric, errors="coerce").fillna(0).sum(axis=1)).clip(
                lower=0
            )
        elif col not in steps.columns:
            continue
        else:
            values = pd.to_numeric(steps[col], errors="coerce").fillna(0.0)
        if col in _DEVICE_ONLY and not (values > 0).any():
            continue
        out.append((label, values))
    return out


def breakdown_chart(steps: pd.DataFrame, categories: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """Stacked bars, one per profiled step (x: ``step``; ms), one colour per category column, as a
    Vega-Lite spec; the tooltip shows each part's time and share of the step (:func:`breakdown_parts`)."""
    x = _breakdown_x(steps)
    total = pd.to_numeric(steps.get("duration_us"), errors="coerce") if "duration_us" in steps else None
    parts = breakdown_parts(steps, categories)
    rows = []
    for order, (label, values) in enumerate(parts):
        for i, (step, us) in enumerate(zip(x, values)):
            t = float(total.iloc[i]) if total is not None else float("nan")
            share = round(float(us) / t * 100, 1) if t > 0 else None
            rows.append({"step": step, "part": label, "order": order, "ms": _ms(float(us) / 1e3), "share": share})
    labels = [label for label, _ in parts]
    return {
        "layer": [{
            "data": {"values": rows},
            "mark": {"type": "bar"},
            "encoding": {
                "x": {"field": "step", "type": "nominal", "sort": list(dict.fromkeys(x)), "title": "profiled step",
                      "axis": {"labelAngle": 0 if len(x) <= 12 else -45}},
                "y": {"field": "ms", "type": "quantitative", "stack": "zero", "title": "time (ms)"},
                "color": {"field": "part", "type": "nominal", "title": None, "scale": {"domain": labels},
                          "legend": {"orient": "top"}},
                "order": {"field": "order", "type": "quantitative"},
                "tooltip": [{"field": "step", "title": "step"}, {"field": "part", "title": "part"},
                            {"field": "ms", "title": "time (ms)", "format": ".2f"},
                            {"field": "share", "title": "% of step", "format": ".1f"}],
            },
        }],
        "height": 360,
    }
