"""Small helpers shared by the advisor's rule families: curves, step shares, config look-ups, and the
one severity gate that weighs a measure by the steps it rests on (analysis layer)."""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

import numpy as np
import pandas as pd

from app.analysis.trace.step_window import evaluation_steps as _logged_evaluation_steps
from app.analysis.trace.step_window import typical_steps
from app.analysis.trace.windows import anomaly_step_numbers
from app.presentation.units import format_percent

from .model import MissingEvidence, RunEvidence, Severity, Weight

# Which side of the HIGH threshold is worse: "above" for a share of the step, "below" for a busy share.
Worse: TypeAlias = Literal["above", "below"]

__all__ = [
    "require_run",
    "require_steps",
    "require_device_trace",
    "metric_curve",
    "step_share",
    "config_value",
    "severity_for",
    "events_of",
    "evaluation_step_numbers",
    "training_steps",
    "count_windows",
    "per_step_share",
    "weigh",
    "weigh_steps",
    "describe_weight",
    "curve_weight",
    "trace_weight",
    "MIN_STEPS_HIGH",
    "MIN_WINDOWS_HIGH",
    "MIN_STEPS_FLOOR",
    "STABLE_SHARE",
    "DOCS",
]

# The severity gate (docs/advisor.md, "Weight and the HIGH gate"). A HIGH finding must rest on at
# least MIN_STEPS_HIGH steps, or on MIN_WINDOWS_HIGH profiler windows (the signal came back at
# another time of the run) with at least MIN_STEPS_FLOOR steps; and its per-step measure must be on
# the HIGH side of the threshold in at least STABLE_SHARE of the steps. Three profiled steps of
# 7.5-35 ms gave "HIGH 46.6%" for an optimizer that timed at 22%: one slow step made the mean.
MIN_STEPS_HIGH = 5
MIN_WINDOWS_HIGH = 2
MIN_STEPS_FLOOR = 3
STABLE_SHARE = 0.8

# PyTorch documentation pages the findings link to (one place, so a moved page is one edit).
DOCS = {
    "dataloader": "https://pytorch.org/docs/stable/data.html#single-and-multi-process-data-loading",
    "amp": "https://pytorch.org/docs/stable/amp.html",
    "pinned": "https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html",
    "tuning": "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
    "compile": "https://pytorch.org/docs/stable/torch.compiler.html",
    "cuda_graphs": "https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs",
    "memory": "https://pytorch.org/docs/stable/notes/cuda.html#memory-management",
    "checkpoint": "https://pytorch.org/docs/stable/checkpoint.html",
    "no_grad": "https://pytorch.org/docs/stable/generated/torch.no_grad.html",
    "optim": "https://pytorch.org/docs/stable/optim.html#algorithms",
    "clip": "https://pytorch.org/docs/stable/generated/torch.nn.utils.clip_grad_norm_.html",
    "anomaly": "https://pytorch.org/docs/stable/autograd.html#anomaly-detection",
    "lr_schedule": "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate",
    "ddp_instead": "https://pytorch.org/docs/stable/notes/cuda.html#use-nn-parallel-distributeddataparallel-instead-of-multiprocessing-or-nn-dataparallel",
    "ddp": "https://pytorch.org/docs/stable/notes/ddp.html",
    "threads": "https://pytorch.org/docs/stable/notes/cpu_threading_torchscript_inference.html",
    "weight_decay": "https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html",
}


def require_run(ev: RunEvidence, what: str = "curves and config") -> None:
    """Raise MissingEvidence when the evidence is a bare trace (no run folder)."""
    if not ev.has_run:
        raise MissingEvidence(f"needs {what} of a recorded run; a bare trace has none")


def require_steps(ev: RunEvidence, *columns: str) -> pd.DataFrame:
    """The step table with ``columns`` present and at least one step with positive duration."""
    steps = ev.steps
    missing = [c for c in ("duration_us", *columns) if c not in steps.columns]
    if steps.empty or missing:
        raise MissingEvidence("needs profiler steps (ProfilerStep#N) in a trace")
    steps = steps[pd.to_numeric(steps["duration_us"], errors="coerce") > 0]
    if steps.empty:
        raise MissingEvidence("the trace's profiler steps have no duration")
    return steps


def require_device_trace(ev: RunEvidence) -> None:
    """Raise MissingEvidence unless some trace has GPU kernels."""
    if not ev.traces:
        raise MissingEvidence("needs a profiler trace")
    if not ev.has_device_trace:
        raise MissingEvidence("needs a GPU trace (kernels); this run's traces are CPU-only")


def metric_curve(ev: RunEvidence, key: str, *, min_points: int = 1) -> pd.DataFrame:
    """``step`` and ``value`` of one logged metric for the lowest rank, rows where it was logged.

    ±Inf values are kept; NaN rows are dropped (after the table is built a NaN cannot be told
    from "not logged"; the NaN-loss rule reads the rows itself).
    Raises MissingEvidence when the key was not logged at least ``min_points`` times.
    """
    require_run(ev, "logged curves")
    m = ev.metrics
    if m is None or m.empty or key not in m.columns:
        raise MissingEvidence(f"needs the logged metric {key!r}")
    if "rank" in m.columns and m["rank"].notna().any():
        m = m[m["rank"] == m["rank"].min()]
    values = pd.to_numeric(m[key], errors="coerce")
    out = pd.DataFrame({"step": pd.to_numeric(m["step"], errors="coerce"), "value": values})
    out = out[out["value"].notna()].dropna(subset=["step"])
    if len(out) < min_points:
        raise MissingEvidence(f"needs at least {min_points} logged values of {key!r} (has {len(out)})")
    return out.sort_values("step", kind="stable").reset_index(drop=True)


def step_share(steps: pd.DataFrame, column: str) -> float:
    """Sum of ``column`` over all steps divided by the sum of step durations."""
    total = float(pd.to_numeric(steps["duration_us"], errors="coerce").sum())
    part = float(pd.to_numeric(steps[column], errors="coerce").fillna(0).sum())
    return part / total if total > 0 else 0.0


def config_value(config: Mapping[str, Any], *names: str) -> Any:
    """The first config value whose key, normalised (lower case, '-' → '_'), is in ``names``."""
    wanted = {n.lower().replace("-", "_") for n in names}
    for k, v in config.items():
        if str(k).lower().replace("-", "_").lstrip("_") in wanted:
            return v
    return None


def as_number(v: Any) -> float | None:
    """``v`` as a finite float, or None (bools count as 0/1)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def severity_for(value: float, *, high: float, medium: float) -> Severity:
    """HIGH when ``value`` ≥ ``high``, MEDIUM when ≥ ``medium``, else LOW."""
    if value >= high:
        return Severity.HIGH
    if value >= medium:
        return Severity.MEDIUM
    return Severity.LOW


def events_of(ev: RunEvidence) -> Iterable[tuple[int, pd.DataFrame]]:
    """(rank, events table) per rank; a rank with several traces (several profiler windows)
    gets their events together, so per-step counts divide by all of that rank's steps."""
    by_rank: dict[int, list[pd.DataFrame]] = {}
    for t in ev.traces:
        events = getattr(t, "events", None)
        if events is not None and len(events):
            by_rank.setdefault(int(getattr(t, "rank", 0) or 0), []).append(events)
    for rank, frames in sorted(by_rank.items()):
        yield rank, frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


def evaluation_step_numbers(ev: RunEvidence) -> set[int]:
    """Steps of the run that held an evaluation: the agent's ``"evaluation": true`` on a metrics line
    (any rank), or an evaluation metric logged at that step (``val_*``, ``eval_*``…, as
    app.analysis.trace.step_window). Empty for a bare trace."""
    m = ev.metrics
    if not ev.has_run or m is None or len(m) == 0 or "step" not in m.columns:
        return set()
    found = set(_logged_evaluation_steps(m))
    if "evaluation" in m.columns:
        flagged = pd.to_numeric(m["evaluation"], errors="coerce") == 1  # True and 1; absent is NaN
        found |= {int(s) for s in pd.to_numeric(m.loc[flagged, "step"], errors="coerce").dropna()}
    return found


def training_steps(ev: RunEvidence, steps: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``steps`` that stand for a training step: evaluation steps (see
    evaluation_step_numbers) and steps only an anomaly-triggered window recorded (they were
    profiled because they were slow) left out while others remain; for a bare trace,
    typical_steps's outliers (steps > 2× the median) left out."""
    if len(steps) == 0 or "step" not in steps.columns:
        return steps
    if not ev.has_run:
        return typical_steps(steps, None).steps
    untypical = evaluation_step_numbers(ev) | anomaly_step_numbers(ev.windows)
    numbers = pd.to_numeric(steps["step"], errors="coerce")
    kept = steps[~numbers.isin(untypical)]
    return kept if len(kept) else steps


def _runs(numbers: np.ndarray) -> np.ndarray:
    """Run index (0, 1, …) of each sorted unique step number; a gap in the numbering starts a run."""
    return np.concatenate([[0], np.cumsum(np.diff(numbers) > 1)]) if len(numbers) else np.zeros(0, int)


def count_windows(ev: RunEvidence, steps: pd.DataFrame) -> int:
    """Profiler windows the step rows came from, the smallest over the ranks present. Per rank: the
    runs of consecutive numbers in the rank's whole profiled step table (each profiler cycle is one
    trace, and the wait between cycles leaves a gap) that hold one of ``steps``, so a left-out
    evaluation step does not split a window; plus the rank's traces beyond those runs (cycles with
    no wait between them), as long as there are kept steps to fill them."""
    if len(steps) == 0 or "step" not in steps.columns:
        return 0
    ranks = steps["rank"] if "rank" in steps.columns else pd.Series(0, index=steps.index)
    full = ev.steps if "step" in ev.steps.columns else steps
    traces: dict[int, int] = {}
    for t in ev.traces:
        r = int(getattr(t, "rank", 0) or 0)
        traces[r] = traces.get(r, 0) + 1
    counts = []
    for rank, rows in steps.groupby(ranks):
        mine = full[full["rank"] == rank] if "rank" in full.columns else full
        numbers = np.unique(pd.to_numeric(mine["step"], errors="coerce").dropna().to_numpy(int))
        kept = np.unique(pd.to_numeric(rows["step"], errors="coerce").dropna().to_numpy(int))
        run_of = dict(zip(numbers, _runs(numbers)))
        used = {run_of[n] for n in kept if n in run_of} or {0}
        extra = max(0, traces.get(int(rank), 0) - (len(set(run_of.values())) or 1))
        counts.append(min(len(used) + extra, max(1, len(kept))))
    return min(counts) if counts else 0


def per_step_share(steps: pd.DataFrame, *columns: str) -> np.ndarray:
    """Per row (rank, step): the sum of ``columns`` divided by the step's duration (0 for a step
    without duration)."""
    dur = pd.to_numeric(steps["duration_us"], errors="coerce").to_numpy(float)
    part = sum(pd.to_numeric(steps[c], errors="coerce").fillna(0).to_numpy(float) for c in columns)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(dur > 0, np.asarray(part, float) / np.where(dur > 0, dur, 1.0), 0.0)


def _count_phrase(n: int, basis: str, windows: int) -> str:
    unit = basis if n != 1 else basis.rstrip("s")
    text = f"{n} {unit}"
    if windows:
        text += f" in {windows} window{'s' if windows != 1 else ''}"
    return text


def weigh(severity: Severity, *, values: Sequence[float] | np.ndarray | None, high: float, steps: int,
          windows: int = 0, basis: str = "profiled steps", measure: str = "", worse: Worse = "above",
          step_us: Sequence[float] | np.ndarray | None = None) -> tuple[Severity, Weight]:
    """The one severity gate of the advisor: ``severity`` capped at MEDIUM unless the signal is stable,
    and the finding's Weight.

    ``values`` are the per-step values of the measure (None when the rule has none: only the
    counts are judged); ``high`` its HIGH threshold; ``worse`` "above" when larger values are worse
    (a share of the step) or "below" (GPU busy share). Stable: steps ≥ MIN_STEPS_HIGH, or
    windows ≥ MIN_WINDOWS_HIGH with steps ≥ MIN_STEPS_FLOOR; and at least STABLE_SHARE of the
    per-step values on the HIGH side of ``high``.
    """
    vals = np.asarray(values, float) if values is not None else None
    vals = vals[np.isfinite(vals)] if vals is not None else None
    spread = (float(vals.min()), float(vals.max())) if vals is not None and len(vals) else None
    dur = np.asarray(step_us, float) if step_us is not None else np.zeros(0)
    dur = dur[np.isfinite(dur) & (dur > 0)]
    step_ms = (float(dur.min()) / 1000, float(dur.max()) / 1000) if len(dur) else None
    enough = steps >= MIN_STEPS_HIGH or (windows >= MIN_WINDOWS_HIGH and steps >= MIN_STEPS_FLOOR)
    note = ""
    if not enough:
        repeat = (f", or {MIN_STEPS_FLOOR} in {MIN_WINDOWS_HIGH} profiler windows"
                  if basis == "profiled steps" else "")
        note = f"rests on {_count_phrase(steps, basis, windows)}; HIGH needs at least {MIN_STEPS_HIGH} {basis}{repeat}"
    elif vals is not None and spread is not None:
        on_side = (vals >= high) if worse == "above" else (vals <= high)
        if on_side.mean() < STABLE_SHARE:
            side = "above" if worse == "above" else "below"
            note = (f"{measure or 'the measure'} is {side} the HIGH threshold ({high:.3g}) in only "
                    f"{int(on_side.sum())} of {len(vals)} steps (per step {spread[0]:.3g}–{spread[1]:.3g})")
    stable = not note
    weight = Weight(steps=int(steps), windows=int(windows), basis=basis, measure=measure, spread=spread,
                    step_ms=step_ms, stable=stable,
                    note=f"capped at MEDIUM: {note}" if note and severity == Severity.HIGH else "")
    if severity == Severity.HIGH and not stable:
        return Severity.MEDIUM, weight
    return severity, weight


def weigh_steps(ev: RunEvidence, steps: pd.DataFrame, severity: Severity, *, values: Sequence[float] | np.ndarray | None,
                high: float, measure: str, worse: Worse = "above") -> tuple[Severity, Weight]:
    """weigh() for a measure taken over rows of the trace's step table: counts the distinct steps,
    the windows (count_windows) and the step durations from ``steps``."""
    n = int(pd.to_numeric(steps["step"], errors="coerce").nunique()) if "step" in steps.columns else len(steps)
    durations = pd.to_numeric(steps["duration_us"], errors="coerce").to_numpy(float) if "duration_us" in steps.columns else None
    return weigh(severity, values=values, high=high, steps=n, windows=count_windows(ev, steps),
                 basis="profiled steps", measure=measure, worse=worse, step_us=durations)


def curve_weight(values: Sequence[float] | np.ndarray, *, measure: str, basis: str = "logged steps") -> Weight:
    """The Weight of a finding read from a logged curve (not gated: a NaN or a 10× spike is a fact,
    not a share that varies from step to step): how many points (NaN/Inf ones included), and the
    range of the finite ones."""
    v = np.asarray(values, float)
    finite = v[np.isfinite(v)]
    return Weight(steps=len(v), basis=basis, measure=measure,
                  spread=(float(finite.min()), float(finite.max())) if len(finite) else None)


def trace_weight(ev: RunEvidence, steps: pd.DataFrame) -> Weight:
    """The Weight of a finding about a property the trace shows in every step it has (a module type,
    a peak, allocator calls): the steps and windows, their durations; not gated."""
    _, w = weigh_steps(ev, steps, Severity.LOW, values=None, high=math.inf, measure="")
    return Weight(steps=w.steps, windows=w.windows, step_ms=w.step_ms)


def _fmt_value(measure: str, v: float) -> str:
    return format_percent(v) if measure.endswith("share") else f"{v:.3g}"


def describe_weight(w: Weight | None) -> str:
    """One line for people: "from 3 profiled steps in 1 window, 7.5–35 ms per step; optimizer_share
    12.0%–61.0% per step; capped at MEDIUM: …" ("" for None)."""
    if w is None:
        return ""
    text = "from " + _count_phrase(w.steps, w.basis, w.windows)
    if w.step_ms is not None:
        lo, hi = w.step_ms
        text += f", {lo:.3g} ms per step" if math.isclose(lo, hi, rel_tol=1e-3) else f", {lo:.3g}–{hi:.3g} ms per step"
    if w.spread is not None and w.measure:
        lo, hi = w.spread
        # A gated measure's spread is over per-step values; an ungated curve's is its range.
        where = "per step" if w.stable is not None and w.basis.endswith("steps") else f"across the {w.basis}"
        text += f"; {w.measure} {_fmt_value(w.measure, lo)}–{_fmt_value(w.measure, hi)} {where}"
    if w.note:
        text += f"; {w.note}"
    return text
