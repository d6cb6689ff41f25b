"""Memory by category of two sides (parameters, gradients, optimizer state, activations, ...),
baseline vs candidate, from torch.profiler's memory timelines (analysis layer; the workspace reads
the timelines: app.workspace.memory).

The agent records ``export_memory_timeline`` raw records per profiler window and rank when run
with ``--memory-timeline`` (``memory/<worker>.<time_ns>.memory_timeline.raw.json.gz``). For one
timeline, the bytes held by each category at a time are the running sum of its signed records,
starting from 0 before the first record (memory that existed before profiling is recorded at
time -1 and counted from the first point on); several records at the same timestamp are applied
together. Per category this gives

- ``peak_bytes``: the most that category held at any time;
- ``at_peak_bytes``: what it held at the moment the *total* was highest (these add up to the
  total peak, so they say what the peak is made of).

A side with several timelines (several windows) uses those of its lowest rank: each category's
peak is the largest over the windows, and the at-peak split is that of the window whose total
peak is the highest. A side without timelines is *missing* (null), never zero.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pandas as pd

from app.data.snapshot import MEMORY_CATEGORIES

__all__ = [
    "TOTAL",
    "CATEGORY_PEAK_COLUMNS",
    "CATEGORY_DIFF_COLUMNS",
    "CategoryPeaks",
    "MemoryCategoryComparison",
    "compute_category_peaks",
    "combine_category_peaks",
    "diff_memory_categories",
    "compare_category_peaks",
    "compare_side_memory_categories",
    "memory_category_records",
]

TOTAL = "total"
CATEGORY_PEAK_COLUMNS = ["category", "peak_bytes", "at_peak_bytes"]
CATEGORY_DIFF_COLUMNS = ["category", "baseline_bytes", "candidate_bytes", "delta_bytes", "ratio",
                         "baseline_peak_bytes", "candidate_peak_bytes", "peak_delta_bytes", "peak_ratio"]
_ORDER = {c: i for i, c in enumerate((TOTAL, *MEMORY_CATEGORIES))}


def compute_category_peaks(raw: pd.DataFrame) -> pd.DataFrame:
    """Per category of a raw memory timeline (``app.data.snapshot.load_memory_timeline_raw``):
    ``category``, ``peak_bytes``, ``at_peak_bytes`` (int64), with a first row ``total`` (its
    peak is the total peak, so both numbers are equal). Only categories with records appear,
    in torch's order. Empty table (CATEGORY_PEAK_COLUMNS) when there are no records."""
    if raw is None or raw.empty:
        return pd.DataFrame(columns=CATEGORY_PEAK_COLUMNS)
    ts_raw = raw["ts_ns"].to_numpy(np.int64)
    timed = ts_raw >= 0
    ts = np.where(timed, ts_raw, int(ts_raw[timed].min()) if timed.any() else 0)
    cats = [str(c) for c in pd.unique(raw["category"].astype(str))]
    cats.sort(key=lambda c: _ORDER.get(c, len(_ORDER)))
    codes = raw["category"].astype(str).to_numpy()
    b = raw["bytes"].to_numpy(np.int64)
    deltas = np.stack([np.where(codes == c, b, 0) for c in cats], axis=1)
    held = np.cumsum(deltas, axis=0)
    # The state after all records of a timestamp: the last row of each run of equal timestamps
    # (the loader sorts by time, stably).
    last = np.r_[ts[1:] != ts[:-1], True]
    held = held[last]
    total = held.sum(axis=1)
    at = int(np.argmax(total))
    peaks = np.maximum(held.max(axis=0), 0)  # before the first record every category held 0
    out = pd.DataFrame({
        "category": [TOTAL, *cats],
        "peak_bytes": np.r_[max(int(total[at]), 0), peaks].astype(np.int64),
        "at_peak_bytes": np.r_[int(total[at]), held[at]].astype(np.int64),
    })
    return out[CATEGORY_PEAK_COLUMNS]


def combine_category_peaks(tables: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Category peaks of several timelines (windows) of one side: each category's largest peak,
    and the at-peak split of the timeline whose total peak is the highest."""
    tables = [t for t in tables if t is not None and len(t)]
    if not tables:
        return pd.DataFrame(columns=CATEGORY_PEAK_COLUMNS)
    top = max(tables, key=lambda t: int(t.loc[t["category"] == TOTAL, "peak_bytes"].iloc[0]))
    peak = pd.concat(tables).groupby("category", sort=False)["peak_bytes"].max()
    at = top.set_index("category")["at_peak_bytes"].reindex(peak.index).fillna(0)
    out = pd.DataFrame({"category": peak.index, "peak_bytes": peak.to_numpy(np.int64),
                        "at_peak_bytes": at.to_numpy(np.int64)})
    return out.iloc[np.argsort([_ORDER.get(c, len(_ORDER)) for c in out["category"]], kind="stable")] \
        .reset_index(drop=True)


@dataclass(frozen=True)
class CategoryPeaks:
    """One side's category peaks (``table``: CATEGORY_PEAK_COLUMNS), the timeline files used
    (of rank ``rank``), the one holding the total peak, the bytes its timeline lists as existing
    before the window (``preexisting_bytes``; in a job's first window, total peak − preexisting
    = the trace's allocator peak), and files that could not be read."""

    table: pd.DataFrame
    files: tuple[str, ...]
    rank: int
    peak_file: str
    problems: tuple[str, ...] = field(default_factory=tuple)
    preexisting_bytes: int = 0


def _ratio(num: pd.Series, den: pd.Series) -> pd.Series:
    out = num.astype("Float64") / den.astype("Float64").where(den > 0)
    return out.astype("Float64")


def diff_memory_categories(baseline: pd.DataFrame | None, candidate: pd.DataFrame | None) -> pd.DataFrame:
    """Baseline vs candidate category peaks (tables of :func:`compute_category_peaks`, None for a
    side without timelines): CATEGORY_DIFF_COLUMNS, ``total`` first, then torch's order.

    ``*_bytes`` at the total peak, ``*_peak_bytes`` each category's own peak; deltas are
    candidate − baseline and ratios candidate / baseline. A missing side's columns, and every
    delta and ratio that needs it, are null (pandas NA); a category absent from a side that has
    timelines held 0 bytes there. Empty when neither side has data."""
    sides = {"baseline": baseline, "candidate": candidate}
    present = {k: v for k, v in sides.items() if v is not None and len(v)}
    if not present:
        return pd.DataFrame(columns=CATEGORY_DIFF_COLUMNS)
    cats = sorted({c for t in present.values() for c in t["category"]}, key=lambda c: _ORDER.get(c, len(_ORDER)))
    out = pd.DataFrame({"category": cats})
    for name in sides:
        if name in present:
            t = present[name].set_index("category").reindex(cats).fillna(0)
            out[f"{name}_bytes"] = pd.array(t["at_peak_bytes"].to_numpy(np.int64), dtype="Int64")
            out[f"{name}_peak_bytes"] = pd.array(t["peak_bytes"].to_numpy(np.int64), dtype="Int64")
        else:
            out[f"{name}_bytes"] = pd.array([pd.NA] * len(cats), dtype="Int64")
            out[f"{name}_peak_bytes"] = pd.array([pd.NA] * len(cats), dtype="Int64")
    out["delta_bytes"] = out["candidate_bytes"] - out["baseline_bytes"]
    out["ratio"] = _ratio(out["candidate_bytes"], out["baseline_bytes"])
    out["peak_delta_bytes"] = out["candidate_peak_bytes"] - out["baseline_peak_bytes"]
    out["peak_ratio"] = _ratio(out["candidate_peak_bytes"], out["baseline_peak_bytes"])
    return out[CATEGORY_DIFF_COLUMNS]


@dataclass(frozen=True)
class MemoryCategoryComparison:
    """Category peaks of both sides (None: no timelines, or unreadable), their diff table
    (CATEGORY_DIFF_COLUMNS) and notes about missing or unreadable data."""

    baseline: CategoryPeaks | None
    candidate: CategoryPeaks | None
    table: pd.DataFrame
    notes: tuple[str, ...] = ()

    @property
    def available(self) -> bool:
        """True when at least one side has category data."""
        return len(self.table) > 0


_HOW = "record with `torchscope run --memory-timeline ...`"


def compare_category_peaks(baseline: CategoryPeaks | None, candidate: CategoryPeaks | None,
                           errors: Mapping[str, str] | None = None) -> MemoryCategoryComparison:
    """The diff of two sides' category peaks (None: no timelines, or unreadable ones whose error
    is ``errors[role]``, role "baseline" or "candidate"). Missing or unreadable data become notes."""
    errors = errors or {}
    peaks: dict[str, CategoryPeaks | None] = {"baseline": baseline, "candidate": candidate}
    notes: list[str] = []
    for role, found in peaks.items():
        if role in errors:
            notes.append(f"memory categories: {role} timelines not used: {errors[role]}")
            continue
        if found is not None:
            notes += [f"memory categories: {role}: skipped {p}" for p in found.problems]
    missing = [r for r, p in peaks.items() if p is None]
    if len(missing) == 1:
        notes.append(f"memory categories: the {missing[0]} has no memory timeline ({_HOW}); its columns are empty")
    table = diff_memory_categories(*(p.table if p is not None else None for p in peaks.values()))
    return MemoryCategoryComparison(baseline=baseline, candidate=candidate, table=table, notes=tuple(notes))


class _SideMemory(Protocol):
    """What compare_side_memory_categories reads of a side (app.analysis.compare.side.CompareSide)."""

    @property
    def category_peaks(self) -> CategoryPeaks | None: ...

    @property
    def category_peaks_error(self) -> str | None: ...


def compare_side_memory_categories(baseline: _SideMemory, candidate: _SideMemory) -> MemoryCategoryComparison:
    """:func:`compare_category_peaks` of two comparison sides (the workspace loaded their peaks)."""
    errors = {role: side.category_peaks_error for role, side in (("baseline", baseline), ("candidate", candidate))
              if side.category_peaks_error is not None}
    return compare_category_peaks(baseline.category_peaks, candidate.category_peaks, errors)


def memory_category_records(table: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows of a diff table as JSON-ready dicts: ints for bytes, floats for ratios, None for NA."""
    def cell(v: Any, ratio: bool) -> Any:
        if v is None or v is pd.NA or (isinstance(v, float) and not np.isfinite(v)):
            return None
        return float(v) if ratio else int(v)

    return [{c: (str(r[c]) if c == "category" else cell(r[c], c.endswith("ratio"))) for c in CATEGORY_DIFF_COLUMNS}
            for r in table.to_dict(orient="records")]
