"""Slow-step detection for anomaly-triggered profiler windows (agent layer, no torch).

:class:`SlowSteps` keeps the running median of recent training steps' ``step_time_s`` and says
when a step took more than ``factor`` times it. Evaluation steps, profiled steps and step 0
(one-off costs) are neither judged nor added to the history. A slow spell triggers once it
lasts ``CONFIRM_STEPS`` steps in a row: a lone spike (a noisy neighbour, a collection) is over
by the time the next steps could be profiled, and on a shared machine such spikes would spend
the window budget. The detector re-arms only after a step below the threshold, so a lasting
slowdown gives one window (it becomes the new normal as slow steps fill the history), and
separate slow spells give one each.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable

__all__ = ["SlowSteps", "HISTORY_STEPS", "MIN_HISTORY_STEPS", "CONFIRM_STEPS"]

HISTORY_STEPS = 32  # the running median is over this many recent training steps
MIN_HISTORY_STEPS = 8  # no judgement before this many: the median of a few noisy steps says little
CONFIRM_STEPS = 2  # slow steps in a row that make a slow spell


def median(values: Iterable[float]) -> float:
    """The median of ``values`` (not empty). Not statistics.median: importing statistics (fractions,
    decimal) costs ~4 ms of the job's start-up, and the agent's modules load in every job."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


class SlowSteps:
    """Judges each training step's time against the running median of the steps before it."""

    def __init__(self, factor: float) -> None:
        self.factor = factor
        self._history: deque[float] = deque(maxlen=HISTORY_STEPS)
        self._armed = True  # False during a slow spell that already triggered
        self._slow_in_row = 0

    def observe(self, step: int, step_time_s: float | None, *, evaluation: bool,
                profiled: bool) -> float | None:
        """Add one step; return its ratio to the running median when it confirms a slow spell, else None."""
        if step < 1 or step_time_s is None or evaluation or profiled or self.factor <= 0:
            return None
        ratio = None
        if len(self._history) >= MIN_HISTORY_STEPS:
            median_s = median(self._history)
            if median_s > 0 and step_time_s > self.factor * median_s:
                ratio = step_time_s / median_s
        self._history.append(step_time_s)
        if ratio is None:
            self._armed = True
            self._slow_in_row = 0
            return None
        self._slow_in_row += 1
        if not self._armed or self._slow_in_row < CONFIRM_STEPS:
            return None
        self._armed = False
        return ratio
