"""Profiler windows of a run and why each was taken: typical windows apart from anomaly-triggered ones (analysis layer).

The agent records every profiler window in the manifest's ``profiler.windows`` (profiler_agent
/profiling.py): its ``reason`` (``early``, ``scheduled``, ``evaluation``, ``requested``,
``anomaly``), the steps it recorded, its trace file and, for an anomaly-triggered window, a
``detail`` such as "2 training steps in a row over 2x the running median (4.3 ms); step 32 took
3.1x". An anomaly window holds steps the agent chose *because* they were slow: pooled with the
others, they would pass for typical steps in the op and kernel tables and the step breakdown.

:func:`windows_from_profiler` reads that list (the workspace hands over the manifest's
``profiler`` mapping; this module reads no file) into :class:`ProfiledWindow` records, tolerant
of a missing or malformed list (an older run has none: no window is then known to be anomalous).
:func:`split_traces` separates a run's traces into the typical ones and those of anomaly
windows; :func:`anomaly_step_numbers` says which profiled steps to leave out of typical means.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any, Protocol, TypeVar

import pandas as pd

from app.analysis.trace.summary import TraceAnalysis

__all__ = ["ANOMALY", "ProfiledWindow", "windows_from_profiler", "anomaly_windows", "anomaly_step_numbers",
           "split_traces", "with_typical_tables", "compute_window_table", "WINDOW_COLUMNS"]

ANOMALY = "anomaly"  # profiler_agent.profiling.WindowReason.ANOMALY (the app does not import the agent's torch side)
_RATIO_RE = re.compile(r"took ([0-9.]+)x")


@dataclass(frozen=True)
class ProfiledWindow:
    """One profiler window: why it was taken, the steps it recorded, its trace (run-relative path)."""

    reason: str
    steps: tuple[int, ...]
    rank: int | None = None
    trace: str | None = None
    detail: str = ""
    evaluation: bool = False  # an evaluation phase began while it recorded

    @property
    def anomalous(self) -> bool:
        """Taken because steps were slow: its steps are not typical."""
        return self.reason == ANOMALY

    @property
    def ratio(self) -> float | None:
        """For an anomaly window, how many times the running median the triggering step took."""
        m = _RATIO_RE.search(self.detail)
        return float(m.group(1)) if m else None

    @property
    def label(self) -> str:
        """The reason for people: ``early``, ``evaluation``, ``anomaly: step 3.1× the running median``."""
        if self.anomalous and self.ratio is not None:
            return f"anomaly: step {self.ratio:g}× the running median"
        return self.reason


def _window(raw: Any) -> ProfiledWindow | None:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("reason"), str):
        return None
    steps = raw.get("steps")
    if not isinstance(steps, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in steps):
        return None
    rank = raw.get("rank")
    trace = raw.get("trace")
    detail = raw.get("detail")
    return ProfiledWindow(reason=raw["reason"], steps=tuple(steps),
                          rank=rank if isinstance(rank, int) and not isinstance(rank, bool) else None,
                          trace=trace if isinstance(trace, str) and trace else None,
                          detail=detail if isinstance(detail, str) else "",
                          evaluation=raw.get("evaluation") is True)


def windows_from_profiler(profiler: Any) -> tuple[ProfiledWindow, ...]:
    """The windows of a manifest's ``profiler`` mapping, in recorded order; () when it has none.
    Entries that are not a window record (no reason, steps not whole numbers) are skipped."""
    if not isinstance(profiler, Mapping) or not isinstance(profiler.get("windows"), list):
        return ()
    return tuple(w for w in map(_window, profiler["windows"]) if w is not None)


def anomaly_windows(windows: Iterable[ProfiledWindow]) -> tuple[ProfiledWindow, ...]:
    return tuple(w for w in windows if w.anomalous)


def anomaly_step_numbers(windows: Iterable[ProfiledWindow]) -> set[int]:
    """Step numbers recorded by anomaly windows and by no other window."""
    windows = list(windows)
    typical = {s for w in windows if not w.anomalous for s in w.steps}
    return {s for w in windows if w.anomalous for s in w.steps} - typical


class _HasPath(Protocol):
    @property
    def path(self) -> Any: ...


T = TypeVar("T", bound=_HasPath)


def split_traces(traces: Sequence[T], windows: Iterable[ProfiledWindow]) -> tuple[list[T], list[T]]:
    """(typical traces, traces of anomaly windows), matched by file name. When every trace belongs
    to an anomaly window (or none does) all traces are typical: the tables then describe what was
    profiled, and the windows say why."""
    names = {PurePosixPath(w.trace).name for w in windows if w.anomalous and w.trace}
    anomalous = [t for t in traces if PurePosixPath(str(t.path)).name in names]
    typical = [t for t in traces if PurePosixPath(str(t.path)).name not in names]
    if not anomalous or not typical:
        return list(traces), []
    return typical, anomalous


def with_typical_tables(full: TraceAnalysis, typical: TraceAnalysis) -> TraceAnalysis:
    """``full`` (every profiled step, its ranks, memory peaks) with the breakdown, op and kernel
    tables of ``typical`` (the analysis of the typical windows' traces)."""
    return replace(full, breakdown=typical.breakdown, ops=typical.ops, kernels=typical.kernels)


WINDOW_COLUMNS = ["reason", "label", "detail", "rank", "trace", "evaluation", "typical", "steps", "first_step",
                  "last_step", "median_step_us", "ratio_to_typical"]


def _median_us(steps: pd.DataFrame, numbers: set[int], rank: int | None) -> float:
    if len(steps) == 0 or "step" not in steps.columns or "duration_us" not in steps.columns or not numbers:
        return float("nan")
    rows = steps[pd.to_numeric(steps["step"], errors="coerce").isin(numbers)]
    if rank is not None and "rank" in rows.columns and (rows["rank"] == rank).any():
        rows = rows[rows["rank"] == rank]
    return float(pd.to_numeric(rows["duration_us"], errors="coerce").median()) if len(rows) else float("nan")


def compute_window_table(windows: Sequence[ProfiledWindow], steps: pd.DataFrame) -> pd.DataFrame:
    """One row per window (WINDOW_COLUMNS): its reason and label, whether its steps count as typical,
    its recorded steps (count, first, last), the median duration of those steps in the trace
    (``steps``: a TraceAnalysis step table; NaN when the trace lacks them) and that median over
    the median of the typical windows' training steps (NaN without typical steps: an anomaly
    window's slowdown reads there)."""
    # The typical step: training steps of the other windows (an evaluation window's one step also
    # ran the evaluation), or any other window's when there are only those.
    training = {s for w in windows if not w.anomalous and w.reason != "evaluation" for s in w.steps}
    base = _median_us(steps, training or {s for w in windows if not w.anomalous for s in w.steps}, None)
    rows = []
    for w in windows:
        median = _median_us(steps, set(w.steps), w.rank)
        rows.append({"reason": w.reason, "label": w.label, "detail": w.detail, "rank": w.rank, "trace": w.trace,
                     "evaluation": w.evaluation, "typical": not w.anomalous, "steps": len(w.steps),
                     "first_step": min(w.steps) if w.steps else None, "last_step": max(w.steps) if w.steps else None,
                     "median_step_us": median,
                     "ratio_to_typical": median / base if base > 0 and median == median else float("nan")})
    return pd.DataFrame(rows, columns=WINDOW_COLUMNS)
