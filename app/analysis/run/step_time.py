"""The one headline step time of a run: the median of its steady-state steps (analysis layer, pure).

A rule over a run's metric records (no pandas): the run catalog (app.workspace.catalog_rows),
the comparison and the Run page all call it.

Every place that shows a single step-time number (the Runs page, ``torchscope ls``, the Run
page's Overview, Compare and ``torchscope diff``) uses :func:`steady_step_time`, so they agree.
The rule is Compare's (docs/compare.md, "Step time: which steps count"; docs/app.md, "Step
time"):

* a step's time is its ``step_time_s``; when several ranks log the step, the slowest rank's
  (a synchronous step lasts as long as its slowest rank). Missing, non-numeric, non-finite and
  non-positive times are ignored;
* ``warm-up``: the first ``K`` steps, ``K = min(5, n // 10)`` by default (never leaving fewer
  than 3 steps; 0 for steps taken from traces, which already follow the profiler's warm-up);
* ``profiled``: steps inside profiler windows — any rank's line says ``"profiled": true`` (the
  agent marks the profiler's warm-up and active iterations), or the caller passes them in
  ``profiled_steps`` (Compare adds the steps it finds in the traces) — unless every step is;
* ``evaluation``: steps the agent marked ``"evaluation": true`` (the step held a forward of the
  model in eval() mode, or forwards with no backward before the next optimizer step) and steps
  at which an evaluation metric was logged (a ``val_*``, ``eval_*``, ``valid_*``,
  ``validation_*`` or ``test_*`` value), any rank, unless only those would remain;
* ``compile``: steps the agent marked ``"compile": true`` (torch.compile compiled or recompiled
  during the step), any rank, unless only those would remain;
* the value is the median of the remaining (kept) steps.

Input is the records of ``metrics.jsonl`` as read (dicts; no pandas), so the catalog can call it
on 1,000 runs quickly. Plain Python, no numpy: the median of the same floats is the same number.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "AUTO_WARMUP_MAX",
    "MIN_KEPT",
    "EVAL_PREFIXES",
    "EVALUATION_KEY",
    "COMPILE_KEY",
    "DropReason",
    "StepTime",
    "auto_warmup",
    "steady_step_time",
]

AUTO_WARMUP_MAX = 5
MIN_KEPT = 3
# The keys that mark an evaluation step (as app.analysis.trace.step_window and sample_models/record.py).
EVAL_PREFIXES = ("val_", "eval_", "valid_", "validation_", "test_")
# The agent's per-step mark of a step that held an evaluation (written only when true).
EVALUATION_KEY = "evaluation"
# The agent's per-step mark of a step during which torch.compile compiled (written only when true).
COMPILE_KEY = "compile"


class DropReason:
    """Why a step is not part of the steady state (the ``reason`` of Compare's step table)."""

    WARMUP = "warm-up"
    PROFILED = "profiled"
    EVALUATION = "evaluation"
    COMPILE = "compile"


@dataclass(frozen=True)
class StepTime:
    """The headline step time and how it was obtained.

    ``value_s`` is the median of ``kept_s`` (None without any step time); ``steps`` the step
    numbers with a valid time, in order, ``times_s`` their times (slowest rank); ``dropped``
    maps a dropped step number to its reason; ``samples`` the samples of each step summed over
    ranks (None where not logged).
    """

    value_s: float | None
    steps: tuple[float, ...]
    times_s: tuple[float, ...]
    dropped: Mapping[float, str]
    samples: tuple[float | None, ...]
    warmup: int

    @property
    def n_used(self) -> int:
        """Number of steady-state steps the value is the median of."""
        return len(self.steps) - len(self.dropped)

    @property
    def kept_s(self) -> tuple[float, ...]:
        """Times (seconds) of the kept steps, in step order."""
        return tuple(t for s, t in zip(self.steps, self.times_s) if s not in self.dropped)

    def dropped_count(self, reason: str) -> int:
        """How many steps were dropped for ``reason`` (a DropReason value)."""
        return sum(1 for r in self.dropped.values() if r == reason)

    @property
    def mean_s(self) -> float | None:
        """Mean of the kept steps (a secondary figure; the headline is the median)."""
        kept = self.kept_s
        return statistics.fmean(kept) if kept else None

    @property
    def samples_per_s(self) -> float | None:
        """Throughput derived from the same steps, as Compare computes it: the median over kept
        steps of (samples of all ranks / step time); None unless every kept step logged samples."""
        rates = []
        for s, t, n in zip(self.steps, self.times_s, self.samples):
            if s in self.dropped:
                continue
            if n is None or not n > 0:
                return None
            rates.append(n / t)
        return statistics.median(rates) if rates else None

    def describe_dropped(self) -> str:
        """'2 warm-up, 3 profiled, 1 evaluation' (only the reasons that occur), or 'none'."""
        parts = [f"{self.dropped_count(r)} {r}" for r in (DropReason.WARMUP, DropReason.PROFILED,
                                                          DropReason.COMPILE, DropReason.EVALUATION) if self.dropped_count(r)]
        return ", ".join(parts) or "none"


def auto_warmup(n_steps: int, *, from_trace: bool = False) -> int:
    """Steps dropped at the start when the caller does not say: min(5, n // 10), never leaving
    fewer than MIN_KEPT steps; 0 for trace steps (the profiler's warm-up already precedes them)."""
    if from_trace:
        return 0
    return max(0, min(AUTO_WARMUP_MAX, n_steps // 10, n_steps - MIN_KEPT))


def _num(value: Any) -> float | None:
    """A finite float from a logged value (numbers and numeric strings), else None; bools are not numbers."""
    if type(value) is float:  # the common case, first
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        f = float(value)
    else:
        try:
            f = float(value)
        except (TypeError, ValueError):
            return None
    return f if math.isfinite(f) else None


def _flag(value: Any) -> bool:
    """True for a ``profiled`` or ``evaluation`` value that marks the step (true, or a non-zero number)."""
    if isinstance(value, bool):
        return value
    f = _num(value)
    return f is not None and f != 0


def _is_eval_key(key: Any) -> bool:
    return str(key).lower().startswith(EVAL_PREFIXES)


@dataclass
class _Scan:
    """What one pass over the records found: per step the slowest time and the samples, and the
    steps marked profiled, compiling or evaluating."""

    times: dict[Any, float] = field(default_factory=dict)
    samples: dict[Any, float] = field(default_factory=dict)
    flagged: set[Any] = field(default_factory=set)
    compiled: set[Any] = field(default_factory=set)
    evaluated: set[Any] = field(default_factory=set)


def _scan(records: Iterable[Mapping[str, Any]], *, from_trace: bool, rank: int | None) -> _Scan:
    out = _Scan()
    # The catalog calls this on every run of a store: the evaluation keys of a line are looked
    # up once per distinct set of keys (the agent writes few), not once per line.
    eval_keys: dict[tuple[str, ...], tuple[str, ...]] = {}
    for r in records:
        step = _num(r.get("step"))
        if step is None:
            continue
        if step.is_integer():  # step numbers come back as ints (3, not 3.0), like the file's
            step = int(step)
        # Evaluation and profiler windows are the job's, not one rank's: any rank's line counts.
        if not from_trace:
            keys = tuple(r)
            found = eval_keys.get(keys)
            if found is None:
                found = eval_keys[keys] = tuple(k for k in keys if _is_eval_key(k))
            if (found and any(_num(r[k]) is not None for k in found)) or \
                    (EVALUATION_KEY in r and _flag(r[EVALUATION_KEY])):
                out.evaluated.add(step)
        t = _num(r.get("step_time_s"))
        if t is None or t <= 0:
            continue
        if "profiled" in r and _flag(r["profiled"]):
            out.flagged.add(step)
        if COMPILE_KEY in r and _flag(r[COMPILE_KEY]):
            out.compiled.add(step)
        if rank is not None:
            own = _num(r.get("rank"))
            if (int(own) if own is not None else 0) != rank:
                continue
        prev = out.times.get(step)
        if prev is None or t > prev:
            out.times[step] = t
        if "samples" in r:
            n = _num(r["samples"])
            if n is not None:
                out.samples[step] = out.samples.get(step, 0.0) + n
    return out


def _window_reasons(order: list[Any], marked: set[Any], compiled: set[Any], evaluated: set[Any]) -> dict[Any, str]:
    """Profiled, compiling and evaluation steps to drop, each kind only while unmarked steps remain."""
    reasons: dict[Any, str] = {}
    if not order:
        return reasons
    profiled = [s for s in order if s in marked]
    if len(profiled) < len(order):  # when every step was profiled, nothing unprofiled is left
        reasons.update(dict.fromkeys(profiled, DropReason.PROFILED))
    compiles = [s for s in order if s in compiled and s not in reasons]
    if compiles and len(compiles) + len(reasons) < len(order):
        reasons.update(dict.fromkeys(compiles, DropReason.COMPILE))
    evals = [s for s in order if s in evaluated and s not in reasons]
    if evals and len(evals) + len(reasons) < len(order):
        reasons.update(dict.fromkeys(evals, DropReason.EVALUATION))
    return reasons


def steady_step_time(
    records: Iterable[Mapping[str, Any]],
    *,
    profiled_steps: Collection[float] = (),
    warmup_steps: int | None = None,
    from_trace: bool = False,
    rank: int | None = None,
) -> StepTime:
    """The steady-state median step time of one run's per-step records (see the module docstring).

    ``records``: ``metrics.jsonl`` lines (``step``, ``step_time_s``, optional ``rank``,
    ``samples``, ``profiled``, ``val_*`` ...), or trace steps as ``{"step", "step_time_s",
    "rank"}`` with ``from_trace=True`` (then nothing is dropped as profiled or evaluation).
    ``profiled_steps``: step numbers known to be inside profiler windows besides those the lines
    mark. ``warmup_steps``: K, or None for :func:`auto_warmup`. ``rank``: only that rank's step
    times (None: every rank, the slowest per step; evaluation and profiled marks of any rank
    still count); a line without ``rank`` is rank 0.
    """
    scan = _scan(records, from_trace=from_trace, rank=rank)
    times, samples = scan.times, scan.samples
    order = sorted(times)
    reasons = {} if from_trace else _window_reasons(order, scan.flagged | set(profiled_steps), scan.compiled,
                                                     scan.evaluated)
    k = auto_warmup(len(order), from_trace=from_trace) if warmup_steps is None else max(0, int(warmup_steps))
    for s in order[:k]:
        reasons[s] = DropReason.WARMUP
    kept = [times[s] for s in order if s not in reasons]
    return StepTime(
        value_s=statistics.median(kept) if kept else None,
        steps=tuple(order),
        times_s=tuple(times[s] for s in order),
        dropped=reasons,
        samples=tuple(samples.get(s) for s in order),
        warmup=min(k, len(order)),
    )
