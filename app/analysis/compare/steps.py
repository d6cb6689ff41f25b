"""Steady-state step times, throughput, peak memory and logged metrics of two sides (analysis layer).

Step times come from the run's metrics (``step_time_s`` per step; the slowest rank of a step
counts) and, for bare traces, from the trace's ``ProfilerStep`` durations. Warm-up steps, steps
inside profiler windows and steps that ran an evaluation pass are dropped explicitly; the table
keeps them with the reason.

An inference run's steps are its model calls (``"inference": true`` lines): the agent's own
warm-up rule marks its warm-up calls (``"warmup": true``, profiler_agent/inference.py), which
replaces the automatic warm-up; the table's ``attrs["inference"]`` is True (compare_latency).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import pandas as pd

from app.analysis.compare.latency import INFERENCE_KEY
from app.analysis.compare.side import CompareSide
from app.analysis.memory.peak import (
    common_peak,
    peak_description,
    peak_quantity,
    peak_sources,
    pick_peak,
)
from app.analysis.run import step_time
from app.analysis.run.step_time import COMPILE_KEY, DropReason
from app.analysis.stats.ratio import Direction
from app.analysis.trace.step_window import evaluation_steps

__all__ = [
    "StepSource",
    "STEP_TIME_COLUMNS",
    "compute_step_times",
    "auto_warmup",
    "kept_step_times",
    "kept_throughput",
    "PeakMemory",
    "compute_peak_memory",
    "metric_direction",
    "final_window",
]

STEP_TIME_COLUMNS = ["step", "step_time_s", "samples", "tokens", "contention", "steal", "kept", "reason"]
# Per-step amounts summed over ranks (work done), and machine shares taken as the worst rank's
# (ranks on one machine see the same machine; on several, the most contended one sets the pace).
_SUMMED = ("samples", "tokens")
_SHARES = ("contention", "steal")
# Auto warm-up for metrics: drop the first steps (one-off costs: allocator growth, cudnn
# autotuning, lazy init, first DataLoader batch) but always keep at least step_time.MIN_KEPT steps. The
# constants and the reasons are app.analysis.run.step_time's: the catalog, `ls` and the Overview compute
# the same headline with steady_step_time (tests/analysis/run/test_step_time.py checks they agree).


class StepSource(StrEnum):
    METRICS = "metrics"  # step_time_s logged per step (all steps of the job)
    TRACE = "trace"  # ProfilerStep durations (profiled steps only)
    NONE = "none"


def auto_warmup(n_steps: int, source: StepSource) -> int:
    """Steps dropped at the start when the user does not say: min(5, n/10) for metrics (the
    profiler's own warm-up already precedes traced steps, so 0 for traces), never leaving
    fewer than step_time.MIN_KEPT steps."""
    return step_time.auto_warmup(n_steps, from_trace=source is not StepSource.METRICS)


# Profiler warm-up iterations before each traced block when the manifest does not record the
# schedule: the agent's default (profiler_agent.options.ProfileSchedule.warmup).
DEFAULT_PROFILER_WARMUP = 2


def _profiler_warmup(side: CompareSide) -> int:
    extra = side.run.manifest.extra if side.run is not None else {}
    prof = extra.get("profiler") if isinstance(extra, dict) else None
    value = prof.get("warmup") if isinstance(prof, dict) else None
    return int(value) if isinstance(value, int) and value >= 0 else DEFAULT_PROFILER_WARMUP


def _agent_marked(side: CompareSide) -> bool:
    """Whether the run's metrics lines carry the agent's own ``profiled`` marks (warm-up included)."""
    metrics = side.run.metrics if side.run is not None else None
    return metrics is not None and "profiled" in metrics.columns and bool(
        (pd.to_numeric(metrics["profiled"], errors="coerce").fillna(0.0) != 0).any())


def _profiled_steps(side: CompareSide) -> set[int]:
    """Steps inside profiler windows: the traced ones (the agent numbers ProfilerStep#N like its
    own steps) and, when the metrics lines carry no ``profiled`` marks, the profiler's warm-up
    steps just before each traced block, guessed from the manifest's schedule. The agent's marks
    are exact (an anomaly window warms up 1 step, not the schedule's 2), so they are not
    second-guessed: the records-only step time the catalog reads then equals Compare's."""
    steps = getattr(side.analysis, "steps", None)
    if steps is None or len(steps) == 0 or "step" not in steps.columns:
        return set()
    traced = {int(s) for s in pd.to_numeric(steps["step"], errors="coerce").dropna()}
    if _agent_marked(side):
        return traced
    warm = _profiler_warmup(side)
    starts = [s for s in traced if s - 1 not in traced]
    return traced | {s - k for s in starts for k in range(1, warm + 1) if s - k >= 0}


_WARMUP_KEY = "warmup"  # an inference call the agent's warm-up rule dropped
_MARKS = ("profiled", COMPILE_KEY, INFERENCE_KEY, _WARMUP_KEY)


def _from_metrics(metrics: pd.DataFrame) -> pd.DataFrame:
    optional = [c for c in (*_SUMMED, *_SHARES, *_MARKS) if c in metrics.columns]
    m = metrics[["step", "step_time_s", *optional]].copy()
    for col in ["step_time_s", *(c for c in optional if c not in _MARKS)]:
        m[col] = pd.to_numeric(m[col], errors="coerce")
    m = m[np.isfinite(m["step_time_s"].to_numpy(float, na_value=np.nan)) & (m["step_time_s"] > 0)]
    if "profiled" in m.columns:
        # true/false/missing (read as 1.0/0.0/NaN or objects): only a true value marks a profiled step
        m["profiled"] = pd.to_numeric(m["profiled"], errors="coerce").fillna(0.0).to_numpy(float) != 0
    for mark in (COMPILE_KEY, INFERENCE_KEY, _WARMUP_KEY):  # same for torch.compile's and inference's marks
        if mark in m.columns:
            m[mark] = pd.to_numeric(m[mark], errors="coerce").fillna(0.0).to_numpy(float) != 0
    g = m.groupby("step", sort=True)
    out = g["step_time_s"].max().to_frame()  # a synchronous step lasts as long as its slowest rank
    for col in optional:
        # amounts of all ranks together (NaN when no rank logged one); shares and marks: any rank's
        out[col] = g[col].sum(min_count=1) if col in _SUMMED else g[col].max()
    return out.reset_index()


def _from_trace(steps: pd.DataFrame) -> pd.DataFrame:
    t = steps[["step", "duration_us"]].copy()
    t["step_time_s"] = pd.to_numeric(t["duration_us"], errors="coerce") / 1e6
    t = t[np.isfinite(t["step_time_s"].to_numpy(float, na_value=np.nan)) & (t["step_time_s"] > 0)]
    return t.groupby("step", sort=True).agg(step_time_s=("step_time_s", "max")).reset_index()


def compute_step_times(side: CompareSide, warmup_steps: int | None = None) -> tuple[pd.DataFrame, StepSource]:
    """Return (per-step table with STEP_TIME_COLUMNS, source) for one side.

    ``kept`` marks the steady-state steps used by the verdicts; ``reason`` says why a step was
    dropped (``warm-up``, ``profiled``, ``compile``, ``evaluation``). ``warmup_steps`` None picks ``auto_warmup``.
    """
    metrics = side.run.metrics if side.run is not None else None
    if metrics is not None and "step_time_s" in metrics.columns and "step" in metrics.columns:
        table, source = _from_metrics(metrics), StepSource.METRICS
    elif (trace_steps := getattr(side.analysis, "steps", None)) is not None and len(trace_steps):
        table, source = _from_trace(trace_steps), StepSource.TRACE
    else:
        return pd.DataFrame(columns=STEP_TIME_COLUMNS), StepSource.NONE
    if len(table) == 0:
        return pd.DataFrame(columns=STEP_TIME_COLUMNS), StepSource.NONE
    for col in (*_SUMMED, *_SHARES):
        if col not in table.columns:
            table[col] = np.nan
    inference = source is StepSource.METRICS and INFERENCE_KEY in table.columns and bool(table[INFERENCE_KEY].any())
    k = auto_warmup(len(table), source) if warmup_steps is None else max(0, int(warmup_steps))
    if inference and warmup_steps is None:  # the agent's warm-up rule marked the calls
        k = 0
    reason = np.full(len(table), "", dtype=object)
    if source is StepSource.METRICS:
        # copy: pandas may hand back a read-only view, and the mask is edited in place below.
        profiled = table["step"].isin(_profiled_steps(side)).to_numpy(copy=True)
        if "profiled" in table.columns:
            # The agent writes the key only on profiled steps: missing (NaN) means not profiled.
            profiled |= table["profiled"].eq(True).to_numpy()
        if profiled.all():  # every step was profiled: nothing unprofiled to compare
            profiled[:] = False
        reason[profiled] = DropReason.PROFILED
        if COMPILE_KEY in table.columns:  # torch.compile compiled during the step: not steady state
            compiled = table[COMPILE_KEY].eq(True).to_numpy() & (reason == "")
            if compiled.any() and not (compiled | (reason != "")).all():
                reason[compiled] = DropReason.COMPILE
        # Steps that also ran an evaluation pass (a val_* value logged at that step) are not
        # training steps; sample_models/record.py leaves them out of its median the same way.
        evaluated = table["step"].isin(evaluation_steps(metrics)).to_numpy() & (reason == "")
        if evaluated.any() and not (evaluated | (reason != "")).all():
            reason[evaluated] = DropReason.EVALUATION
    reason[: min(k, len(table))] = DropReason.WARMUP
    if inference and warmup_steps is None and _WARMUP_KEY in table.columns:
        warm = table[_WARMUP_KEY].eq(True).to_numpy()
        if not (warm | (reason != "")).all():
            reason[warm] = DropReason.WARMUP
    table["reason"] = reason
    table["kept"] = reason == ""
    out = table[STEP_TIME_COLUMNS].reset_index(drop=True)
    if inference:
        out.attrs[INFERENCE_KEY] = True
    return out, source


def kept_step_times(table: pd.DataFrame) -> np.ndarray:
    """The steady-state step times (seconds) of a compute_step_times table."""
    return np.asarray(table.loc[table["kept"].astype(bool), "step_time_s"].to_numpy(float), dtype=float)


def kept_throughput(table: pd.DataFrame) -> tuple[np.ndarray, str]:
    """Per-step throughput of the kept steps and its unit: samples/s when samples are logged
    on every kept step, else steps/s."""
    kept = table[table["kept"].astype(bool)]
    samples = pd.to_numeric(kept["samples"], errors="coerce").to_numpy(float)
    times = kept["step_time_s"].to_numpy(float)
    with np.errstate(over="ignore", divide="ignore"):  # sub-microsecond steps of hand-made traces
        if len(samples) and np.isfinite(samples).all() and (samples > 0).all():
            return samples / times, "samples_per_s"
        return 1.0 / times, "steps_per_s"


@dataclass(frozen=True)
class PeakMemory:
    """Peak memory of one side from one source (the same source is used for both sides).

    ``source`` is ``system:<column>``, ``trace_allocated:<device kind>`` or ``none``
    (app.analysis.memory.peak); ``own_source`` is the best source this side has on its own,
    which differs from ``source`` when the other side lacks it."""

    bytes: float | None
    source: str  # "trace_allocated:<device kind>", "system:<column>" or "none"
    own_source: str = ""

    @property
    def quantity(self) -> str:
        """What the number measures, briefly ("GPU allocator", "CPU tensors", "host RSS")."""
        return peak_quantity(self.source)

    @property
    def description(self) -> str:
        """What the number measures, in one sentence."""
        return peak_description(self.source)


def _memory_sources(side: CompareSide) -> dict[str, float]:
    peaks = getattr(side.analysis, "memory_peaks", None)
    if peaks is None:  # older TraceAnalysis-like objects carry the peaks table as ``memory``
        peaks = getattr(side.analysis, "memory", None)
    return peak_sources(side.run.system if side.run is not None else None, peaks)


def compute_peak_memory(baseline: CompareSide, candidate: CompareSide) -> tuple[PeakMemory, PeakMemory]:
    """Peak memory of both sides from the best source both have, in the order of
    app.analysis.memory.peak.PEAK_SOURCE_ORDER: the GPU allocator's whole-run peak, the traces'
    tensor allocations (CUDA, then CPU), sampled device levels, then host RSS."""
    a, b = _memory_sources(baseline), _memory_sources(candidate)
    own_a, own_b = pick_peak(a)[1], pick_peak(b)[1]
    va, vb, source = common_peak(a, b)
    return PeakMemory(va, source, own_a), PeakMemory(vb, source, own_b)


_LOWER_WORDS = ("loss", "error", "err", "perplexity", "ppl", "wer", "cer", "mse", "mae", "nll")
_HIGHER_WORDS = ("acc", "accuracy", "f1", "auc", "precision", "recall", "bleu", "score", "map", "iou")


def metric_direction(key: str) -> Direction:
    """Which way is better for a logged metric, from its name (``val_loss`` → lower)."""
    words = key.lower().replace("-", "_").replace("/", "_").split("_")
    if any(w in _LOWER_WORDS for w in words):
        return Direction.LOWER
    if any(w in _HIGHER_WORDS for w in words):
        return Direction.HIGHER
    return Direction.NONE


def final_window(values: np.ndarray) -> np.ndarray:
    """The last values that define a "final" metric: the last 10 % (1 to 20 values), so one
    noisy last batch does not decide."""
    n = len(values)
    w = max(1, min(20, math.ceil(n / 10)))
    return values[n - w:]
