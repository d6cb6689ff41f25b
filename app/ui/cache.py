"""Bounded Streamlit caches around the workspace's loaders (UI layer: the only place st.cache_* is used).

Keys include the files' modification times so a run that is still being written shows its
latest data on the next rerun, while unchanged runs are served from memory.
"""
from __future__ import annotations

# Parameters that start with "_" are not hashed by st.cache_*; the signatures are passed
# without underscore on purpose so that they are part of the cache key.
import os
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any

import streamlit as st

from app.analysis.trace.summary import StepAnalysis, TraceAnalysis
from app.data.trace import TraceTables
from app.workspace import artifacts
from app.workspace.profiled_windows import analyze_run_traces, read_run_windows
from app.workspace.signatures import run_signature
from app.workspace.traces import analyze_trace_steps, load_trace_set

__all__ = [
    "run_signature",
    "cached_run",
    "cached_traces",
    "cached_trace_analysis",
    "cached_step_analysis",
    "prefetch_trace_analysis",
    "cached_figure",
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


@st.cache_resource(max_entries=64, ttl=900, show_spinner=False)
def _steps(path: str, sig: tuple[float, ...]) -> StepAnalysis:
    # Every profiled step, anomaly windows included, as TraceAnalysis.steps (profiled_windows).
    return analyze_trace_steps(cached_traces(path))


def cached_step_analysis(path: str | os.PathLike[str]) -> StepAnalysis:
    """The StepAnalysis (steps, memory peaks, rank summary) of a run or trace path: the Overview's
    part of its TraceAnalysis, the same tables, computed without the op, kernel and breakdown tables."""
    return _steps(str(path), run_signature(path))


# Once the Overview is drawn, the rest of the run's TraceAnalysis (breakdown, ops, kernels) is
# computed in a thread of the server, so that the first trace tab opened finds it in the cache
# above instead of computing it then. st.cache_resource computes a key once: a tab opened before
# the thread is done waits for its result. One thread per run state; finished ones are forgotten.
_prefetches: dict[tuple[str, tuple[float, ...]], threading.Thread] = {}
_prefetches_lock = threading.Lock()
_PREFETCHES_KEPT = 64


def _prefetch(path: str, sig: tuple[float, ...]) -> None:
    try:
        _analysis(path, sig)
    except Exception:  # noqa: BLE001 - the tab that shows the analysis computes it again and shows why
        pass


# Above this many events (all ranks) the op table alone takes seconds, holding the interpreter's
# lock much of that time: the page's own reruns would wait on it. The tab then computes it when opened.
PREFETCH_MAX_EVENTS = 2_000_000


def prefetch_trace_analysis(path: str | os.PathLike[str], events: int) -> threading.Thread | None:
    """Start computing ``cached_trace_analysis(path)`` in a daemon thread (at most one per run
    state) and return that thread, or None for traces of more than PREFETCH_MAX_EVENTS
    ``events``; the page does not wait for it."""
    if events > PREFETCH_MAX_EVENTS:
        return None
    key = (str(path), run_signature(path))
    with _prefetches_lock:
        thread = _prefetches.get(key)
        if thread is None:
            for old in [k for k, t in _prefetches.items() if not t.is_alive()][: max(0, len(_prefetches) - _PREFETCHES_KEPT)]:
                del _prefetches[old]
            thread = _prefetches[key] = threading.Thread(target=_prefetch, args=key, daemon=True,
                                                         name="torchscope-analysis-prefetch")
            thread.start()
    return thread


# Figures of a cached result (a Comparison from compare_cache, whose cache is bounded), built
# once per view and dropped with the result: a rerun for another widget or a tab switch redraws
# them from memory. Keyed by the result's identity, which finalize() forgets before it is reused.
_FIGURES_PER_OWNER = 16
_figures: dict[int, dict[Hashable, Any]] = {}
_figures_lock = threading.Lock()


def cached_figure(owner: object, view: Hashable, build: Callable[[], Any]) -> Any:
    """``build()`` once per ``owner`` (an object from a bounded st.cache_resource, e.g. a
    Comparison) and ``view`` (what else the figure depends on), then the same figure while the
    owner lives; at most 16 views per owner. Treat the figure as read-only."""
    key = id(owner)
    with _figures_lock:
        views = _figures.get(key)
        if views is None:
            views = _figures[key] = {}
            weakref.finalize(owner, _figures.pop, key, None)
        fig = views.get(view)
    if fig is None:
        fig = build()
        with _figures_lock:
            if len(views) >= _FIGURES_PER_OWNER:
                views.pop(next(iter(views)))
            views[view] = fig
    return fig
