"""Step-time charts: time per step from metrics, step breakdown as stacked bars (charts layer)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from app.analysis.run.step_time import StepTime, steady_step_time

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


def _add_rank_steps(fig: go.Figure, rank: int, head: StepTime, *, ranks_drawn: int) -> None:
    """One rank's step times (hollow markers: left out of the median) and its dashed median line."""
    reasons = [head.dropped.get(s, "steady state") for s in head.steps]
    fig.add_trace(
        go.Scatter(
            x=list(head.steps),
            y=[t * 1e3 for t in head.times_s],
            mode="lines+markers",
            name=f"rank {rank}",
            customdata=reasons,
            marker={"size": 5, "symbol": ["circle-open" if s in head.dropped else "circle" for s in head.steps]},
            hovertemplate="step %{x}<br>%{y:.2f} ms (%{customdata})<extra></extra>",
        )
    )
    if head.value_s is None:
        return
    med = head.value_s * 1e3
    # An hline given an empty annotation draws plotly's placeholder "new text": label each
    # rank's median while they stay readable, otherwise draw the lines without labels.
    label: dict[str, str] = {}
    if ranks_drawn == 1:
        label = {"annotation_text": f"median {med:.2f} ms"}
    elif ranks_drawn <= _LABELLED_MEDIANS:
        label = {"annotation_text": f"rank {rank} median {med:.2f} ms"}
    fig.add_hline(y=float(med), line_dash="dash", line_width=1, opacity=0.6, **label)


def make_step_time_figure(
    metrics: pd.DataFrame, *, value: str = "step_time_s", from_trace: bool = False,
    pooled: StepTime | None = None, ranks: Sequence[int] | None = None,
) -> go.Figure:
    """Time of every step (ms) per rank, with each rank's headline median dashed and labelled.

    ``metrics`` needs columns ``step`` and ``value`` (seconds), optionally ``rank``, ``profiled``
    and evaluation values (``val_*`` ...). The median line of a rank is app.analysis.run.step_time's
    :func:`steady_step_time` of that rank (warm-up, profiled and evaluation steps left out; steps
    from traces, ``from_trace``, all count), the same number as the Overview tile; its steps are
    drawn filled, the dropped ones hollow with the reason in the hover. ``pooled`` (the headline
    over every rank, slowest rank per step) adds its own line when several ranks are drawn.
    ``ranks``: draw only these ranks (their medians still see every rank's evaluation marks).
    """
    fig = go.Figure()
    groups = _rank_headlines(metrics, value, from_trace, ranks)
    for rank, head in groups:
        _add_rank_steps(fig, rank, head, ranks_drawn=len(groups))
    if pooled is not None and pooled.value_s is not None and len(groups) > 1:
        fig.add_hline(y=pooled.value_s * 1e3, line_dash="dot", line_width=2, opacity=0.9,
                      annotation_text=f"median, slowest rank per step {pooled.value_s * 1e3:.2f} ms",
                      annotation_position="bottom right")
    xaxis: dict[str, object] = {}
    steps = [s for _, h in groups for s in h.steps]
    if steps and max(steps) - min(steps) <= 10:
        # Steps are integers; plotly's automatic ticks would put them at 0.5 intervals.
        xaxis = {"tick0": 0, "dtick": 1, "tickformat": "d"}
    fig.update_layout(
        xaxis_title="step (hollow: left out of the median)",
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
        if col in _DEVICE_ONLY and not (values > 0).any():
            continue  # no device activity of this kind (a CPU run): no all-zero legend entry
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
