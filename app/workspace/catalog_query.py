"""Queries across the runs of a store, over its catalog index, with DuckDB (workspace layer).

- :func:`parse_selector` / :func:`select_rows`: which runs, e.g. ``tag=main,status=finished,last=5``
  (``diff --baseline-query``, ``query --where``; docs/catalog.md "Selecting runs").
- :func:`load_runs_table`: one row per run of the index: id, name, status, started_at, tags, group,
  path, the headline numbers (``step_time_s``, ``samples_per_s``, ``peak_memory_bytes``,
  ``final_loss``, ``steps``, ``duration_s``), ``config.<key>`` per hyperparameter and
  ``final.<key>`` per logged outcome.
- :func:`query_runs`: a statistic of the headline numbers grouped by config keys (median step time by
  ``batch_size`` and ``num_workers``), or any SQL over the table ``runs``, run by DuckDB.

DuckDB is an optional dependency: without it a query raises UsageError saying how to install it.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from app.errors import UsageError
from app.workspace import catalog_listing

__all__ = ["RunSelector", "parse_selector", "select_rows", "load_runs_table", "query_runs", "QUERY_METRICS",
           "QUERY_STATS", "select_run_paths", "group_columns", "load_history_side", "sweep_table"]

# The headline numbers a grouped query aggregates (one value per run, from the catalog row).
QUERY_METRICS = ("step_time_s", "samples_per_s", "peak_memory_bytes", "final_loss")
QUERY_STATS = ("median", "mean", "min", "max")
_SELECTOR_KEYS = ("name", "id", "tag", "status", "group", "last")
_ROW_COLUMNS = ("id", "name", "status", "started_at", "tags", "group", "path", "steps", "duration_s",
                "step_time_s", "step_time_steps", "samples_per_s", "peak_memory_bytes", "final_loss", "git_commit")


@dataclass(frozen=True)
class RunSelector:
    """Terms that all must hold (``|`` inside one value: any of them), and how many of the newest to keep."""

    terms: tuple[tuple[str, tuple[str, ...]], ...] = ()
    last: int | None = None
    text: str = ""


def parse_selector(text: str, *, option: str = "--baseline-query") -> RunSelector:
    """``key=value[,key=value...]`` with keys name, id (globs allowed), tag, status, group,
    config.KEY and last=N. Raises UsageError naming the term and the valid keys."""
    terms: list[tuple[str, tuple[str, ...]]] = []
    last: int | None = None
    for raw in (t.strip() for t in text.split(",")):
        if not raw:
            continue
        key, eq, value = raw.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key or not value:
            raise UsageError(f"{option} {text!r}: term {raw!r} is not KEY=VALUE "
                             f"(keys: {', '.join(_SELECTOR_KEYS)}, config.KEY)")
        if key == "last":
            if not value.isdigit() or int(value) < 1:
                raise UsageError(f"{option} {text!r}: last={value}: expected a whole number of runs >= 1")
            last = int(value)
        elif key in _SELECTOR_KEYS or key.startswith("config."):
            terms.append((key, tuple(v.strip() for v in value.split("|") if v.strip())))
        else:
            raise UsageError(f"{option} {text!r}: unknown key {key!r} (keys: {', '.join(_SELECTOR_KEYS)}, config.KEY)")
    return RunSelector(terms=tuple(terms), last=last, text=text)


def _config_text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return "" if value is None else str(value)


def _matches(row: Mapping[str, Any], config: Mapping[str, Any], key: str, wanted: tuple[str, ...]) -> bool:
    if key == "tag":
        tags = {t.strip() for t in str(row.get("tags") or "").split(",") if t.strip()}
        return any(w in tags for w in wanted)
    if key in ("name", "id"):
        return any(fnmatch.fnmatchcase(str(row.get(key) or ""), w) for w in wanted)
    if key.startswith("config."):
        value = _flat_config(config).get(key)
        if value is None:
            return False
        return any(_same_value(value, w) for w in wanted)
    return str(row.get(key) or "") in wanted


def _same_value(value: Any, wanted: str) -> bool:
    if _config_text(value) == wanted:
        return True
    try:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and float(wanted) == float(value)
    except ValueError:
        return False


def select_rows(rows: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]], selector: RunSelector
                ) -> list[int]:
    """Positions in ``rows`` ((catalog row, config) pairs) of the runs the selector picks, newest
    start first, at most ``last`` of them."""
    picked = [i for i, (row, cfg) in enumerate(rows)
              if all(_matches(row, cfg, k, v) for k, v in selector.terms)]
    picked.sort(key=lambda i: _start(rows[i][0]), reverse=True)
    return picked[:selector.last] if selector.last is not None else picked


def _start(row: Mapping[str, Any]) -> float:
    v = row.get("started_at")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else -math.inf


def _flat_config(config: Mapping[str, Any], prefix: str = "config") -> dict[str, Any]:
    """``config.<key>`` → value, nested mappings as dotted keys (the sweep table's names)."""
    out: dict[str, Any] = {}
    for k, v in config.items():
        name = f"{prefix}.{k}"
        if isinstance(v, Mapping) and v:
            out.update(_flat_config(v, name))
        else:
            out[name] = v
    return out


def _index_rows(root: str | os.PathLike[str] | None
                ) -> tuple[Path, list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]]:
    """(store root, (row with path, config, final values) of every run) through a refreshed index."""
    done = catalog_listing.refresh(root)
    try:
        stored = {}
        if done.index is not None:
            stored = {f: (row, cfg, fin) for f, row, cfg, fin in (done.index.query_rows() or [])}
        out = []
        for folder in done.scan.folders:
            entry = done.computed.get(folder)
            if entry is not None:
                if entry.row is None:
                    continue
                row, cfg, fin = dict(entry.row), dict(entry.config or {}), dict(entry.finals or {})
            elif folder in stored:
                row, cfg, fin = stored[folder]
            else:
                continue
            row["path"] = str(done.scan.root / folder)
            out.append((row, cfg, fin))
    finally:
        done.close()
    return done.scan.root, out


def select_run_paths(selector: RunSelector, root: str | os.PathLike[str] | None = None, *,
                     exclude: Sequence[str | os.PathLike[str]] = ()) -> list[Path]:
    """The run folders the selector picks in the store (newest first), without ``exclude``
    (the candidate of a gate is never its own baseline). Raises RunStoreNotFoundError."""
    _, rows = _index_rows(root)
    skip = {os.path.realpath(p) for p in exclude}
    pairs = [(r, c) for r, c, _ in rows if os.path.realpath(str(r["path"])) not in skip]
    return [Path(pairs[i][0]["path"]) for i in select_rows(pairs, selector)]


def load_history_side(query: str, root: str | os.PathLike[str] | None = None, *,
                      exclude: Sequence[str | os.PathLike[str]] = ()) -> Any:  # a CompareSide
    """The runs of the catalog that ``query`` selects (parse_selector; the candidate in ``exclude``
    left out) as one side of replicates, labelled ``history(<query>)``. Raises UsageError when the
    query is malformed or selects no run, RunStoreNotFoundError when the store does not exist."""
    from app.workspace.sides import load_runs_side

    selector = parse_selector(query)
    paths = select_run_paths(selector, root, exclude=exclude)
    if not paths:
        raise UsageError(f"--baseline-query {query!r}: no run of the store matches (the candidate is never its "
                         "own baseline; list the runs with torchscope ls)")
    # Oldest first, as --group orders its replicates (by start time).
    return load_runs_side(f"history({query})", list(reversed(paths)))


def _column(values: list[Any]) -> pd.Series:
    """Whole numbers as int64 when every run has one, numbers (not booleans) as float64, anything
    else as text (None stays missing)."""
    present = [v for v in values if v is not None]
    if present and len(present) == len(values) and all(
            isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**63 for v in present):
        return pd.Series(values, dtype="int64")
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return pd.Series([float(v) if v is not None else math.nan for v in values], dtype="float64")
    return pd.Series([_config_text(v) if v is not None else None for v in values], dtype="object")


def load_runs_table(root: str | os.PathLike[str] | None = None, *, selector: RunSelector | None = None
                    ) -> pd.DataFrame:
    """One row per run of the store's index (module docstring), newest first; only the runs the
    selector picks when given. Raises RunStoreNotFoundError."""
    _, rows = _index_rows(root)
    if selector is not None:
        rows = [rows[i] for i in select_rows([(r, c) for r, c, _ in rows], selector)]
    else:
        rows.sort(key=lambda t: _start(t[0]), reverse=True)
    data: dict[str, pd.Series] = {}
    for col in _ROW_COLUMNS:
        data[col] = _column([r.get(col) for r, _, _ in rows]) if col != "started_at" else pd.Series(
            [r.get(col) if isinstance(r.get(col), (int, float)) else math.nan for r, _, _ in rows], dtype="float64")
    flat = [_flat_config(c) for _, c, _ in rows]
    for key in sorted({k for f in flat for k in f}):
        data[key] = _column([f.get(key) for f in flat])
    for key in sorted({k for _, _, fin in rows for k in fin}):
        data[f"final.{key}"] = _column([fin.get(key) for _, _, fin in rows])
    return pd.DataFrame(data, index=range(len(rows)))


def group_columns(table: pd.DataFrame, keys: Sequence[str]) -> list[str]:
    """The table's columns for ``keys`` (``batch_size`` or ``config.batch_size``). Raises UsageError
    naming the config keys that exist."""
    out = []
    for key in keys:
        for name in (key, f"config.{key}"):
            if name in table.columns:
                out.append(name)
                break
        else:
            have = ", ".join(c.removeprefix("config.") for c in table.columns if c.startswith("config.")) or "none"
            raise UsageError(f"--by {key}: no run has this config key (config keys: {have})")
    return out


def _duckdb() -> Any:  # the module (optional dependency)
    try:
        import duckdb
    except ImportError:
        raise UsageError("queries across runs need DuckDB: pip install duckdb (see requirements.txt)") from None
    return duckdb


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def query_runs(table: pd.DataFrame, *, by: Sequence[str] = (), metrics: Sequence[str] = QUERY_METRICS,
               stat: str = "median", sql: str | None = None) -> pd.DataFrame:
    """Run a query over ``table`` (load_runs_table) with DuckDB, as the view ``runs``.

    Without ``sql``: per group of ``by`` columns, ``runs`` (how many) and ``stat`` of each metric
    over the runs that have it (NULLs skipped), groups sorted by their keys. Raises UsageError for an
    unknown statistic, metric or key, a DuckDB error in ``sql``, or no DuckDB."""
    if stat not in QUERY_STATS:
        raise UsageError(f"--stat {stat}: expected one of {', '.join(QUERY_STATS)}")
    duckdb = _duckdb()
    if sql is None:
        unknown = [m for m in metrics if m not in table.columns]
        if unknown:
            raise UsageError(f"--metric {unknown[0]}: not a column of the runs table "
                             f"(headline numbers: {', '.join(QUERY_METRICS)}; final.KEY for logged outcomes)")
        keys = group_columns(table, by)
        select = [f"{_ident(k)} AS {_ident(k.removeprefix('config.'))}" for k in keys]
        select += ["count(*) AS runs"] + [f"{stat}({_ident(m)}) AS {_ident(m)}" for m in metrics]
        sql = f"SELECT {', '.join(select)} FROM runs"
        if keys:
            sql += f" GROUP BY {', '.join(_ident(k) for k in keys)} ORDER BY {', '.join(_ident(k) for k in keys)}"
    con = duckdb.connect(":memory:")
    try:
        con.register("runs", table)
        return con.execute(sql).fetchdf()
    except duckdb.Error as e:
        raise UsageError(f"query failed: {_first_line(str(e))}") from None
    finally:
        con.close()


def _first_line(text: str) -> str:
    return re.split(r"\n", text.strip(), maxsplit=1)[0]


def sweep_table(table: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The Compare page's sweep table (app.analysis.compare.many_runs.compute_sweep_table's columns:
    id, name, path, config.*, SWEEP_OUTCOMES) of the runs of ``table`` (load_runs_table), read from
    the index instead of every run's files, and the config columns that vary. ``best_loss`` is not
    in the index (empty)."""
    out = pd.DataFrame({"id": table["id"], "name": table["name"], "path": table["path"]})
    for col in [c for c in table.columns if c.startswith("config.")]:
        out[col] = pd.to_numeric(table[col], errors="coerce") if table[col].dtype == object and \
            pd.to_numeric(table[col], errors="coerce").notna().sum() == table[col].notna().sum() else table[col]
    out["median_step_time_s"] = table["step_time_s"]
    out["samples_per_s"] = table["samples_per_s"]
    out["final_loss"] = table["final_loss"]
    out["best_loss"] = math.nan
    out["peak_memory_bytes"] = table["peak_memory_bytes"]
    varying = [c for c in out.columns if c.startswith("config.") and out[c].astype(str).nunique() > 1]
    return out, varying
