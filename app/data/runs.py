"""Runs and run stores as pandas tables (data layer: files → tables, via profiler_agent.runformat)."""

from __future__ import annotations

import json
import math
import numbers
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from app.data import store_rows
from app.data.trace_files import rank_from_name
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout

__all__ = [
    "RunData",
    "StoreTable",
    "STORE_COLUMNS",
    "load_run",
    "load_metrics",
    "load_system",
    "load_module_tree",
    "read_text_artifact",
    "store_records",
    "run_ranks",
    "system_peak_memory",
    "EXTRA_COLUMNS",
    "store_from_rows",
    "archive_run",
    "delete_run",
    "ARCHIVE_DIR",
    "STATUS_MARKERS",
    "filter_store",
]

# Shown before a status wherever runs are listed, so running and crashed runs stand out.
STATUS_MARKERS = {
    "running": "● ",
    "finished": "✓ ",
    "failed": "✗ ",
    "killed": "■ ",
    "crashed": "✗ ",
    "pruned": "✂ ",  # stopped early by a sweep's pruner (torchscope sweep --optuna)
}

# Columns the Runs page uses besides STORE_COLUMNS (not part of `ls --json`).
EXTRA_COLUMNS = ["notes", "world_size", "search_text", "steps_source"]

# Archived runs are moved here, inside the store; list_runs skips dot-folders.
ARCHIVE_DIR = ".archive"

# One row per run in the store table (Runs page, `torchscope ls --json`). ``step_time_s`` is the
# headline step time (steady-state median, app.analysis.run.step_time) over ``step_time_steps`` steps;
# ``mean_step_time_s`` the mean of the same steps (kept for scripts written against it).
STORE_COLUMNS = [
    "id",
    "name",
    "status",
    "started_at",
    "duration_s",
    "steps",
    "final_loss",
    "step_time_s",
    "step_time_steps",
    "mean_step_time_s",
    "samples_per_s",
    "peak_memory_bytes",
    "device",
    "tags",
    "group",  # replicate group (`torchscope run --group NAME`); None for a run without one
    "git_commit",
    "path",
]


@dataclass(frozen=True)
class RunData:
    """Everything a page needs about one run, read once.

    ``metrics`` has columns ``step``, ``time``, ``rank`` and one column per logged key
    (``loss``, ``lr``, ``step_time_s``, ...), sorted by (rank, step). ``problems`` lists
    human-readable messages about lines or files that had to be skipped.
    """

    path: Path
    manifest: rf.Manifest
    status: rf.RunStatus
    metrics: pd.DataFrame
    system: pd.DataFrame
    agent_errors: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def trace_files(self) -> list[Path]:
        return layout.list_trace_files(self.path)

    @property
    def snapshot_files(self) -> list[Path]:
        return layout.list_snapshot_files(self.path)

    @property
    def graph_dot(self) -> Path | None:
        p = self.path / layout.GRAPH_DOT
        return p if p.is_file() else None

    @property
    def graph_svg(self) -> Path | None:
        p = self.path / layout.GRAPH_SVG
        return p if p.is_file() else None


def _records_to_frame(records: list[dict[str, Any]], sort: list[str]) -> pd.DataFrame:
    if not records:
        return pd.DataFrame(columns=sort)
    df = pd.DataFrame.from_records(records)
    for col in sort:
        if col not in df.columns:
            df[col] = 0 if col == "rank" else pd.NA
    if "rank" in df.columns:  # single-process jobs may not write a rank: it is rank 0
        df["rank"] = pd.to_numeric(df["rank"], errors="coerce").fillna(0).astype("int64")
    # Logged values can be None or strings in a few lines; a column that is mostly numbers is
    # numeric, the odd string becoming NaN (charts and statistics skip it).
    for col in df.columns:
        if df[col].dtype == object:
            converted = pd.to_numeric(df[col], errors="coerce")
            if converted.notna().sum() * 2 >= df[col].notna().sum() and converted.notna().any():
                df[col] = converted
    return df.sort_values(sort, kind="stable").reset_index(drop=True)


def load_metrics(run_dir: str | os.PathLike[str]) -> tuple[pd.DataFrame, list[str]]:
    """Return (metrics table, problems) from the run's metrics.jsonl; empty table if absent."""
    read = rf.read_samples(Path(run_dir) / layout.METRICS)
    df = _records_to_frame(read.records, ["rank", "step"])
    return df, list(read.skipped)


def load_system(run_dir: str | os.PathLike[str]) -> tuple[pd.DataFrame, list[str]]:
    """Return (system samples table sorted by time, problems) from system.jsonl."""
    read = rf.read_samples(Path(run_dir) / layout.SYSTEM)
    df = _records_to_frame(read.records, ["time"])
    return df, list(read.skipped)


def load_run(run_dir: str | os.PathLike[str], *, now: float | None = None) -> RunData:
    """Read one run: manifest, effective status, metrics, system samples, agent errors.

    Raises NotARunError, CorruptFileError or SchemaVersionError for the manifest; problems in
    the JSON-lines files are reported in ``RunData.problems`` instead of raising.
    """
    run_dir = Path(run_dir)
    manifest = rf.read_manifest(run_dir)
    metrics, metric_problems = load_metrics(run_dir)
    system, system_problems = load_system(run_dir)
    errors = rf.read_jsonl(run_dir / layout.AGENT_ERRORS)
    return RunData(
        path=run_dir,
        manifest=manifest,
        status=rf.effective_status(manifest, now=now),
        metrics=metrics,
        system=system,
        agent_errors=errors.records,
        problems=[*metric_problems, *system_problems, *errors.skipped],
    )


def load_module_tree(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """Return the parsed graph/modules.json of a run, or None when the run has none.

    Raises CorruptFileError when the file exists but is not valid JSON.
    """
    path = Path(run_dir) / layout.MODULE_TREE
    if not path.is_file():
        return None
    try:
        tree: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return tree
    except (ValueError, UnicodeDecodeError) as e:
        raise rf.CorruptFileError(f"{path}: not valid JSON ({e})") from None


def read_text_artifact(
    run_dir: str | os.PathLike[str], name: str, *, max_bytes: int = 2_000_000
) -> str | None:
    """Return the tail (at most ``max_bytes``) of a text file of the run, e.g. layout.STDOUT_LOG."""
    path = Path(run_dir) / name
    if not path.is_file():
        return None
    size = path.stat().st_size
    with open(path, "rb") as f:
        if size > max_bytes:
            f.seek(size - max_bytes)
        return f.read().decode("utf-8", errors="replace")


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return df.to_dict(orient="records") if len(df) else []


def system_peak_memory(system: pd.DataFrame, rank: int | None = None) -> tuple[int | None, str]:
    """(peak bytes, what it measures) from system samples: the GPU allocator's peak when sampled,
    else the largest resident set of the process and its children (DataLoader workers)."""
    return store_rows.peak_memory_from_records(_records(system), rank)


@dataclass(frozen=True)
class StoreTable:
    """One row per readable run (columns STORE_COLUMNS), and a message per unreadable folder.

    ``mirror`` is the read-only store of symlinked runs that stands for the torch-tb-profiler
    sub-folders of ``root`` (app.data.tbprofiler.mirror_tb_folder), when the root has some.
    """

    root: Path
    table: pd.DataFrame
    problems: list[str]
    mirror: Path | None = None


# Seconds that pandas' nanosecond timestamps can hold (they end in April 2262).
_MAX_DATETIME_S = 9.2e9


def _float_column(column: pd.Series) -> pd.Series:
    """``column`` as float64: non-numbers (and Python integers beyond what a float holds) NaN."""
    def number(v: Any) -> float:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
            return math.nan
        try:
            return float(v)
        except OverflowError:
            return math.nan
    return pd.Series([number(v) for v in column], index=column.index, dtype="float64")


def store_from_rows(
    root: Path, rows: list[dict[str, Any]], problems: list[str], *, mirror: Path | None = None
) -> StoreTable:
    """Assemble a StoreTable, newest first, from catalog rows (app.workspace.catalog_rows).

    Runs are ordered by start time, not folder name: an imported trace's folder is named when it
    is imported but its run started when the trace was recorded. Runs without a start come last.
    """
    table = pd.DataFrame(rows, columns=[*STORE_COLUMNS, *EXTRA_COLUMNS])
    # One row's odd value must not fail the column of every run: the reader refuses times outside
    # 1970-2200 and integers beyond 2**53, and what still does not fit becomes unknown here.
    started = _float_column(table["started_at"])
    table["started_at"] = pd.to_datetime(started.where(started.abs() < _MAX_DATETIME_S), unit="s", utc=True)
    for col in ("duration_s", "final_loss", "step_time_s", "mean_step_time_s", "samples_per_s"):
        table[col] = _float_column(table[col])
    for col in ("steps", "step_time_steps", "peak_memory_bytes", "world_size"):
        numbers = _float_column(table[col])
        table[col] = numbers.where(numbers.abs() < 2.0**63).round().astype("Int64")
    table["steps_source"] = table["steps_source"].fillna("").astype(str)
    table = table.sort_values("started_at", ascending=False, kind="stable", na_position="last")
    return StoreTable(root=root, table=table.reset_index(drop=True), problems=problems, mirror=mirror)


def archive_run(run_dir: str | os.PathLike[str], root: str | os.PathLike[str]) -> Path:
    """Move a run into ``<root>/.archive/`` (out of listings, nothing deleted); return its new path.

    Raises NotARunError when ``run_dir`` is not a run.
    """
    run_dir = Path(run_dir)
    rf.read_manifest(run_dir)  # refuse anything that is not a run
    target = Path(root) / ARCHIVE_DIR / run_dir.name
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        target = target.with_name(f"{run_dir.name}-{int(time.time())}")
    shutil.move(str(run_dir), str(target))
    return target


def delete_run(run_dir: str | os.PathLike[str]) -> None:
    """Delete a run folder and everything in it. Raises NotARunError when it is not a run."""
    run_dir = Path(run_dir)
    rf.read_manifest(run_dir)
    shutil.rmtree(run_dir)


def _json_value(value: Any) -> Any:
    if value is None or value is pd.NaT:
        return None
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _json_value(value.item())
    try:
        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    return value


def store_records(store: StoreTable) -> list[dict[str, Any]]:
    """The store table as JSON-ready dicts (keys STORE_COLUMNS; times ISO 8601, NaN → None).

    ``tags`` is a list of strings here, not the comma-joined display string of the table.
    """
    out: list[dict[str, Any]] = []
    for row in store.table.to_dict(orient="records"):
        rec = {col: _json_value(row.get(col)) for col in STORE_COLUMNS}
        rec["tags"] = [t.strip() for t in str(rec["tags"] or "").split(",") if t.strip()]
        out.append(rec)
    return out


def run_ranks(run: RunData) -> list[int]:
    """Every rank the run has data for: ranks of metrics lines, of trace artifacts in the manifest,
    and of trace files whose worker name says ``rank<N>``."""
    ranks: set[int] = set()
    if "rank" in run.metrics.columns and len(run.metrics):
        ranks.update(int(r) for r in pd.to_numeric(run.metrics["rank"], errors="coerce").dropna().unique())
    for artifact in run.manifest.artifacts:  # the agent and `import` record each trace's rank
        if artifact.kind is rf.ArtifactKind.TRACE and isinstance(artifact.rank, int):
            ranks.add(artifact.rank)
    for path in run.trace_files:
        match = layout.TRACE_FILE_RE.match(path.name)
        found = rank_from_name(match.group("worker")) if match else None
        if found is not None:
            ranks.add(found)
    return sorted(ranks)


def filter_store(table: pd.DataFrame, text: str = "", statuses: list[str] | None = None) -> pd.DataFrame:
    """Rows whose name, id, tags, notes or config values contain every word of ``text``
    (case-insensitive), and whose status is in ``statuses`` (all when None or empty)."""
    out = table
    if statuses:
        out = out[out["status"].isin(statuses)]
    words = text.lower().split()
    if words and len(out):
        haystack = out["search_text"] if "search_text" in out.columns else out["name"].str.lower()
        mask = pd.Series(True, index=out.index)
        for w in words:
            mask &= haystack.fillna("").str.contains(w, regex=False)
        out = out[mask]
    return out
