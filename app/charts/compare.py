"""Plotly figures of a comparison: step times, waterfall, op deltas, memory, curves, sweeps (charts layer).

Tables in (from app.analysis.compare.comparison*), figures out; no Streamlit. ``figures_to_html`` turns
figures into fragments for the self-contained HTML report, with plotly.js inlined once.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

from app.analysis.compare.labels import unique_labels
from app.analysis.compare.memory import compute_step_aligned_memory
from app.analysis.curves.smoothing import compute_curve
from app.presentation.names import distinct_short_names

__all__ = [
    "make_step_time_figure",
    "make_waterfall_figure",
    "make_delta_bar_figure",
    "make_memory_overlay_figure",
    "make_curve_overlay_figure",
    "make_band_figure",
    "make_parallel_coordinates_figure",
    "make_param_scatter_figure",
    "figures_to_html",
    "make_report_figures",
]

_PALETTE = qualitative.Plotly
_UP, _DOWN = "#d62728", "#2ca02c"  # a delta that costs time is red, a saving green


def _rgba(hex_colour: str, alpha: float) -> str:
    h = hex_colour.lstrip("#")
    r, g, b = (int(h[i: i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


def _layout(fig: go.Figure, title: str, height: int) -> go.Figure:
    fig.update_layout(title=title, height=height, margin={"l": 50, "r": 20, "t": 50, "b": 40},
                      legend={"orientation": "h", "y": -0.2})
    return fig


def make_step_time_figure(tables: Mapping[str, pd.DataFrame], *, height: int = 340) -> go.Figure:
    """Per-step times of each side (table of ``compute_step_times``), kept steps solid, warm-up
    and profiled steps hollow, with each side's steady-state median as a dashed line."""
    fig = go.Figure()
    for i, (label, t) in enumerate(tables.items()):
        colour = _PALETTE[i % len(_PALETTE)]
        if len(t) == 0:
            continue
        kept = t["kept"].astype(bool)
        fig.add_scatter(x=t.loc[kept, "step"], y=t.loc[kept, "step_time_s"] * 1e3, mode="markers+lines",
                        name=f"{label}", line={"color": colour, "width": 1}, marker={"size": 4})
        if (~kept).any():
            fig.add_scatter(x=t.loc[~kept, "step"], y=t.loc[~kept, "step_time_s"] * 1e3, mode="markers",
                            name=f"{label} (dropped)", marker={"color": colour, "symbol": "circle-open", "size": 7},
                            text=t.loc[~kept, "reason"], hovertemplate="step %{x}: %{y:.2f} ms (%{text})")
        if kept.any():
            fig.add_hline(y=float(np.median(t.loc[kept, "step_time_s"])) * 1e3, line_dash="dash",
                          line_color=colour, opacity=0.7)
    fig.update_yaxes(title="step time (ms)")
    fig.update_xaxes(title="step")
    return _layout(fig, "Step time per step (dashed: steady-state median)", height)


def make_waterfall_figure(breakdown: pd.DataFrame, *, view: str = "device", height: int = 380,
                          steps: tuple[int, int] | None = None) -> go.Figure:
    """Baseline mean profiled step → each category's change → candidate mean profiled step
    (per-step means, ms), from ``diff_breakdown``'s rows of one ``view``. ``steps`` (profiled
    steps averaged on each side) goes into the end labels; these are trace means, not the
    median step time of the verdict."""
    part = breakdown[breakdown["view"] == view] if len(breakdown) else breakdown
    fig = go.Figure()
    if len(part) == 0:
        return _layout(fig, "No per-step breakdown (needs traces on both sides)", height)
    step = part[part["category"] == "step"].iloc[0]
    cats = part[(part["category"] != "step") & (part["delta_us"].abs() > 0)]
    counts = [f" ({n} step{'s' if n != 1 else ''})" if steps else "" for n in (steps or (0, 0))]
    x = [f"baseline: mean profiled step{counts[0]}", *cats["category"].astype(str),
         f"candidate: mean profiled step{counts[1]}"]
    y = [step["baseline_us"] / 1e3, *(cats["delta_us"] / 1e3), step["candidate_us"] / 1e3]
    measure = ["absolute", *["relative"] * len(cats), "total"]
    text = [f"{y[0]:.2f} ms", *(f"{d:+.2f}" for d in y[1:-1]), f"{y[-1]:.2f} ms"]
    fig.add_trace(go.Waterfall(x=x, y=y, measure=measure, increasing={"marker": {"color": _UP}},
                               decreasing={"marker": {"color": _DOWN}}, totals={"marker": {"color": "#1f77b4"}},
                               text=text, textposition="outside", hovertemplate="%{x}: %{y:.3f} ms<extra></extra>"))
    fig.update_yaxes(title="ms per step")
    return _layout(fig, f"Where the time went ({view} view, per step)", height)



def make_delta_bar_figure(table: pd.DataFrame, *, label_col: str = "name", delta_col: str = "delta_us",
                          top: int = 20, title: str = "Largest changes per step", height: int = 460) -> go.Figure:
    """Horizontal bars of the ``top`` rows by |delta| (ms per step): red costs time, green saves it."""
    fig = go.Figure()
    if table is None or len(table) == 0:
        return _layout(fig, title + " (no data)", height)
    t = table.head(top).iloc[::-1]
    # distinct rows keep distinct bars: plotly draws equal category labels on one line
    labels = unique_labels(distinct_short_names(list(t[label_col].astype(str)), 60))
    deltas = t[delta_col].to_numpy(float) / 1e3
    fig.add_bar(y=labels, x=deltas, orientation="h", marker_color=[_UP if d > 0 else _DOWN for d in deltas],
                customdata=t[label_col].astype(str), hovertemplate="%{customdata}<br>%{x:+.3f} ms/step<extra></extra>")
    fig.update_xaxes(title="change (ms per step, candidate − baseline)")
    return _layout(fig, title, height)


def make_memory_overlay_figure(timelines: Mapping[str, pd.DataFrame], *, height: int = 340) -> go.Figure:
    """Allocated memory of each side on a common step axis (``compute_step_aligned_memory``)."""
    fig = go.Figure()
    for i, (label, tl) in enumerate(timelines.items()):
        for dev, g in tl.groupby("device", sort=True) if len(tl) else []:
            fig.add_scatter(x=g["step_pos"], y=g["allocated_bytes"] / 2**20, mode="lines", name=f"{label} {dev}",
                            line={"color": _PALETTE[i % len(_PALETTE)], "width": 1.5})
    fig.update_xaxes(title="profiled step (aligned)")
    fig.update_yaxes(title="allocated (MiB)")
    return _layout(fig, "Memory over the profiled steps" + ("" if fig.data else " (no memory events)"), height)


def make_curve_overlay_figure(curves: Mapping[str, pd.DataFrame], key: str, *, log_y: bool = False,
                              height: int = 340) -> go.Figure:
    """One curve per run (tables of ``compute_curve``): smoothed line, raw values faint behind."""
    fig = go.Figure()
    for i, (label, c) in enumerate(curves.items()):
        colour = _PALETTE[i % len(_PALETTE)]
        if len(c) == 0:
            continue
        c0 = c[c["rank"] == c["rank"].min()]
        fig.add_scatter(x=c0["x"], y=c0["value"], mode="lines", line={"color": _rgba(colour, 0.25), "width": 1},
                        showlegend=False, hoverinfo="skip")
        fig.add_scatter(x=c0["x"], y=c0["smoothed"], mode="lines", name=label, line={"color": colour, "width": 2})
    fig.update_yaxes(title=key, type="log" if log_y else "linear")
    fig.update_xaxes(title="step")
    return _layout(fig, f"{key} (smoothed)", height)


def make_band_figure(bands: pd.DataFrame, key: str, *, height: int = 340) -> go.Figure:
    """Mean line and shaded spread per group (``compute_curve_bands``)."""
    fig = go.Figure()
    for i, (group, g) in enumerate(bands.groupby("group", sort=True) if len(bands) else []):
        colour = _PALETTE[i % len(_PALETTE)]
        fig.add_scatter(x=np.concatenate([g["step"], g["step"][::-1]]), y=np.concatenate([g["hi"], g["lo"][::-1]]),
                        fill="toself", fillcolor=_rgba(colour, 0.2), line={"width": 0}, hoverinfo="skip",
                        showlegend=False)
        fig.add_scatter(x=g["step"], y=g["mean"], mode="lines", line={"color": colour, "width": 2},
                        name=f"{group} (n={int(g['runs'].max())})")
    fig.update_xaxes(title="step")
    fig.update_yaxes(title=key)
    return _layout(fig, f"{key}: mean ± spread across runs of each group", height)


def make_parallel_coordinates_figure(sweep: pd.DataFrame, dims: Sequence[str], color: str,
                                     *, height: int = 420) -> go.Figure:
    """Parallel coordinates of a sweep (``compute_sweep_table``): one line per run."""
    numeric = [d for d in dims if d in sweep.columns and pd.api.types.is_numeric_dtype(sweep[d])]
    dimensions = [{"label": d.removeprefix("config."), "values": sweep[d]} for d in numeric]
    cvals = sweep[color] if color in sweep.columns and pd.api.types.is_numeric_dtype(sweep[color]) else None
    line = {"color": cvals, "colorscale": "Viridis", "showscale": True} if cvals is not None else {}
    fig = go.Figure(go.Parcoords(dimensions=dimensions, line=line))
    _layout(fig, f"Sweep: hyperparameters and outcomes (colour: {color})", height)
    fig.update_layout(margin={"l": 60, "r": 60, "t": 100, "b": 30})  # room for the axis labels
    return fig


def make_param_scatter_figure(sweep: pd.DataFrame, x: str, y: str, *, height: int = 360) -> go.Figure:
    """One point per run: a hyperparameter against an outcome; hover shows the run name, the
    run id is in ``customdata`` so a selection can open the run."""
    fig = go.Figure()
    if x in sweep.columns and y in sweep.columns:
        fig.add_scatter(x=sweep[x], y=sweep[y], mode="markers", marker={"size": 10},
                        text=sweep["name"].astype(str), customdata=sweep["id"].astype(str),
                        hovertemplate="%{text}<br>%{x}: %{y}<extra></extra>")
    fig.update_xaxes(title=x.removeprefix("config."))
    fig.update_yaxes(title=y)
    return _layout(fig, f"{y} vs {x.removeprefix('config.')}", height)


def figures_to_html(figures: Sequence[tuple[str, go.Figure]]) -> list[tuple[str, str]]:
    """(title, HTML fragment) per figure; the first fragment carries plotly.js inline
    (``include_plotlyjs=True``) so the page needs no network, the others reuse it."""
    out = []
    for i, (title, fig) in enumerate(figures):
        out.append((title, fig.to_html(full_html=False, include_plotlyjs=(i == 0), config={"responsive": True})))
    return out


def make_report_figures(cmp: Any) -> list[tuple[str, go.Figure]]:
    """The figures of the exported report for a Comparison: step times, waterfalls, op and
    kernel deltas, and memory on a step axis when both sides have allocator events."""
    b, c = cmp.baseline.label, cmp.candidate.label
    c = c if c != b else f"{c} (candidate)"
    figs: list[tuple[str, go.Figure]] = [("Step times", make_step_time_figure({b: cmp.step_times[0], c: cmp.step_times[1]}))]
    if len(cmp.breakdown):
        counts = getattr(cmp, "breakdown_steps", None)
        figs.append(("Where the time went", make_waterfall_figure(cmp.breakdown, view="device", steps=counts)))
        figs.append(("Training phases", make_waterfall_figure(cmp.breakdown, view="phase", steps=counts)))
    if len(cmp.ops):
        figs.append(("Operator changes", make_delta_bar_figure(cmp.ops, title="Operators: self-time change per step")))
    if len(cmp.kernels):
        figs.append(("Kernel changes", make_delta_bar_figure(cmp.kernels, title="Kernels: time change per step")))
    timelines = {}
    for label, side in ((b, cmp.baseline), (c, cmp.candidate)):
        if side.analysis is not None and side.traces:
            timelines[label] = compute_step_aligned_memory(side.traces, side.analysis.steps)
    if any(len(t) for t in timelines.values()):
        figs.append(("Memory", make_memory_overlay_figure(timelines)))
    runs = {b: cmp.baseline.run, c: cmp.candidate.run}
    if all(r is not None and "loss" in r.metrics.columns for r in runs.values()):
        curves = {label: compute_curve(r.metrics, "loss") for label, r in runs.items()}
        figs.append(("Loss", make_curve_overlay_figure(curves, "loss")))
    return figs
