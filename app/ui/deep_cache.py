"""Bounded Streamlit caches for the Run page's deep tabs: step windows, snapshots, memory
categories, module tree (UI layer; the pure functions they wrap know nothing of Streamlit)."""
from __future__ import annotations

import os
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from app.analysis.curves.smoothing import XAxis, compute_curve, compute_rank_band
from app.analysis.memory.events import compute_memory_timeline
from app.analysis.memory.snapshot import compute_trace_allocations
from app.analysis.trace.timeline import (
    SHAPE_BOUND,
    Timeline,
    combine_timelines,
    compute_activity_span,
    compute_step_windows,
    compute_timeline,
)
from app.charts.timeline import timeline_chart
from app.ui.cache import cached_run, cached_traces
from app.workspace import artifacts
from app.workspace.signatures import file_signature, run_signature
from profiler_agent.runformat import layout

__all__ = [
    "file_signature",
    "cached_curve",
    "cached_rank_band",
    "cached_step_windows",
    "cached_activity_span",
    "TimelineView",
    "cached_timeline_chart",
    "cached_snapshot",
    "cached_memory_categories",
    "cached_uploaded_categories",
    "cached_recorded_categories",
    "cached_memory_timeline",
    "cached_trace_allocations",
    "cached_module_tree",
]


# Curves are recomputed only when the run's files or the curve's own settings change, not on
# every rerun caused by another widget (1e6 points take ~0.2 s per curve).
@st.cache_data(max_entries=64, ttl=600, show_spinner=False)
def _curve(run_dir: str, sig: tuple[float, ...], key: str, x_axis: str, smoothing: float, max_points: int,
           ranks: tuple[int, ...] | None, started_at: float | None) -> pd.DataFrame:
    return compute_curve(cached_run(run_dir).metrics, key, x_axis=XAxis(x_axis), smoothing=smoothing,
                         max_points=max_points, ranks=ranks, started_at=started_at)


def cached_curve(run_dir: str | os.PathLike[str], key: str, *, x_axis: XAxis, smoothing: float, max_points: int,
                 ranks: list[int] | None, started_at: float | None) -> pd.DataFrame:
    """compute_curve over the run's metrics, cached per run state and settings."""
    return _curve(str(run_dir), run_signature(run_dir), key, str(x_axis), float(smoothing), int(max_points),
                  tuple(ranks) if ranks is not None else None, started_at)


@st.cache_data(max_entries=64, ttl=600, show_spinner=False)
def _rank_band(run_dir: str, sig: tuple[float, ...], key: str, smoothing: float, max_points: int) -> pd.DataFrame:
    return compute_rank_band(cached_run(run_dir).metrics, key, smoothing=smoothing, max_points=max_points)


def cached_rank_band(run_dir: str | os.PathLike[str], key: str, *, smoothing: float, max_points: int) -> pd.DataFrame:
    """compute_rank_band over the run's metrics, cached per run state and settings."""
    return _rank_band(str(run_dir), run_signature(run_dir), key, float(smoothing), int(max_points))


@st.cache_data(max_entries=16, ttl=900, show_spinner=False)
def _step_windows(run_dir: str, sig: tuple[float, ...], index: int) -> pd.DataFrame:
    return compute_step_windows(cached_traces(run_dir)[index].events)


def cached_step_windows(run_dir: str | os.PathLike[str], index: int) -> pd.DataFrame:
    """Step windows of the ``index``-th trace of the run (see compute_step_windows)."""
    return _step_windows(str(run_dir), run_signature(run_dir), index)


@st.cache_data(max_entries=32, ttl=900, show_spinner=False)
def _activity_span(run_dir: str, sig: tuple[float, ...], index: int, start_us: float, end_us: float
                   ) -> tuple[float, float]:
    return compute_activity_span(cached_traces(run_dir)[index].events, start_us, end_us)


def cached_activity_span(run_dir: str | os.PathLike[str], index: int, start_us: float, end_us: float
                         ) -> tuple[float, float]:
    """Where the work of [start_us, end_us] of the ``index``-th trace lies (compute_activity_span)."""
    return _activity_span(str(run_dir), run_signature(run_dir), index, float(start_us), float(end_us))


@dataclass(frozen=True)
class TimelineView:
    """What the Timeline tab draws: a window of the ``index``-th trace (absolute µs), or with
    ``steps`` those steps on every rank, zoomed to ``zoom_us`` (µs from each rank's first step
    start); the filters and drawing options of app.analysis.trace.timeline.compute_timeline."""

    run_dir: str
    index: int
    start_us: float
    end_us: float
    name_contains: str = ""
    lane_contains: str = ""
    hidden_lanes: tuple[str, ...] = ()
    max_depth: int | None = None
    flows: bool = False
    lane_slice: tuple[int, int] | None = None
    steps: tuple[int, int] | None = None
    zoom_us: tuple[float, float] | None = None
    title: str = ""


def _layout(view: TimelineView) -> tuple[Timeline, list[int]]:
    traces = cached_traces(view.run_dir)
    options: dict[str, Any] = {"name_contains": view.name_contains, "lane_contains": view.lane_contains,
                               "hidden_lanes": view.hidden_lanes, "max_depth": view.max_depth, "flows": view.flows}
    if view.steps is None or view.zoom_us is None:
        trace = traces[view.index]
        return compute_timeline(trace.events, trace.threads, view.start_us, view.end_us, lane_slice=view.lane_slice,
                                **options), []
    parts, missing = [], []
    per_rank = max(1, SHAPE_BOUND // len(traces))
    first, last = view.steps
    for i, t in enumerate(traces):
        windows = _step_windows(view.run_dir, run_signature(view.run_dir), i)
        rows = windows[(windows["step"] >= first) & (windows["step"] <= last)]
        if rows.empty:
            missing.append(t.rank)
            continue
        origin = float(rows["start_us"].min())
        parts.append(compute_timeline(t.events, t.threads, origin + view.zoom_us[0], origin + view.zoom_us[1],
                                      max_events=per_rank, lane_prefix=f"rank {t.rank} · ", **options))
    if not parts:
        raise ValueError(f"steps {first}–{last} are in no trace of the run")
    return combine_timelines(parts), missing


# A figure is built once per run state and view and kept: switching tabs or moving an unrelated
# widget redraws it from memory. Specs of a few thousand shapes are small (~1 MB); keep a few.
@st.cache_resource(max_entries=8, ttl=900, show_spinner=False)
def _timeline_chart(sig: tuple[float, ...], key: tuple[Any, ...]) -> tuple[Timeline, Any, list[int]]:
    view = TimelineView(*key)
    timeline, missing = _layout(view)
    return timeline, timeline_chart(timeline, title=view.title or None), missing


def cached_timeline_chart(view: TimelineView) -> tuple[Timeline, Any, list[int]]:
    """(timeline, its Vega-Lite spec, ranks without the view's steps) of ``view``, laid out once per
    run state and view (bounded, at most SHAPE_BOUND shapes each). Treat the spec as read-only."""
    return _timeline_chart(run_signature(view.run_dir), astuple(view))


@st.cache_resource(max_entries=4, ttl=900, show_spinner=False)
def _snapshot(path: str, folder: str, sig: tuple[float, int]) -> dict[str, Any]:
    return artifacts.load_snapshot(path, folder=Path(folder))


def cached_snapshot(path: str | os.PathLike[str], run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """A CUDA allocator snapshot of the run in ``run_dir``, read with the restricted unpickler
    (treat as read-only); a link out of the run is refused (UnsafePath)."""
    return _snapshot(str(path), str(run_dir), file_signature(path))


@st.cache_data(max_entries=4, ttl=900, show_spinner=False)
def _memory_categories(path: str, sig: tuple[float, int]) -> pd.DataFrame:
    return artifacts.load_memory_timeline_raw(path)


def cached_memory_categories(path: str | os.PathLike[str]) -> pd.DataFrame:
    """The raw ``export_memory_timeline`` records of ``path`` as a table."""
    return _memory_categories(str(path), file_signature(path))


@st.cache_data(max_entries=4, ttl=900, show_spinner=False)
def _uploaded_categories(data: bytes, name: str) -> pd.DataFrame:
    return artifacts.parse_memory_timeline_raw(data, name)


def cached_uploaded_categories(data: bytes, name: str) -> pd.DataFrame:
    """The raw ``export_memory_timeline`` records of an uploaded file as a table."""
    return _uploaded_categories(data, name)


@st.cache_data(max_entries=8, ttl=900, show_spinner=False)
def _recorded_categories(path: str, folder: str, mtime: float) -> pd.DataFrame:
    return artifacts.load_memory_timeline_raw(path, folder=Path(folder))


def cached_recorded_categories(path: str, run_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """The raw ``export_memory_timeline`` records of a file the agent wrote into the run in
    ``run_dir`` (a link out of the run is refused)."""
    return _recorded_categories(path, str(run_dir), os.path.getmtime(path))


@st.cache_data(max_entries=16, ttl=900, show_spinner=False)
def _memory_timeline(run_dir: str, sig: tuple[float, ...], index: int) -> pd.DataFrame:
    return compute_memory_timeline(cached_traces(run_dir)[index])


def cached_memory_timeline(run_dir: str | os.PathLike[str], index: int) -> pd.DataFrame:
    """Allocator totals over time from the ``index``-th trace's memory events (every device)."""
    return _memory_timeline(str(run_dir), run_signature(run_dir), index)


@st.cache_data(max_entries=16, ttl=900, show_spinner=False)
def _trace_allocations(run_dir: str, sig: tuple[float, ...], index: int, top: int) -> pd.DataFrame:
    trace = cached_traces(run_dir)[index]
    return compute_trace_allocations(trace.memory, trace.events, top=top)


def cached_trace_allocations(run_dir: str | os.PathLike[str], index: int, *, top: int = 50) -> pd.DataFrame:
    """The largest allocations of the ``index``-th trace with the ops that made them."""
    return _trace_allocations(str(run_dir), run_signature(run_dir), index, top)


@st.cache_data(max_entries=16, ttl=900, show_spinner=False)
def _module_tree(run_dir: str, sig: tuple[float, int]) -> dict[str, Any] | None:
    return artifacts.load_module_tree(run_dir)


def cached_module_tree(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The run's parsed module tree (graph/modules.json), or None."""
    return _module_tree(str(run_dir), file_signature(Path(run_dir) / layout.MODULE_TREE))
