"""Memory by category of two sides (parameters, gradients, optimizer state, activations, ...),
baseline vs candidate, from torch.profiler's memory timelines (analysis layer; reads via app.data).

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

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from app.data.snapshot import MEMORY_CATEGORIES, load_memory_timeline_raw
from profiler_agent.runformat import layout
from profiler_agent.runformat.errors import CorruptFileError

__all__ = [
    "TOTAL",
    "CATEGORY_PEAK_COLUMNS",
    "CATEGORY_DIFF_COLUMNS",
    "CategoryPeaks",
    "MemoryCategoryComparison",
    "compute_category_peaks",
    "combine_category_peaks",
    "load_category_peaks",
    "diff_memory_categories",
    "compare_memory_categories",
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


def _rank_of(path: Path) -> int:
    m = layout.MEMORY_TIMELINE_RE.match(path.name)
    rank = layout.rank_from_worker(m.group("worker")) if m else None
    return rank if rank is not None else 0


def load_category_peaks(run_dir: str | os.PathLike[str]) -> CategoryPeaks | None:
    """The category peaks of a run's memory timelines (lowest rank, every window), or None when
    the run has none. Unreadable files are skipped and named in ``problems``.

    Raises CorruptFileError when the run has timelines but none of them can be read.
    """
    files = layout.list_memory_timeline_files(run_dir)
    if not files:
        return None
    rank = min(_rank_of(p) for p in files)
    tables: list[tuple[Path, pd.DataFrame]] = []
    problems: list[str] = []
    preexisting: dict[Path, int] = {}
    for p in (p for p in files if _rank_of(p) == rank):
        try:
            raw = load_memory_timeline_raw(p)
        except CorruptFileError as e:
            problems.append(str(e))
            continue
        tables.append((p, compute_category_peaks(raw)))
        preexisting[p] = int(raw.loc[raw["ts_ns"] < 0, "bytes"].sum())
    if not tables:
        raise CorruptFileError("; ".join(problems))
    usable = [(p, t) for p, t in tables if len(t)]
    top = max(usable, key=lambda pt: int(pt[1]["peak_bytes"].iloc[0]))[0] if usable else None
    return CategoryPeaks(table=combine_category_peaks([t for _, t in tables]),
                         files=tuple(p.name for p, _ in tables), rank=rank, peak_file=top.name if top else "",
                         problems=tuple(problems), preexisting_bytes=preexisting.get(top, 0) if top else 0)


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
    for name, table in sides.items():
        if name in present:
            t = table.set_index("category").reindex(cats).fillna(0)
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


def compare_memory_categories(baseline_dir: str | os.PathLike[str] | None,
                              candidate_dir: str | os.PathLike[str] | None) -> MemoryCategoryComparison:
    """Category peaks of two run folders (None: a side that is not a run, e.g. bare traces) and
    their diff. Never raises for missing or unreadable files: they become notes."""
    peaks: dict[str, CategoryPeaks | None] = {}
    notes: list[str] = []
    for role, run_dir in (("baseline", baseline_dir), ("candidate", candidate_dir)):
        try:
            peaks[role] = load_category_peaks(run_dir) if run_dir is not None else None
        except CorruptFileError as e:
            peaks[role] = None
            notes.append(f"memory categories: {role} timelines not used: {e}")
            continue
        if peaks[role] is not None:
            notes += [f"memory categories: {role}: skipped {p}" for p in peaks[role].problems]
    missing = [r for r, p in peaks.items() if p is None]
    if len(missing) == 1:
        notes.append(f"memory categories: the {missing[0]} has no memory timeline ({_HOW}); its columns are empty")
    table = diff_memory_categories(*(p.table if p is not None else None for p in peaks.values()))
    return MemoryCategoryComparison(baseline=peaks["baseline"], candidate=peaks["candidate"], table=table,
                                    notes=tuple(notes))


def compare_side_memory_categories(baseline: Any, candidate: Any) -> MemoryCategoryComparison:
    """:func:`compare_memory_categories` of two comparison sides (``CompareSide``; only runs have
    memory timelines)."""
    dirs = [side.run.path if getattr(side, "run", None) is not None else None for side in (baseline, candidate)]
    return compare_memory_categories(*dirs)


def memory_category_records(table: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows of a diff table as JSON-ready dicts: ints for bytes, floats for ratios, None for NA."""
    def cell(v: Any, ratio: bool) -> Any:
        if v is None or v is pd.NA or (isinstance(v, float) and not np.isfinite(v)):
            return None
        return float(v) if ratio else int(v)

    return [{c: (str(r[c]) if c == "category" else cell(r[c], c.endswith("ratio"))) for c in CATEGORY_DIFF_COLUMNS}
            for r in table.to_dict(orient="records")]
