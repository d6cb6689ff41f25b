"""Traces of a reference, loaded once and analysed once: the trace and analysis caches (workspace layer).

``load_trace_set(path)`` reads the TraceTables under a run folder, trace file or folder of traces
(through the columnar trace cache of app.data.trace); ``analyze_trace_set(traces)`` returns their
TraceAnalysis, computed by the pure app.analysis.trace.summary and cached next to the traces'
cache entries (app.data.trace_analysis_cache) so that a second ``analyze`` of an unchanged trace
reads no event. The cache key is the set's entries and ranks plus :func:`analysis_version`: the
analysis constant, a digest of the analysis modules' source and the pandas version.
``analyze_trace_steps(traces)`` computes and caches only the STEP_TABLES (what the Run page's
Overview shows) in the same entry; a later ``analyze_trace_set`` computes only the other tables.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import pandas as pd

from app.analysis.trace.summary import (
    ANALYSIS_MODULES,
    ANALYSIS_TABLES,
    ANALYSIS_VERSION,
    STEP_TABLES,
    StepAnalysis,
    TraceAnalysis,
    analysis_from_tables,
    compute_analysis_tables,
    steps_from_tables,
)
from app.data import trace_analysis_cache as tac
from app.data import trace_cache
from app.data.trace import Progress, TraceTables, load_trace, load_traces, readable_trace_paths
from app.errors import TraceError
from app.workspace.ingest import prefetch_traces

__all__ = ["uncached_trace_files", "ingest_trace", "load_trace_set", "load_trace_files", "analyze_trace_set",
           "analyze_trace_steps", "load_and_analyze", "analysis_version", "analysis_folder"]


@lru_cache(maxsize=1)
def _source_digest() -> str:
    h = hashlib.sha1()
    for name in ANALYSIS_MODULES:
        spec = importlib.util.find_spec(f"app.analysis.{name}")
        if spec is None or spec.origin is None:
            raise TraceError(f"app.analysis.{name}: analysis module not found (ANALYSIS_MODULES)")
        h.update(Path(spec.origin).read_bytes())
    return h.hexdigest()[:16]


def analysis_version() -> str:
    """What the cached analysis tables are keyed by: ANALYSIS_VERSION, the analysis code, pandas."""
    return f"{ANALYSIS_VERSION}\0{_source_digest()}\0{pd.__version__}"


def analysis_folder(entries: Sequence[Path], ranks: Sequence[int]) -> Path:
    """The analysis cache folder of the traces cached in ``entries`` with ``ranks`` (load order)."""
    return tac.analysis_dir(entries, ranks, analysis_version())


def uncached_trace_files(paths: Sequence[Path]) -> list[Path]:
    """The trace files of ``paths`` that the columnar trace cache does not hold yet (their first
    open parses them: seconds to minutes for a big trace)."""
    return [p for p in paths if trace_cache.read_cached_meta(trace_cache.cache_entry_dir(p)) is None]


def ingest_trace(path: Path, *, progress: Progress | None = None) -> TraceTables:
    """Read one trace file into the columnar cache (``progress(done_bytes, total_bytes)``)."""
    return load_trace(path, progress=progress)


def load_trace_set(path: str | os.PathLike[str], *, progress: Progress | None = None,
                   use_cache: bool = True) -> list[TraceTables]:
    """One TraceTables per trace under ``path`` (a run folder, trace file or folder of traces),
    sorted by (rank, file name). Raises TraceError for a file that cannot be read as a trace.

    Many files the cache lacks are first parsed in parallel (app.workspace.ingest: local processes,
    or the Dask cluster of the current ``ingest_settings``); the set is then opened from the cache."""
    prefetch_traces(readable_trace_paths(path), use_cache=use_cache)
    return load_traces(path, progress=progress, use_cache=use_cache)


def load_trace_files(files: Sequence[Path]) -> list[TraceTables]:
    """The traces of ``files`` loaded together (one run's ranks or workers), sorted by (rank, name);
    many uncached files are parsed in parallel first, as in ``load_trace_set``."""
    prefetch_traces([p for f in files for p in readable_trace_paths(f)])
    return sorted((t for f in files for t in load_traces(f)), key=lambda t: (t.rank, t.path.name))


def _analysis_tables(traces: Sequence[TraceTables], names: Sequence[str],
                     use_cache: bool) -> tuple[dict[str, pd.DataFrame], bool]:
    """(the tables ``names`` of ``traces``, whether the cache held them all). Tables the cache
    entry holds are read, the others computed; the entry then holds both."""
    traces = list(traces)
    entries = [t.cache_entry for t in traces]
    folder = None
    if use_cache and traces and all(e is not None for e in entries):
        folder = analysis_folder([e for e in entries if e is not None], [int(t.rank) for t in traces])
    known = tac.read_analysis_tables(folder, names) if folder is not None else {}
    if len(known) == len(names):
        return known, True
    computed = compute_analysis_tables(traces, names, known=known)
    if folder is not None:
        tac.write_analysis(folder, computed)
    return computed, False


def analyze_trace_set(traces: Sequence[TraceTables], *, use_cache: bool = True) -> TraceAnalysis:
    """The TraceAnalysis of ``traces``, read from the analysis cache when every trace has a cache
    entry and the set was analysed by the current code, else computed (and then cached); tables
    cached by ``analyze_trace_steps`` are read, not computed again."""
    tables, hit = _analysis_tables(traces, ANALYSIS_TABLES, use_cache)
    return analysis_from_tables(traces, tables, from_cache=hit)


def analyze_trace_steps(traces: Sequence[TraceTables], *, use_cache: bool = True) -> StepAnalysis:
    """The StepAnalysis of ``traces`` (steps, memory peaks, rank summary: the STEP_TABLES), read from
    the analysis cache as ``analyze_trace_set`` reads it, else computed without the op, kernel and
    breakdown tables, and cached in the same entry."""
    tables, hit = _analysis_tables(traces, STEP_TABLES, use_cache)
    return steps_from_tables(traces, tables, from_cache=hit)


def load_and_analyze(path: str | os.PathLike[str]) -> tuple[tuple[TraceTables, ...], TraceAnalysis]:
    """Load and analyse the traces under ``path``; return (traces, TraceAnalysis).

    Raises TraceError when a trace cannot be read and AnalysisError when it cannot be analysed.
    """
    traces = tuple(load_trace_set(path))
    return traces, analyze_trace_set(traces)
