"""Step-time charts: time per step from metrics, step breakdown as stacked bars (charts layer)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

__all__ = ["DEVICE_CATEGORIES", "LOOP_PHASES", "make_step_time_figure", "make_breakdown_figure"]

# Horizontal legend above the plot, clear of the x-axis title.
_LEGEND_TOP = {"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0}

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


def make_step_time_figure(
    metrics: pd.DataFrame, *, value: str = "step_time_s", skip_first: bool = True
) -> go.Figure:
    """Time of every step (ms) per rank, with each rank's median dashed and labelled.

    ``metrics`` needs columns ``step``, ``rank`` and ``value`` (seconds). With ``skip_first``
    (steps from the metrics) the first step, which carries one-off costs, is left out of the
    median, as in the headline numbers; profiled steps from traces pass False (every profiled
    step counts: profiler windows start after warm-up).
    """
    fig = go.Figure()
    groups = list(metrics.groupby("rank", sort=True))
    for rank, part in groups:
        y = pd.to_numeric(part[value], errors="coerce") * 1e3
        fig.add_trace(
            go.Scatter(
                x=part["step"],
                y=y,
                mode="lines+markers",
                name=f"rank {rank}",
                marker={"size": 4},
                hovertemplate="step %{x}<br>%{y:.2f} ms<extra></extra>",
            )
        )
        first_out = skip_first and part["step"].nunique() > 1
        keep = (part["step"] != part["step"].min()) if first_out else pd.Series(True, index=part.index)
        if "profiled" in part.columns:  # the agent's mark on steps the profiler slowed
            profiled = part["profiled"].map(lambda v: v is True or v == 1).astype(bool)
            if (keep & ~profiled).any():
                keep &= ~profiled
        steady = y[keep]
        med = steady.median()
        if pd.isna(med):
            continue
        # An hline given an empty annotation draws plotly's placeholder "new text": label each
        # rank's median while they stay readable, otherwise draw the lines without labels.
        label: dict[str, str] = {}
        if len(groups) == 1:
            label = {"annotation_text": f"median {med:.2f} ms"}
        elif len(groups) <= _LABELLED_MEDIANS:
            label = {"annotation_text": f"rank {rank} median {med:.2f} ms"}
        fig.add_hline(y=float(med), line_dash="dash", line_width=1, opacity=0.6, **label)
    xaxis: dict[str, object] = {}
    steps = pd.to_numeric(metrics["step"], errors="coerce") if "step" in metrics else pd.Series(dtype=float)
    if steps.notna().any() and steps.max() - steps.min() <= 10:
        # Steps are integers; plotly's automatic ticks would put them at 0.5 intervals.
        xaxis = {"tick0": 0, "dtick": 1, "tickformat": "d"}
    fig.update_layout(
        xaxis_title="step",
        yaxis_title="step time (ms)",
        # From 0: a 2 % jitter drawn from its own minimum looks like a 2× swing.
        yaxis={"rangemode": "tozero"},
        height=320,
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        legend=_LEGEND_TOP,
        xaxis=xaxis,
    )
    return fig


def make_breakdown_figure(steps: pd.DataFrame, categories: tuple[tuple[str, str], ...]) -> go.Figure:
    """Stacked bars, one per profiled step (x: ``step``; ms), one colour per category column.

    Columns missing from ``steps`` are skipped; hover shows each part's share of the step.
    """
    fig = go.Figure()
    x = (
        [
            f"rank {r} · step {s}" if steps["rank"].nunique() > 1 else str(s)
            for r, s in zip(steps["rank"], steps["step"])
        ]
        if "rank" in steps
        else steps["step"].astype(str)
    )
    total = pd.to_numeric(steps.get("duration_us"), errors="coerce") if "duration_us" in steps else None
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
        ms = values / 1e3
        share = (ms * 1e3 / total * 100).round(1) if total is not None else None
        fig.add_trace(
            go.Bar(
                x=list(x),
                y=ms,
                name=label,
                customdata=share,
                hovertemplate=f"{label}: %{{y:.2f}} ms (%{{customdata}}% of step)<extra></extra>",
            )
        )
    fig.update_layout(
        barmode="stack",
        xaxis_title="profiled step",
        yaxis_title="time (ms)",
        height=360,
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        legend=_LEGEND_TOP,
        xaxis={"type": "category"},
    )
    return fig
