"""The one "final value" of a logged metric: the median of its last window (analysis layer, pure).

Every place that shows a run's final loss (or final accuracy, final val_loss ...) uses
:func:`final_value`: the sample recorder's summary, ``torchscope ls`` and the Runs page,
``torchscope analyze``, the Run page's Overview, Compare and its reports. It is next to
app.analysis.run.step_time, the one rule for step time.

The rule (docs/app.md, "Final values"):

* the values are those of rank 0 (every rank's when no line says rank 0; a line without
  ``rank`` is rank 0), in step order (lines without a step last, in file order); missing,
  non-numeric and non-finite values are skipped, as are booleans;
* the window is the last 10 % of them, at least 1 and at most 20 (``ceil(n / 10)`` clamped);
* the final value is the median of that window.

Why the median of a window and not the last value: a training loss is the loss of one batch,
and one batch is noise; Compare already judged "final loss" on this window (with a confidence
interval over it), so the number people read and the number Compare judges are one. The
window is short (≤ 20 values), so it is still the end of training, not an average of it.

It is the same number as ``np.median(compare_steps.final_window(v))`` over Compare's rank-0
values (a test asserts it). :func:`final_value` is plain Python over the ``metrics.jsonl``
records, so the catalog can call it on 1,000 runs; :func:`final_of_table` computes the same on
the metrics table of app.data.runs without building records (a curve of 1e6 points).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["FINAL_WINDOW_FRACTION", "FINAL_WINDOW_MAX", "NOT_OUTCOMES", "FinalValue", "final_window_size",
           "final_value", "final_of_values", "final_of_table", "final_label"]

FINAL_WINDOW_FRACTION = 0.10
FINAL_WINDOW_MAX = 20
# Logged keys that are coordinates or per-step settings and measurements, not outcomes: they get no
# "final value" (a step time has its own rule, app.analysis.run.step_time; Compare's metric table skips
# the same coordinates).
NOT_OUTCOMES = frozenset({"step", "time", "rank", "step_time_s", "samples", "tokens", "profiled", "lr",
                          "learning_rate", "epoch", "evaluation", "cpu_time_s", "contention", "steal"})


@dataclass(frozen=True)
class FinalValue:
    """The final value of one metric: ``value`` is the median of the last ``window`` of the
    ``count`` values logged (rank ``rank``, or every rank when ``rank`` is None)."""

    key: str
    value: float
    window: int
    count: int
    rank: int | None = 0

    @property
    def label(self) -> str:
        """'final loss (median of last 4)': the one label for this number everywhere."""
        return final_label(self.key, self.window)


def final_label(key: str, window: int | None) -> str:
    """'final loss (median of last 4)'; 'final loss' when the window is not known."""
    if not window:
        return f"final {key}"
    return f"final {key} (median of last {window})" if window > 1 else f"final {key} (last value)"


def final_window_size(n: int) -> int:
    """How many of ``n`` values make the final window: ceil(n / 10), between 1 and 20 (0 for none)."""
    if n <= 0:
        return 0
    return max(1, min(FINAL_WINDOW_MAX, math.ceil(n * FINAL_WINDOW_FRACTION)))


def _num(value: Any) -> float | None:
    """A finite float from a logged value (numbers and numeric strings), else None; not bools."""
    if type(value) is float:
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _rank_of(record: Mapping[str, Any]) -> int:
    r = _num(record.get("rank"))
    return int(r) if r is not None else 0


def _ordered_values(records: Iterable[Mapping[str, Any]], key: str, rank: int | None) -> tuple[list[float], int | None]:
    """The finite values of ``key`` in (rank, step) order, and the rank they come from."""
    rows: list[tuple[int, float, int, float]] = []  # (rank, step or inf, file position, value)
    for i, r in enumerate(records):
        if key not in r:
            continue
        v = _num(r[key])
        if v is None:
            continue
        step = _num(r.get("step"))
        rows.append((_rank_of(r), step if step is not None else math.inf, i, v))
    if rank is None:
        # Compare's choice: rank 0 when it logged the metric, else every rank (in rank order).
        chosen = 0 if any(x[0] == 0 for x in rows) else None
    else:
        chosen = rank
    if chosen is not None:
        rows = [x for x in rows if x[0] == chosen]
    rows.sort(key=lambda x: (x[0], x[1], x[2]))
    return [x[3] for x in rows], chosen


def final_of_values(key: str, values: Sequence[float], *, rank: int | None = 0) -> FinalValue | None:
    """The final value of ``values``: the finite values of one metric already in (rank, step)
    order (as the metrics table of app.data.runs holds them); None when there are none."""
    if not values:
        return None
    w = final_window_size(len(values))
    return FinalValue(key=key, value=float(statistics.median(values[len(values) - w:])), window=w,
                      count=len(values), rank=rank)


def final_value(records: Iterable[Mapping[str, Any]], key: str, *, rank: int | None = None) -> FinalValue | None:
    """The final value of metric ``key`` in a run's ``metrics.jsonl`` records (see the module
    docstring); None when ``key`` has no finite value. ``rank``: only that rank's values (None:
    rank 0, or every rank when rank 0 did not log it)."""
    values, chosen = _ordered_values(records, key, rank)
    return final_of_values(key, values, rank=chosen)


def final_of_table(metrics: pd.DataFrame, key: str, *, rank: int | None = None) -> FinalValue | None:
    """:func:`final_value` on the metrics table of ``app.data.runs.load_run`` (sorted by rank,
    then step: the rule's order). None for coordinates and settings (NOT_OUTCOMES: step time, lr,
    samples ...), boolean columns and keys without a finite value."""
    if key in NOT_OUTCOMES or key not in metrics.columns or pd.api.types.is_bool_dtype(metrics[key]):
        return None
    v = pd.to_numeric(metrics[key], errors="coerce").to_numpy(float, na_value=np.nan)
    ok = np.isfinite(v)
    ranks = pd.to_numeric(metrics["rank"], errors="coerce").fillna(0).to_numpy() if "rank" in metrics.columns \
        else np.zeros(len(v))
    chosen = rank
    if rank is None:
        chosen = 0 if (ok & (ranks == 0)).any() else None
    if chosen is not None:
        ok &= ranks == chosen
    return final_of_values(key, v[ok].tolist(), rank=chosen)
