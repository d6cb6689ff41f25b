"""Bounded Streamlit caches around the pure loaders (UI layer: the only place st.cache_* is used).

Keys include the files' modification times so a run that is still being written shows its
latest data on the next rerun, while unchanged runs are served from memory.
"""
from __future__ import annotations

# Parameters that start with "_" are not hashed by st.cache_*; the signatures are passed
# without underscore on purpose so that they are part of the cache key.

import os
from pathlib import Path
from typing import Any

import streamlit as st

from app.data import runs as runs_data

__all__ = [
    "run_signature",
    "cached_store",
    "cached_run",
    "cached_traces",
    "cached_trace_analysis",
]


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def run_signature(run_dir: str | os.PathLike[str]) -> tuple[float, ...]:
    """Modification times of the files whose change must invalidate the run's cached data."""
    from profiler_agent.runformat import layout

    p = Path(run_dir)
    traces = layout.list_trace_files(p)
    return (
        _mtime(p / layout.MANIFEST),
        _mtime(p / layout.METRICS),
        _mtime(p / layout.SYSTEM),
        float(len(traces)),
        max((_mtime(t) for t in traces), default=0.0),
    )


def store_signature(root: str | os.PathLike[str]) -> tuple[float, int]:
    """(mtime of the store folder, number of entries): changes when a run is added or removed."""
    p = Path(root)
    try:
        return (_mtime(p), sum(1 for _ in p.iterdir()))
    except OSError:
        return (0.0, 0)


@st.cache_data(max_entries=8, ttl=600, show_spinner=False)
def _store(root: str, sig: tuple[Any, ...], bucket: int) -> runs_data.StoreTable:
    return runs_data.load_store(root)


def cached_store(root: str | os.PathLike[str], *, refresh_s: float = 5.0) -> runs_data.StoreTable:
    """The store table, recomputed when the store changes or every ``refresh_s`` seconds
    (running runs' heartbeats and metrics move without changing the store folder)."""
    import time

    return _store(str(root), store_signature(root), int(time.time() // max(refresh_s, 1.0)))


@st.cache_data(max_entries=32, ttl=600, show_spinner=False)
def _run(path: str, sig: tuple[float, ...]) -> runs_data.RunData:
    return runs_data.load_run(path)


def cached_run(run_dir: str | os.PathLike[str]) -> runs_data.RunData:
    """The run's data; re-read when any of its files changed."""
    return _run(str(run_dir), run_signature(run_dir))


# Trace tables are the big objects (hundreds of MB for a large trace): keep a few in memory;
# analyses are small and also cached on disk by the trace engine, so keep many.
@st.cache_resource(max_entries=12, ttl=900, show_spinner=False)
def _traces(path: str, sig: tuple[float, ...]) -> list[Any]:
    from app.data.trace import load_traces

    return load_traces(path)


def cached_traces(path: str | os.PathLike[str]) -> list[Any]:
    """The trace tables (one per rank) of a run, a trace file or a folder of traces."""
    return _traces(str(path), run_signature(path))


@st.cache_resource(max_entries=64, ttl=900, show_spinner=False)
def _analysis(path: str, sig: tuple[float, ...]) -> Any:
    from app.analysis.trace.summary import analyze_traces

    return analyze_traces(cached_traces(path))


def cached_trace_analysis(path: str | os.PathLike[str]) -> Any:
    """The TraceAnalysis (steps, breakdown, ops, kernels, memory) of a run or trace path."""
    return _analysis(str(path), run_signature(path))
