"""Inference runs: a job that calls its model without ever stepping an optimizer (agent layer).

Recognition: a top-level module called :data:`RECOGNISE_CALLS` times for evaluation (eval mode or
no grad) with no backward and no optimizer step before makes the process an *inference run*.
Its root is the module so called that holds most parameters (``first_step.choose_root``); each
later top-level call of it is one step. A backward or an optimizer step before recognition means
a training job (an evaluation before the first step): nothing changes for it.

Per call (one ``metrics.jsonl`` line, docs/run-format.md "Inference runs"): ``step_time_s`` (the
call's latency: forward pre-hook to forward hook, host clock, no device sync), ``samples`` (the
first input's first dimension), ``inference: true``, ``idle_s`` (since the previous call ended),
and only when true ``warmup``, ``compile``, ``profiled``, ``grad_enabled`` (the forward ran with
grad mode on: no ``inference_mode``/``no_grad``) and ``train_mode`` (``module.training``: no
``model.eval()``).

Warm-up (:class:`WarmupRule`): lines are held back until the latency settles: after each call,
the median of the last :data:`WINDOW` calls is compared with the median of the :data:`WINDOW`
before them; the first time they agree within :data:`SETTLE_TOLERANCE`, every call before those
two windows is warm-up, and so are the leading calls of the two windows slower than
:data:`SLOW_FACTOR` × their median (the first call's one-off costs). Unsettled after
:data:`MAX_HELD` calls (or at the end of the job), the first ``min(5, n // 10)`` calls are warm-up,
as for training steps. Calls during which torch.compile compiled carry ``compile: true``
(``compilation.py``) and count as compilation, not latency.

At the end the process appends one summary line (``inference_calls``, ``warmup_calls``,
``latency_p50_s`` … ``throughput_samples_per_s``; :func:`latency_summary`) and puts the same
summary in run.json ``"inference"``.
"""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .anomaly import median

__all__ = ["RECOGNISE_CALLS", "WINDOW", "SETTLE_TOLERANCE", "SLOW_FACTOR", "MAX_HELD", "MANIFEST_KEY",
           "INFERENCE_KEY", "Call", "WarmupRule", "CallWatch", "latency_summary", "quantile"]

RECOGNISE_CALLS = 5  # top-level evaluation calls of one module, no backward/step: an inference run
WINDOW = 5  # calls per median window of the warm-up rule
SETTLE_TOLERANCE = 0.10  # two windows' medians within 10 %: the latency has settled
SLOW_FACTOR = 1.5  # a leading call slower than this x the settled median is still warm-up
MAX_HELD = 60  # lines held back at most while the latency settles
FALLBACK_WARMUP = 5  # unsettled: min(5, n // 10) calls, as training's auto warm-up
MANIFEST_KEY = "inference"  # run.json: the run's latency summary
INFERENCE_KEY = "inference"  # metrics.jsonl: a line of one inference call


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of sorted values; NaN when empty."""
    n = len(sorted_values)
    if n == 0:
        return float("nan")
    pos = q * (n - 1)
    lo = int(pos)
    hi = min(lo + 1, n - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


class WarmupRule:
    """Decides how many leading calls are warm-up, from their latencies (module docstring)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.warmup: int | None = None  # settled: the number of warm-up calls

    def observe(self, latency_s: float) -> int | None:
        """Add one call's latency; return the warm-up count once (the call that settles it), else None."""
        if self.warmup is not None:
            return None
        self.times.append(latency_s)
        n = len(self.times)
        if n >= 2 * WINDOW:
            last = median(self.times[n - WINDOW:])
            before = median(self.times[n - 2 * WINDOW:n - WINDOW])
            if min(last, before) > 0 and max(last, before) / min(last, before) - 1 <= SETTLE_TOLERANCE:
                k = n - 2 * WINDOW
                settled = median(self.times[k:])
                while k < n - WINDOW and self.times[k] > SLOW_FACTOR * settled:
                    k += 1
                self.warmup = k
                return k
        if n >= MAX_HELD:
            return self.give_up()
        return None

    def give_up(self) -> int:
        """Unsettled (too many calls held, or the job ended): the training rule, min(5, n // 10)."""
        if self.warmup is None:
            self.warmup = min(FALLBACK_WARMUP, len(self.times) // 10)
        return self.warmup


@dataclass(frozen=True)
class Call:
    """One top-level call as timed: latency, batch, grad mode and module.training at its start,
    the idle time since the previous call ended, and torch.compile's keys for it."""

    latency_s: float
    batch: int | None
    grad: bool
    train: bool
    idle_s: float | None
    compile: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class CallWatch:
    """Times top-level calls and holds inference lines back until the warm-up rule settles."""

    recognised: bool = False
    stopped: bool = False  # training began after recognition: no more inference lines
    rule: WarmupRule = field(default_factory=WarmupRule)
    held: list[dict[str, Any]] = field(default_factory=list)
    written: list[dict[str, Any]] = field(default_factory=list)  # kept for the summary (numbers only)
    calls_seen: dict[int, int] = field(default_factory=dict)  # before recognition: id(module) -> calls
    early: dict[int, list[Call]] = field(default_factory=dict)
    starts: dict[int, tuple[float, int | None, bool, bool]] = field(default_factory=dict)
    last_end: float | None = None

    @property
    def active(self) -> bool:
        return self.recognised and not self.stopped

    def begin(self, module_id: int, batch: int | None, grad: bool, train: bool) -> None:
        """A top-level call of ``module_id`` starts now."""
        self.starts[module_id] = (time.perf_counter(), batch, grad, train)

    def end(self, module_id: int) -> Call | None:
        """The call ended: its Call (without compile keys), or None without a start."""
        now = time.perf_counter()
        started = self.starts.pop(module_id, None)
        if started is None:
            return None
        t0, batch, grad, train = started
        idle = t0 - self.last_end if self.last_end is not None else None
        self.last_end = now
        return Call(now - t0, batch, grad, train, idle)

    def note_early(self, module_id: int, call: Call) -> int:
        """Before recognition: keep the call of ``module_id``; return its calls so far."""
        self.calls_seen[module_id] = self.calls_seen.get(module_id, 0) + 1
        kept = self.early.setdefault(module_id, [])
        if len(kept) < RECOGNISE_CALLS:
            kept.append(call)
        return self.calls_seen[module_id]

    def add(self, record: dict[str, Any]) -> list[dict[str, Any]]:
        """One call's line: the lines to write now (held back until warm-up is settled)."""
        if self.rule.warmup is not None:
            self._keep(record)
            return [record]
        self.held.append(record)
        k = self.rule.observe(float(record["step_time_s"]))
        return self._release(k) if k is not None else []

    def flush(self) -> list[dict[str, Any]]:
        """The job ends (or training begins): release what is held, with the fallback rule."""
        return self._release(self.rule.give_up()) if self.held else []

    def _release(self, warmup: int) -> list[dict[str, Any]]:
        out, self.held = self.held, []
        for i, rec in enumerate(out):
            if i < warmup:
                rec["warmup"] = True
            self._keep(rec)
        return out

    def _keep(self, record: Mapping[str, Any]) -> None:
        self.written.append({k: record.get(k) for k in ("step_time_s", "samples", "warmup", "compile", "profiled",
                                                        "grad_enabled", "train_mode")})


def latency_summary(calls: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The run's latency figures over its steady calls (not warm-up, compile or profiled; all
    calls when only those exist): per call and per sample p50/p90/p99 in seconds, samples per
    second (samples / latency summed over the steady calls), and counts."""
    def flag(c: Mapping[str, Any], key: str) -> bool:
        return bool(c.get(key))

    steady = [c for c in calls if not (flag(c, "warmup") or flag(c, "compile") or flag(c, "profiled"))]
    used = steady or [c for c in calls if not flag(c, "compile")] or list(calls)
    per_call = sorted(float(c["step_time_s"]) for c in used)
    per_sample = sorted(float(c["step_time_s"]) / int(c["samples"]) for c in used if c.get("samples"))
    total_s = sum(float(c["step_time_s"]) for c in used if c.get("samples"))
    samples = sum(int(c["samples"]) for c in used if c.get("samples"))
    out: dict[str, Any] = {
        "inference_calls": len(calls),
        "warmup_calls": sum(1 for c in calls if flag(c, "warmup")),
        "compile_calls": sum(1 for c in calls if flag(c, "compile")),
        "profiled_calls": sum(1 for c in calls if flag(c, "profiled")),
        "steady_calls": len(used),
        "grad_enabled_calls": sum(1 for c in calls if flag(c, "grad_enabled")),
        "train_mode_calls": sum(1 for c in calls if flag(c, "train_mode")),
    }
    for q in (50, 90, 99):
        out[f"latency_p{q}_s"] = quantile(per_call, q / 100)
        if per_sample:
            out[f"latency_per_sample_p{q}_s"] = quantile(per_sample, q / 100)
    if samples and total_s > 0:
        out["throughput_samples_per_s"] = samples / total_s
    if per_sample:
        out["batch_size_median"] = median(int(c["samples"]) for c in used if c.get("samples"))
    return out
