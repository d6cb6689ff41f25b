"""Run page tab "Overview": headline numbers, time per step, step-time breakdown (UI layer).

The first tab of a first visit: it reads the run's metrics, manifest and system samples, and of
its traces only the StepAnalysis (steps, memory peaks, ranks); the op, kernel and breakdown tables
are computed when a tab that shows them is opened.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import streamlit as st

from app.analysis.memory.peak import peak_description, peak_quantity
from app.analysis.run.final_value import FinalValue, final_of_table
from app.analysis.run.step_time import steady_step_time
from app.analysis.run.summary import (
    StepTimeStats,
    compute_peak_memory,
    compute_rank_rows,
    compute_step_time_stats,
    compute_trace_step_time_stats,
    compute_trace_step_times,
    trace_peaks_could_change,
)
from app.charts.steps import DEVICE_CATEGORIES, LOOP_PHASES, breakdown_chart, step_time_chart
from app.errors import TorchscopeError
from app.presentation.units import format_bytes, format_seconds
from app.ui.cache import cached_step_analysis, prefetch_trace_analysis
from app.ui.tabs import RunContext
from app.ui.trace_view import load_step_analysis, rank_rows, render_trace_warnings

__all__ = ["TITLE", "STEP_TIME_LABEL", "render", "world_size_caption", "device_labels", "final_loss"]

TITLE = "Overview"


def _trace_steps(ctx: RunContext) -> pd.DataFrame | None:
    """The profiled steps of the run's traces, only when the run has traces (no info message)."""
    if not ctx.run.trace_files:
        return None
    return cached_step_analysis(ctx.run_dir).steps


def _peak_memory(ctx: RunContext) -> tuple[float | None, str]:
    """The run's peak by the shared definition; the traces are read only when they could give a
    better source than the system samples (CPU runs: tensor allocations beat RSS)."""
    peak, source = compute_peak_memory(ctx.run.system, ctx.rank)
    if ctx.run.trace_files and trace_peaks_could_change(source):
        try:
            peaks = cached_step_analysis(ctx.run_dir).memory_peaks
        except TorchscopeError:  # the trace sections of the page say what is wrong with the traces
            return peak, source
        peak, source = compute_peak_memory(ctx.run.system, ctx.rank, peaks)
    return peak, source


def _peak_help(source: str) -> str:
    if source == "none":
        return "No memory data: no system samples and no memory events in the traces."
    return (f"{peak_description(source).capitalize()}. Torchscope's peak memory is, in this order: the GPU "
            "allocator's peak, the traces' tensor allocations, host RSS (docs/views.md).")


def final_loss(metrics: pd.DataFrame, rank: int | None) -> FinalValue | None:
    """The run's final loss by the one rule (app.analysis.run.final_value); None when no loss is logged."""
    return final_of_table(metrics, "loss", rank=rank)


# The one headline step time (docs/app.md, "Step time"): the same label on the Runs page.
STEP_TIME_LABEL = "Step time (median, steady state)"


def _step_time_help(stats: StepTimeStats, from_traces: bool, rank: int | None) -> str:
    whose = "slowest rank per step" if rank is None else f"rank {rank}'s times"
    if from_traces:
        which = (f"Median of the {stats.steps} profiled steps of the traces (this run logged no step "
                 f"times), {whose}; every profiled step counts.")
    else:
        which = (f"Median of {stats.steps} steady-state steps of {stats.total_steps} ({whose}). Dropped: {stats.dropped} — the first min(5, n/10) steps (warm-up), steps "
                 "inside profiler windows (slowed by the profiler) and steps that ran an evaluation.")
    return (f"{which} The same number as the Runs page, `torchscope ls` and Compare. "
            f"Mean {format_seconds(stats.mean_s)} ± {format_seconds(stats.std_s)} (std), "
            f"p10–p90 {format_seconds(stats.p10_s)}–{format_seconds(stats.p90_s)}.")


def _step_time_stats(ctx: RunContext) -> tuple[StepTimeStats | None, bool]:
    """The steady-state step-time statistics, and whether they come from the traces (the run
    logged no step times)."""
    stats = compute_step_time_stats(ctx.run.metrics, ctx.rank)
    if stats is not None:
        return stats, False
    steps = _trace_steps(ctx)
    stats = compute_trace_step_time_stats(steps, ctx.rank) if steps is not None else None
    return stats, stats is not None


def _render_step_tiles(ctx: RunContext, cols: list[Any], stats: StepTimeStats | None, from_traces: bool) -> None:
    """Step time, spread and throughput over the steady-state steps."""
    if not stats:
        cols[0].metric(STEP_TIME_LABEL, "–")
        cols[1].metric("Spread (p90 / p10)", "–")
        cols[2].metric("Samples/s", "–")
        return
    cols[0].metric(STEP_TIME_LABEL, format_seconds(stats.median_s), help=_step_time_help(stats, from_traces, ctx.rank))
    cols[0].caption(f"mean {format_seconds(stats.mean_s)} · {stats.steps} steps")
    ratio = stats.p90_s / stats.p10_s if stats.p10_s > 0 and stats.steps > 1 else float("nan")
    cols[1].metric(
        "Spread (p90 / p10)",
        f"{ratio:.2f}×" if not math.isnan(ratio) else "–",
        help=f"p10 {format_seconds(stats.p10_s)}, p90 {format_seconds(stats.p90_s)}; "
        f"coefficient of variation (std / mean) {stats.cv:.1%}. 1.00× = every step alike.",
    )
    cols[2].metric(
        "Samples/s",
        f"{stats.samples_per_s:,.1f}" if stats.samples_per_s else "–",
        help="median over the same steady-state steps of samples (all ranks) / step time, "
        "as Compare computes throughput; – when a kept step logged no samples",
    )


def _render_final_loss_tile(ctx: RunContext, col: Any) -> None:
    final = final_loss(ctx.run.metrics, ctx.rank)
    if final is None:
        col.metric("Final loss", "–")
        return
    whose = "rank 0's" if final.rank == 0 and ctx.rank is None else (
        f"rank {final.rank}'s" if final.rank is not None else "every rank's")
    col.metric(final.label.capitalize(), f"{final.value:.4g}",
               help=f"Median of the last {final.window} of {final.count} loss values ({whose}): the last "
               "10 % of them, 1 to 20 values, so one noisy batch does not decide. The same number as the "
               "Runs page, `torchscope ls`, `torchscope analyze` and Compare.")


def _render_headline(ctx: RunContext) -> Any:
    """Every headline tile but the peak memory's; returns the column that tile goes in (drawn
    last: it may read the traces, and the charts below need not wait for them)."""
    stats, from_traces = _step_time_stats(ctx)
    # Two rows of three: six metrics in one row truncate values ("611.2 …", "NVIDIA…") at
    # common laptop widths.
    cols = [*st.columns(3), *st.columns(3)]
    _render_step_tiles(ctx, cols, stats, from_traces)
    _render_final_loss_tile(ctx, cols[4])
    full, short = device_labels([dict(d) for d in ctx.run.manifest.devices])
    cols[5].metric(
        "Device",
        short or "–",
        help=full or "The run records no devices (an imported trace without deviceProperties).",
    )
    if full and full != short:  # the tile truncates long names ("NVIDIA A100-PG509-…"): say it in full
        cols[5].caption(full)
    caption = world_size_caption(ctx.run.manifest.world_size, ctx.ranks, ctx.rank)
    if caption:
        st.caption(caption)
    return cols[3]


def _render_peak_tile(ctx: RunContext, col: Any) -> None:
    peak, peak_source = _peak_memory(ctx)
    col.metric(f"Peak memory ({peak_quantity(peak_source)})" if peak is not None else "Peak memory",
               format_bytes(peak), help=_peak_help(peak_source))


# Vendor prefixes left out of the tile (the full name is in the caption under it).
_VENDORS = ("NVIDIA ", "AMD ", "Intel(R) ", "Intel ")
# Characters a metric tile in a third of the page shows before it truncates (laptop width).
_TILE_CHARS = 16


def device_labels(devices: tuple[dict, ...] | list[dict]) -> tuple[str, str]:
    """(full, short) names of the run's devices: identical devices counted ("2 × NVIDIA A100"),
    the short one without the vendor and cut to fit a metric tile. ("", "") for none."""
    names = [str(d.get("name") or d.get("type") or "?") for d in devices]
    if not names:
        return "", ""
    counts = dict.fromkeys(names, 0)
    for n in names:
        counts[n] += 1
    full = ", ".join(n if c == 1 else f"{c} × {n}" for n, c in counts.items())
    parts = []
    for n, c in counts.items():
        bare = next((n[len(v):] for v in _VENDORS if n.startswith(v) and len(n) > len(v)), n)
        parts.append(bare if c == 1 else f"{c} × {bare}")
    short = ", ".join(parts)
    if len(short) > _TILE_CHARS:
        short = short[: _TILE_CHARS - 1] + "…"
    return full, short


def world_size_caption(world_size: int, ranks: tuple[int, ...], rank: int | None) -> str:
    """What the headline numbers cover in a distributed run ("" for a single process).

    An imported trace often holds a few ranks of a large job (world size from
    ``distributedInfo``), so "every rank" would overstate what was pooled.
    """
    if world_size <= 1 and len(ranks) <= 1:
        return ""
    if rank is not None:
        return f"World size {world_size}; numbers above are rank {rank}'s."
    if len(ranks) >= world_size:
        return f"World size {world_size}; numbers above pool every rank."
    shown = ", ".join(str(r) for r in ranks[:8]) + (", …" if len(ranks) > 8 else "")
    which = f"rank {shown}" if len(ranks) == 1 else f"ranks {shown}"
    return (
        f"World size {world_size}; this run holds data for {len(ranks)} of them ({which}): "
        "numbers above cover only those."
    )


def _render_step_times(ctx: RunContext) -> None:
    # Every rank's lines: a rank's median counts any rank's evaluation marks, as the tile does.
    metrics = ctx.run.metrics
    st.subheader("Time per step")
    from_traces = False
    shown = compute_rank_rows(metrics, ctx.rank)
    if "step_time_s" not in shown.columns or shown["step_time_s"].notna().sum() == 0:
        steps = _trace_steps(ctx)
        if steps is not None and not steps.empty:
            st.caption("From the profiled steps of the traces (this run logged no step times).")
            metrics = compute_trace_step_times(steps)
            from_traces = True
        else:
            st.info(
                "No step times in this run's metrics. `torchscope run` measures them from optimizer "
                "steps; with the API, call `run.step()` once per iteration."
            )
            return
    # The dashed line is the tile's number: the same steady-state steps (app.analysis.run.step_time). The
    # pooled line (slowest rank per step) is drawn when several ranks are shown.
    several = ctx.rank is None and "rank" in metrics.columns and metrics["rank"].nunique() > 1
    pooled = steady_step_time(metrics.to_dict(orient="records"), from_trace=from_traces) if several else None
    st.vega_lite_chart(
        step_time_chart(metrics, from_trace=from_traces, pooled=pooled,
                        ranks=None if ctx.rank is None else [ctx.rank]),
        width="stretch",
        key=ctx.key("overview_step_time"),
    )
    st.caption("Dashed: the median of the steady-state steps, the number in the tile above; hollow points are "
               "the steps it leaves out (warm-up, profiled, evaluation).")


def _render_breakdown(ctx: RunContext) -> None:
    st.subheader("Where a step's time goes")
    analysis = load_step_analysis(ctx)
    if analysis is None:
        return
    render_trace_warnings(analysis)
    steps = rank_rows(analysis.steps, ctx.rank)
    if steps.empty:
        st.info(
            "The traces hold no profiler steps (no `ProfilerStep#N` ranges): call `prof.step()` "
            "once per iteration when profiling by hand, or record with `torchscope run`."
        )
        return
    view = st.radio(
        "View",
        ["Device categories", "Training-loop phases"],
        horizontal=True,
        key=ctx.key("overview_breakdown_view"),
        help="Device categories follow torch-tb-profiler's Overview; phases split the step into "
        "data loading, forward, backward and optimizer. See docs/trace-engine.md.",
    )
    categories = DEVICE_CATEGORIES if view == "Device categories" else LOOP_PHASES
    st.vega_lite_chart(breakdown_chart(steps, categories), width="stretch", key=ctx.key("overview_breakdown"))


def _render_ranks(ctx: RunContext) -> None:
    """The Ranks section, for traces of two ranks or more (its modules load only then)."""
    if not ctx.run.trace_files:
        return
    steps = cached_step_analysis(ctx.run_dir).steps
    if "rank" not in steps.columns or steps["rank"].nunique() < 2:  # rank_summary has one row per rank
        return
    from app.ui.rank_view import render_rank_section  # its text module imports the comparison's

    render_rank_section(ctx)


def render(ctx: RunContext) -> None:
    """Headline numbers, the per-step time chart and the profiled steps' breakdown.

    The peak memory tile is filled in last, in its place at the top: on a first visit reading the
    traces takes most of the time, and the step-time chart (from the metrics) is already on its
    way to the browser meanwhile (the peak of a CPU run comes from the traces). Once all is drawn,
    the rest of the trace analysis (ops, kernels, breakdown) is computed in the background for
    the tab opened next."""
    peak_col = _render_headline(ctx)
    try:
        _render_step_times(ctx)
        _render_breakdown(ctx)
    finally:  # a trace error is shown by render_tabs; the tile then falls back as before
        _render_peak_tile(ctx, peak_col)
    _render_ranks(ctx)
    if ctx.run.trace_files:
        events = sum(int(t["events"]) for t in cached_step_analysis(ctx.run_dir).traces)
        prefetch_trace_analysis(ctx.run_dir, events)
