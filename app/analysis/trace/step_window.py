"""Which profiled steps stand for a typical training step: evaluation passes and outliers left out (analysis layer).

Per-step means of a trace (the Compare breakdown and phase waterfall, the advisor's "out of
X ms") should describe a training step. A profiled window can hold a step that also ran an
evaluation pass (the sample models evaluate every ``--eval-every`` steps), which can last
several times longer than a training step and would dominate a mean of three steps.

``typical_steps(steps, metrics)`` drops such steps, as long as at least one other profiled
step remains:

* with a run's metrics: the steps the agent marked ``"evaluation": true`` (a forward of the
  model in ``eval()`` mode, or forwards with no backward before the next optimizer step, however
  the loss is computed) and the steps at which an evaluation was logged (a ``val_*`` or
  ``eval_*`` value at that step, the way ``sample_models/record.py`` detects them);
* for a bare trace (no metrics): steps lasting more than ``OUTLIER_FACTOR`` times the median
  profiled step, when there are at least ``OUTLIER_MIN_STEPS`` steps, so a single export or
  evaluation stall cannot move the mean. With fewer steps nothing is dropped: with two steps
  there is no way to tell which one is typical.

With the run's profiler windows (app.analysis.trace.windows), the steps of anomaly-triggered
windows are left out first, as long as steps of other windows remain: the agent profiled them
because they were slow, so they do not stand for a typical step.

The note says which steps were left out and why (see docs/compare.md).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from app.analysis.run.step_time import EVAL_PREFIXES, EVALUATION_KEY
from app.analysis.trace.windows import ProfiledWindow, anomaly_step_numbers

__all__ = ["OUTLIER_FACTOR", "OUTLIER_MIN_STEPS", "StepWindow", "evaluation_flags", "evaluation_steps", "typical_steps"]

OUTLIER_FACTOR = 2.0
OUTLIER_MIN_STEPS = 3
_EVAL_PREFIXES = EVAL_PREFIXES  # one list: app.analysis.run.step_time (the headline step time) uses it too


@dataclass(frozen=True)
class StepWindow:
    """The profiled steps kept for per-step means (``steps``: rows of the step table),
    the step numbers left out, and a note saying why (empty when nothing was left out)."""

    steps: pd.DataFrame
    excluded: tuple[int, ...] = ()
    note: str = ""

    @property
    def count(self) -> int:
        """Number of distinct profiled steps kept."""
        if len(self.steps) == 0 or "step" not in self.steps.columns:
            return len(self.steps)
        return int(self.steps["step"].nunique())


def evaluation_steps(metrics: pd.DataFrame | None) -> set[int]:
    """Step numbers that held an evaluation: marked ``"evaluation": true`` by the agent (any
    rank), or with an evaluation metric logged (``val_loss``, ``eval_acc``…)."""
    if metrics is None or len(metrics) == 0 or "step" not in metrics.columns:
        return set()
    cols = [c for c in metrics.columns if str(c).lower().startswith(_EVAL_PREFIXES)]
    logged = metrics[cols].apply(pd.to_numeric, errors="coerce").notna().any(axis=1) if cols \
        else pd.Series(False, index=metrics.index)
    if EVALUATION_KEY in metrics.columns:
        logged |= evaluation_flags(metrics[EVALUATION_KEY])
    steps = pd.to_numeric(metrics.loc[logged, "step"], errors="coerce").dropna()
    return {int(s) for s in steps}


def evaluation_flags(values: pd.Series) -> pd.Series:
    """True where an ``evaluation`` value marks the step (true or a non-zero number; missing,
    false and text are not marks)."""
    return pd.to_numeric(values, errors="coerce").fillna(0.0) != 0


def _fmt_ms(us: float) -> str:
    return f"{us / 1e3:,.2f} ms"


def typical_steps(steps: pd.DataFrame | None, metrics: pd.DataFrame | None = None,
                  windows: Sequence[ProfiledWindow] = ()) -> StepWindow:
    """The profiled steps that stand for a training step; see the module docstring.

    ``steps`` is a TraceAnalysis step table (``step``, ``duration_us``, one row per rank and
    step); ``metrics`` the run's metrics, or None for a bare trace; ``windows`` the run's
    profiler windows (the manifest's ``profiler.windows``), () when unknown."""
    anomalous = anomaly_step_numbers(windows)
    if anomalous and steps is not None and "step" in steps.columns:
        numbers = pd.to_numeric(steps["step"], errors="coerce")
        dropped = sorted({int(s) for s in numbers.dropna() if int(s) in anomalous})
        kept = steps[~numbers.isin(dropped)]
        if dropped and len(kept):
            labels = "; ".join(sorted({w.label for w in windows if w.anomalous}))
            note = (f"profiled step(s) {', '.join(f'#{s}' for s in dropped)} were taken by an anomaly-triggered "
                    f"window ({labels}) and are left out of the per-step means, the operator and the kernel deltas")
            rest = _typical_steps(kept, metrics)
            return StepWindow(rest.steps, tuple(sorted((*dropped, *rest.excluded))),
                              note + (f"; {rest.note}" if rest.note else ""))
    return _typical_steps(steps, metrics)


def _typical_steps(steps: pd.DataFrame | None, metrics: pd.DataFrame | None) -> StepWindow:
    if steps is None or len(steps) == 0 or "step" not in steps.columns or "duration_us" not in steps.columns:
        return StepWindow(steps if steps is not None else pd.DataFrame())
    numbers = pd.to_numeric(steps["step"], errors="coerce")
    # A synchronous step lasts as long as its slowest rank.
    per_step = pd.to_numeric(steps["duration_us"], errors="coerce").groupby(numbers).max().dropna()
    if len(per_step) < 2:
        return StepWindow(steps)
    if metrics is not None:
        evals = sorted(s for s in evaluation_steps(metrics) if s in per_step.index)
        if evals and len(evals) < len(per_step):
            median = float(per_step.drop(index=evals).median())
            lasted = ", ".join(f"#{s} ({_fmt_ms(float(per_step[s]))})" for s in evals)
            note = (f"profiled step(s) {lasted} also ran an evaluation (marked evaluation by the agent, or "
                    f"a val_* value logged at that step) and are left out of the per-step means, the "
                    f"operator and the kernel deltas; the other profiled steps last {_fmt_ms(median)} (median)")
            return StepWindow(steps[~numbers.isin(evals)], tuple(evals), note)
        return StepWindow(steps)
    if len(per_step) < OUTLIER_MIN_STEPS:
        return StepWindow(steps)
    median = float(np.median(per_step.to_numpy(float)))
    outliers = sorted(int(s) for s, d in per_step.items() if median > 0 and d > OUTLIER_FACTOR * median)
    if not outliers or len(outliers) >= len(per_step):
        return StepWindow(steps)
    lasted = ", ".join(f"#{s} ({_fmt_ms(float(per_step[s]))})" for s in outliers)
    note = (f"profiled step(s) {lasted} last more than {OUTLIER_FACTOR:g}× the median profiled step "
            f"({_fmt_ms(median)}) and are left out of the per-step means, the operator and the kernel deltas "
            "(no metrics say what they ran)")
    return StepWindow(steps[~numbers.isin(outliers)], tuple(outliers), note)
