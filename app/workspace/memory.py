"""A run's memory timelines read and reduced to category peaks (workspace layer; the reduction is app.analysis.compare.memory_categories)."""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from app.analysis.compare.memory_categories import (
    CategoryPeaks,
    MemoryCategoryComparison,
    combine_category_peaks,
    compare_category_peaks,
    compute_category_peaks,
)
from app.data.safe_io import InflateLimit, UnsafePath
from app.data.snapshot import load_memory_timeline_raw
from profiler_agent.runformat import layout
from profiler_agent.runformat.errors import CorruptFileError

__all__ = ["load_category_peaks", "try_load_category_peaks", "load_memory_categories"]


def _rank_of(path: Path) -> int:
    m = layout.MEMORY_TIMELINE_RE.match(path.name)
    rank = layout.rank_from_worker(m.group("worker")) if m else None
    return rank if rank is not None else 0


def load_category_peaks(run_dir: str | os.PathLike[str]) -> CategoryPeaks | None:
    """The category peaks of a run's memory timelines (lowest rank, every window), or None when
    the run has none. Unreadable files (corrupt, inflating beyond ``TORCHSCOPE_MAX_INFLATE_MB``, or
    links out of the run folder) are skipped and named in ``problems``.

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
            raw = load_memory_timeline_raw(p, folder=Path(run_dir))
        except (CorruptFileError, InflateLimit, UnsafePath) as e:  # named in problems; the others still count
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


def try_load_category_peaks(run_dir: str | os.PathLike[str] | None) -> tuple[CategoryPeaks | None, str | None]:
    """(peaks, None), or (None, why) when the run has timelines none of which can be read; a
    side that is not a run (``run_dir`` None) has neither."""
    if run_dir is None:
        return None, None
    try:
        return load_category_peaks(run_dir), None
    except (CorruptFileError, InflateLimit, UnsafePath) as e:
        return None, str(e)


def load_memory_categories(baseline_dir: str | os.PathLike[str] | None,
                           candidate_dir: str | os.PathLike[str] | None) -> MemoryCategoryComparison:
    """Category peaks of two run folders (None: a side that is not a run, e.g. bare traces) and
    their diff. Never raises for missing or unreadable files: they become notes."""
    base, base_error = try_load_category_peaks(baseline_dir)
    cand, cand_error = try_load_category_peaks(candidate_dir)
    errors = {role: e for role, e in (("baseline", base_error), ("candidate", cand_error)) if e is not None}
    return compare_category_peaks(base, cand, errors)
