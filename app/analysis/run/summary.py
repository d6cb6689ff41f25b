"""Headline numbers of one run and display-ready op tables (analysis layer: tables in, tables out)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from app.analysis.memory.peak import peak_sources, pick_peak
from app.analysis.run.step_time import StepTime, steady_step_time

__all__ = [
    "StepTimeStats",
    "compute_step_time_stats",
    "compute_trace_step_time_stats",
    "compute_trace_step_times",
    "compute_ops_view",
    "compute_annotations_view",
    "compute_rank_rows",
    "compute_peak_memory",
    "trace_peaks_could_change",
    "drop_profiled_steps",
]


@dataclass(frozen=True)
class StepTimeStats:
    """Step time of a run (seconds) over its steady-state steps (app.analysis.run.step_time, the one
    definition shared with the Runs page, ``torchscope ls`` and Compare): ``median_s`` is the
    headline; mean, std and percentiles are secondary figures of the same steps."""

    steps: int  # steps counted (kept)
    mean_s: float
    median_s: float
    std_s: float
    p10_s: float
    p90_s: float
    samples_per_s: float | None  # median over kept steps of samples (all ranks) / step time
    total_steps: int = 0  # steps with a step time, before any was dropped
    dropped: str = "none"  # "4 warm-up, 5 profiled, 3 evaluation"

    @property
    def cv(self) -> float:
        """Coefficient of variation (std / mean)."""
        return self.std_s / self.mean_s if self.mean_s > 0 else math.nan


def compute_rank_rows(df: pd.DataFrame, rank: int | None) -> pd.DataFrame:
    """Rows of ``rank`` (all rows when ``rank`` is None or the table has no ``rank`` column)."""
    if rank is None or "rank" not in df.columns:
        return df
    return df[pd.to_numeric(df["rank"], errors="coerce") == rank]


def drop_profiled_steps(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` without the steps the agent marked ``"profiled": true`` (inside profiler windows,
    slowed by the profiler), unless every row is marked. The Compare page drops them too."""
    if "profiled" not in rows.columns or rows.empty:
        return rows
    profiled = rows["profiled"].map(lambda v: v is True or v == 1).astype(bool)
    return rows if profiled.all() else rows[~profiled]


def compute_step_time_stats(metrics: pd.DataFrame, rank: int | None = None) -> StepTimeStats | None:
    """Steady-state step-time statistics of ``rank`` (every rank, slowest per step, when None);
    None without step times."""
    if "step_time_s" not in metrics.columns or "step" not in metrics.columns or metrics.empty:
        return None
    return _stats(steady_step_time(metrics.to_dict(orient="records"), rank=rank))


def _stats(headline: StepTime) -> StepTimeStats | None:
    """Summary statistics of the kept steps of ``headline``; None when none is kept."""
    if headline.value_s is None:
        return None
    t = pd.Series(headline.kept_s, dtype="float64")
    return StepTimeStats(
        steps=int(t.size),
        mean_s=float(headline.mean_s),  # type: ignore[arg-type]  # kept steps exist
        median_s=headline.value_s,
        std_s=float(t.std(ddof=1)) if t.size > 1 else 0.0,
        p10_s=float(t.quantile(0.1)),
        p90_s=float(t.quantile(0.9)),
        samples_per_s=headline.samples_per_s,
        total_steps=len(headline.steps),
        dropped=headline.describe_dropped(),
    )


def compute_trace_step_times(steps: pd.DataFrame) -> pd.DataFrame:
    """The trace engine's step table as metrics-like rows: ``rank``, ``step``, ``step_time_s``."""
    if steps is None or steps.empty or "duration_us" not in steps.columns:
        return pd.DataFrame(columns=["rank", "step", "step_time_s"])
    out = pd.DataFrame(
        {
            "rank": steps["rank"] if "rank" in steps.columns else 0,
            "step": steps["step"],
            "step_time_s": pd.to_numeric(steps["duration_us"], errors="coerce") / 1e6,
        }
    )
    return out.reset_index(drop=True)


def compute_trace_step_time_stats(steps: pd.DataFrame, rank: int | None = None) -> StepTimeStats | None:
    """Step-time statistics from the profiled steps of the traces (for runs without metrics,
    e.g. imported traces): every profiled step counts (profiler windows start after warm-up),
    the slowest rank per step when ``rank`` is None, as Compare does for bare traces."""
    rows = compute_trace_step_times(steps)
    if rows.empty:
        return None
    return _stats(steady_step_time(rows.to_dict(orient="records"), rank=rank, from_trace=True))


def compute_peak_memory(system: pd.DataFrame, rank: int | None = None,
                        trace_peaks: pd.DataFrame | None = None) -> tuple[float | None, str]:
    """(peak bytes, source) of one run by the shared definition (app.analysis.memory.peak): the
    GPU allocator's whole-run peak, else the traces' tensor allocations (``trace_peaks``: a trace
    analysis' ``memory_peaks``), else sampled device levels, else host RSS. ``source`` is
    ``"none"`` without data; ``peak_quantity(source)`` names what was measured."""
    return pick_peak(peak_sources(system, trace_peaks, rank))


def trace_peaks_could_change(source: str) -> bool:
    """True when the traces' memory events would give a better peak than ``source`` (the run has
    no GPU allocator peak): callers load the trace analysis only then."""
    return source not in ("system:gpu_max_allocated_bytes", "system:cuda_max_allocated_bytes",
                          "system:peak_memory_bytes")


def _steps_total_us(steps: pd.DataFrame | None) -> float | None:
    if steps is not None and "duration_us" in steps.columns and len(steps):
        return float(pd.to_numeric(steps["duration_us"], errors="coerce").sum()) or None
    return None


def _with_pct(out: pd.DataFrame, steps: pd.DataFrame | None, value: str, text: str) -> pd.DataFrame:
    total = _steps_total_us(steps)
    if total:
        out["pct_of_step"] = out[value] / total * 100
    elif value == "self_us" and "share" in out.columns:  # the trace engine's share of step time (or of all op time)
        out["pct_of_step"] = out["share"] * 100
    else:
        out["pct_of_step"] = math.nan
    if text:
        out = out[out["name"].astype(str).str.contains(text, case=False, regex=False)]
    return out.sort_values(value, ascending=False, kind="stable").reset_index(drop=True)


def compute_ops_view(ops: pd.DataFrame, steps: pd.DataFrame | None, text: str = "") -> pd.DataFrame:
    """The op table (app/analysis/trace/ops.py: ``record_function`` ranges are not rows there) with
    ``pct_of_step`` (self time / profiled steps' time, %) and a name filter: ``text`` keeps ops
    whose name contains it (case-insensitive). Sorted by ``self_us``."""
    return _with_pct(ops.copy(), steps, "self_us", text)


def compute_annotations_view(annotations: pd.DataFrame, steps: pd.DataFrame | None, text: str = "") -> pd.DataFrame:
    """The ``record_function`` ranges (``ops.compute_annotation_table``: ``## forward ##``,
    ``Optimizer.step#…``, DataLoader ``__next__``…) with ``pct_of_step`` = *total* time (the range's
    wall time, children included) / profiled steps' time, %, sorted by ``total_us``. Ranges nest and
    overlap, so the column does not add up to anything; each row says how much of the step that
    range spans."""
    return _with_pct(annotations.copy(), steps, "total_us", text)
