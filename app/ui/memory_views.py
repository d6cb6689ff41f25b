"""The Memory tab's charts and tables, built once per run state and kept (bounded
``st.cache_resource``): a rerun of the tab, e.g. after a widget moved, redraws them from memory
instead of recomputing its tables and specs (UI layer)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from app.analysis.curves.smoothing import minmax_downsample_indices
from app.analysis.memory.snapshot import compute_category_peak, compute_category_timeline, window_positions
from app.analysis.trace.timeline import compute_ops_at
from app.charts.memory import category_chart, memory_timeline_chart
from app.ui.cache import cached_traces
from app.ui.deep_cache import cached_memory_timeline, cached_recorded_categories, cached_uploaded_categories
from app.workspace.signatures import run_signature

__all__ = ["MAX_POINTS", "TraceMemoryView", "CategoryView", "cached_trace_memory_views", "cached_zoomed_trace_spec",
           "cached_recorded_category_view", "cached_uploaded_category_view",
           "cached_zoomed_recorded_category_spec", "cached_zoomed_uploaded_category_spec"]

# Events of an allocation timeline and timestamps of a memory-by-category chart sent to the
# browser, picked by min/max so that every peak stays: each row is an item of every layer drawn
# over it, whose encodings Streamlit's Vega expression interpreter evaluates one by one. 600 points
# (300 buckets) give one bucket per ~4 px of a full-width chart; the categories, one area per
# category over each timestamp, get 300. A zoom (the popover under each chart) redraws the chosen
# range with as many points again: full detail where the user looks (benchmarks/README.md,
# issue 16, waves 14-15).
MAX_POINTS = 600
CATEGORY_POINTS = 300


@dataclass(frozen=True)
class TraceMemoryView:
    """One device's allocator totals in one trace: the peak, the chart, the ops around the peak
    (``compute_ops_at``), times in ms since ``origin_us`` (the trace's first event); ``spec`` is
    None when the device's events carry no totals."""

    spec: dict[str, Any] | None
    origin_us: float = 0.0
    peak_bytes: int = 0
    peak_reserved_bytes: int | None = None
    peak_ms: float = 0.0
    ops: pd.DataFrame | None = None
    title: str = ""
    span_ms: tuple[float, float] = (0.0, 0.0)  # the device's first and last event, ms since origin_us


@dataclass(frozen=True)
class CategoryView:
    """Memory by category of one memory timeline: the chart and the breakdown at the peak
    (``compute_category_peak``); ``spec`` is None when the file holds no records."""

    spec: dict[str, Any] | None
    peak: pd.DataFrame | None = None
    span_ms: tuple[float, float] = (0.0, 0.0)  # the first and last timestamp, ms


def _device_rows(timeline: pd.DataFrame, device: str) -> pd.DataFrame:
    rows = timeline[timeline["device"] == device].reset_index(drop=True)
    if not (rows["reserved_bytes"] > 0).any():  # CPU allocators report no reserved memory
        rows = rows.assign(reserved_bytes=np.nan)
    return rows


def _timeline_spec(rows: pd.DataFrame, origin: float, title: str, peak: int | None) -> dict[str, Any]:
    """The chart of ``rows`` (MAX_POINTS of them, by min/max), the row labelled ``peak`` marked."""
    keep = minmax_downsample_indices(rows["allocated_bytes"].to_numpy(np.float64), MAX_POINTS)
    shown = rows.iloc[keep].assign(time_ms=lambda d: (d["ts_us"] - origin) / 1000)
    return memory_timeline_chart(shown, x="time_ms", x_title="ms since trace start", peak_index=peak, title=title)


def _device_view(rows: pd.DataFrame, events: pd.DataFrame, origin: float, title: str) -> TraceMemoryView:
    if rows["allocated_bytes"].isna().all():
        return TraceMemoryView(spec=None, origin_us=origin)
    peak = int(rows["allocated_bytes"].idxmax())
    peak_ts = float(rows.at[peak, "ts_us"])
    reserved = rows["reserved_bytes"]
    ts = rows["ts_us"]
    return TraceMemoryView(spec=_timeline_spec(rows, origin, title, peak), origin_us=origin,
                           peak_bytes=int(rows.at[peak, "allocated_bytes"]),
                           peak_reserved_bytes=int(reserved.max()) if reserved.notna().any() else None,
                           peak_ms=(peak_ts - origin) / 1000, ops=compute_ops_at(events, peak_ts, before=10),
                           title=title, span_ms=((float(ts.min()) - origin) / 1000, (float(ts.max()) - origin) / 1000))


@st.cache_resource(max_entries=8, ttl=900, show_spinner=False)
def _trace_memory_views(run_dir: str, sig: tuple[float, ...], index: int) -> dict[str, TraceMemoryView]:
    timeline = cached_memory_timeline(run_dir, index)
    if timeline.empty:
        return {}
    trace = cached_traces(run_dir)[index]
    events = trace.events
    origin = float(events["ts_us"].min()) if len(events) else float(timeline["ts_us"].min())
    devices = sorted(timeline["device"].unique(), key=lambda d: (d == "cpu", d))
    return {str(d): _device_view(_device_rows(timeline, d), events, origin, f"{d} · rank {trace.rank}")
            for d in devices}


def cached_trace_memory_views(run_dir: str | os.PathLike[str], index: int) -> dict[str, TraceMemoryView]:
    """Per device (CUDA devices first, in order) of the ``index``-th trace of the run, its view;
    empty when the trace has no memory events. Shared, treat as read-only."""
    return _trace_memory_views(str(run_dir), run_signature(run_dir), index)


@st.cache_resource(max_entries=16, ttl=900, show_spinner=False)
def _zoomed_trace_spec(run_dir: str, sig: tuple[float, ...], index: int, device: str, origin: float, title: str,
                       window: tuple[float, float]) -> dict[str, Any]:
    rows = _device_rows(cached_memory_timeline(run_dir, index), device)
    peak = int(rows["allocated_bytes"].idxmax())
    inside = rows.iloc[window_positions(((rows["ts_us"] - origin) / 1000).to_numpy(np.float64), window)]
    return _timeline_spec(inside, origin, title, peak if peak in inside.index else None)


def cached_zoomed_trace_spec(run_dir: str | os.PathLike[str], index: int, device: str, view: TraceMemoryView,
                             window: tuple[float, float]) -> dict[str, Any]:
    """The chart of ``view`` (``device`` of the ``index``-th trace) over ``window`` (ms since its
    origin) at full detail: up to MAX_POINTS of the events in it, the peak marked when inside."""
    return _zoomed_trace_spec(str(run_dir), run_signature(run_dir), index, device, view.origin_us, view.title,
                              (float(window[0]), float(window[1])))


def _category_view(raw: pd.DataFrame) -> CategoryView:
    cats = compute_category_timeline(raw, max_points=CATEGORY_POINTS)
    if cats.empty:
        return CategoryView(spec=None)
    times = cats["time_ms"]
    return CategoryView(spec=category_chart(cats), peak=compute_category_peak(cats),
                        span_ms=(float(times.min()), float(times.max())))


def _zoomed_category_chart(raw: pd.DataFrame, window: tuple[float, float]) -> dict[str, Any]:
    return category_chart(compute_category_timeline(raw, max_points=CATEGORY_POINTS, window_ms=window))


@st.cache_resource(max_entries=16, ttl=900, show_spinner=False)
def _zoomed_recorded_category_spec(path: str, run_dir: str, mtime: float, window: tuple[float, float]) -> dict[str, Any]:
    return _zoomed_category_chart(cached_recorded_categories(path, run_dir), window)


@st.cache_resource(max_entries=8, ttl=900, show_spinner=False)
def _zoomed_uploaded_category_spec(data: bytes, name: str, window: tuple[float, float]) -> dict[str, Any]:
    return _zoomed_category_chart(cached_uploaded_categories(data, name), window)


def cached_zoomed_recorded_category_spec(path: str, run_dir: str | os.PathLike[str],
                                         window: tuple[float, float]) -> dict[str, Any]:
    """Memory by category of a recorded memory timeline over ``window`` (ms) at full detail: up to
    CATEGORY_POINTS of the timestamps in it."""
    return _zoomed_recorded_category_spec(path, str(run_dir), os.path.getmtime(path),
                                          (float(window[0]), float(window[1])))


def cached_zoomed_uploaded_category_spec(data: bytes, name: str, window: tuple[float, float]) -> dict[str, Any]:
    """The same for an uploaded memory timeline."""
    return _zoomed_uploaded_category_spec(data, name, (float(window[0]), float(window[1])))


@st.cache_resource(max_entries=8, ttl=900, show_spinner=False)
def _recorded_category_view(path: str, run_dir: str, mtime: float) -> CategoryView:
    return _category_view(cached_recorded_categories(path, run_dir))


def cached_recorded_category_view(path: str, run_dir: str | os.PathLike[str]) -> CategoryView:
    """Memory by category of a memory timeline the agent wrote into the run in ``run_dir`` (a link
    out of the run is refused: UnsafePath). Shared, treat as read-only."""
    return _recorded_category_view(path, str(run_dir), os.path.getmtime(path))


@st.cache_resource(max_entries=4, ttl=900, show_spinner=False)
def _uploaded_category_view(data: bytes, name: str) -> CategoryView:
    return _category_view(cached_uploaded_categories(data, name))


def cached_uploaded_category_view(data: bytes, name: str) -> CategoryView:
    """Memory by category of an uploaded memory timeline (raises what its parser raises)."""
    return _uploaded_category_view(data, name)
