"""Cache of tables derived from traces (steps, breakdown, op and kernel tables, memory peaks, …) (data layer).

The tables an analysis computes from a set of traces are small (one row per step, op name, kernel
name) but computing them reads every event. They are stored next to the trace's Parquet entry
(``trace_cache``), in ``<entry of the first trace>/analysis-<version>-<set>/``, one Arrow IPC file
per table plus ``analysis.json``:

- ``<set>`` hashes the cache entry names of every trace of the set (each already hashes its file's
  path, size, mtime and the trace ``CACHE_VERSION``) with their ranks, so a changed trace, another
  set of ranks or a new trace format never reads an old analysis;
- ``<version>`` is the caller's analysis version (a constant bumped with the analysis code, plus a
  digest of that code), so changed analysis code never reads old tables either.

Entries are written to a temporary folder inside the trace's entry and renamed, so a reader never
sees half an entry; a trace entry that was removed meanwhile (its file changed) is never
re-created. A table is only cached if it comes back from Arrow identical (values, dtypes, index),
so a cache hit returns exactly what the computation returned. Unreadable entries count as misses.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pyarrow as pa

__all__ = ["PREFIX", "analysis_dir", "read_analysis", "read_analysis_tables", "write_analysis"]

PREFIX = "analysis-"
_META = "analysis.json"


def _hash(text: str, n: int) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogateescape")).hexdigest()[:n]


def analysis_dir(entries: Sequence[Path], ranks: Sequence[int], version: str) -> Path:
    """Folder for the analysis of the traces cached in ``entries`` (in this order) with ``ranks``."""
    members = "\0".join(f"{e.name}\1{r}" for e, r in zip(entries, ranks))
    return Path(entries[0]) / f"{PREFIX}{_hash(version, 8)}-{_hash(members, 16)}"


def read_analysis(folder: Path, names: Sequence[str]) -> dict[str, pd.DataFrame] | None:
    """Return the cached tables ``names`` of an analysis folder, or None on a miss (any of them absent)."""
    tables = read_analysis_tables(folder, names)
    return tables if len(tables) == len(set(names)) else None


def read_analysis_tables(folder: Path, names: Sequence[str]) -> dict[str, pd.DataFrame]:
    """The tables of ``names`` that an analysis folder holds (an entry may hold only some: the Run
    page's Overview computes a few); {} when the folder is missing or any of them is unreadable."""
    try:
        doc = json.loads((folder / _META).read_text(encoding="utf-8"))
        held = set(doc.get("tables", []))
        out = {}
        for name in names:
            if name in held:
                with pa.OSFile(str(folder / f"{name}.arrow"), "rb") as f:
                    out[name] = pa.ipc.open_file(f).read_all().to_pandas()
        return out
    except (OSError, ValueError, KeyError, TypeError, AttributeError, pa.ArrowException):
        return {}


def _to_arrow(df: pd.DataFrame) -> pa.Table | None:
    """The Arrow table of ``df``, or None when it would not come back identical."""
    try:
        table = pa.Table.from_pandas(df)
        return table if _identical(df, table.to_pandas()) else None
    except (ValueError, TypeError, pa.ArrowException):
        return None


def _identical(df: pd.DataFrame, back: pd.DataFrame) -> bool:
    """Whether ``back`` is ``df`` exactly: the same index (its type too), columns, dtypes, and
    values (NaN where ``df`` has NaN). What ``assert_frame_equal(check_exact=True)`` checks, at a
    tenth of its cost (~20 ms of a cold analyze's nine tables)."""
    return (type(back.index) is type(df.index) and back.index.equals(df.index)
            and back.columns.equals(df.columns) and back.dtypes.equals(df.dtypes) and back.equals(df))


def write_analysis(folder: Path, tables: dict[str, pd.DataFrame]) -> bool:
    """Write an analysis folder atomically; False (nothing left behind) when a table cannot be
    stored exactly, the trace's cache entry is gone or not writable."""
    home = folder.parent
    arrow = {}
    for name, df in tables.items():
        t = _to_arrow(df)
        if t is None:
            return False
        arrow[name] = t
    try:
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=home))  # never creates a removed entry again
    except OSError:
        return False
    try:
        for name, t in arrow.items():
            with pa.OSFile(str(tmp / f"{name}.arrow"), "wb") as f, pa.ipc.new_file(f, t.schema) as w:
                w.write_table(t)
        (tmp / _META).write_text(json.dumps({"tables": sorted(tables)}), encoding="utf-8")
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        return False
    version = folder.name[: folder.name.index("-", len(PREFIX)) + 1]
    for old in home.glob(f"{PREFIX}*"):
        if not old.name.startswith(version) and old.is_dir():  # made by other analysis code
            shutil.rmtree(old, ignore_errors=True)
    return True
