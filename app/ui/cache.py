"""Bounded Streamlit caches around the workspace's loaders (UI layer: the only place st.cache_* is used).

Keys include the files' modification times so a run that is still being written shows its
latest data on the next rerun, while unchanged runs are served from memory.
"""
from __future__ import annotations

# Parameters that start with "_" are not hashed by st.cache_*; the signatures are passed
# without underscore on purpose so that they are part of the cache key.
import os

import streamlit as st

from app.analysis.trace.summary import TraceAnalysis
from app.data.trace import TraceTables
from app.workspace import artifacts
from app.workspace.profiled_windows import analyze_run_traces, read_run_windows
from app.workspace.signatures import run_signature
from app.workspace.traces import load_trace_set

__all__ = [
    "run_signature",
    "cached_run",
    "cached_traces",
    "cached_trace_analysis",
]


@st.cache_data(max_entries=32, ttl=600, show_spinner=False)
def _run(path: str, sig: tuple[float, ...]) -> artifacts.RunData:
    return artifacts.load_run(path)


def cached_run(run_dir: str | os.PathLike[str]) -> artifacts.RunData:
    """The run's data; re-read when any of its files changed."""
    return _run(str(run_dir), run_signature(run_dir))


# Trace tables are the big objects (hundreds of MB for a large trace): keep a few in memory;
# analyses are small and also cached on disk by the trace engine, so keep many.
@st.cache_resource(max_entries=12, ttl=900, show_spinner=False)
def _traces(path: str, sig: tuple[float, ...]) -> list[TraceTables]:
    return load_trace_set(path)


def cached_traces(path: str | os.PathLike[str]) -> list[TraceTables]:
    """The trace tables (one per rank) of a run, a trace file or a folder of traces."""
    return _traces(str(path), run_signature(path))


@st.cache_resource(max_entries=64, ttl=900, show_spinner=False)
def _analysis(path: str, sig: tuple[float, ...]) -> TraceAnalysis:
    # Breakdown, ops and kernels over the typical windows (anomaly windows apart: profiled_windows).
    return analyze_run_traces(cached_traces(path), read_run_windows(path))


def cached_trace_analysis(path: str | os.PathLike[str]) -> TraceAnalysis:
    """The TraceAnalysis (steps, breakdown, ops, kernels, memory) of a run or trace path."""
    return _analysis(str(path), run_signature(path))
