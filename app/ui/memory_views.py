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
from app.analysis.memory.snapshot import compute_category_peak, compute_category_timeline
from app.analysis.trace.timeline import compute_ops_at
from app.charts.memory import category_chart, memory_timeline_chart
from app.ui.cache import cached_traces
from app.ui.deep_cache import cached_memory_timeline, cached_recorded_categories, cached_uploaded_categories
from app.workspace.signatures import run_signature

__all__ = ["MAX_POINTS", "TraceMemoryView", "CategoryView", "cached_trace_memory_views",
           "cached_recorded_category_view", "cached_uploaded_category_view"]

# Events of an allocation timeline and timestamps of a memory-by-category chart sent to the
# browser, picked by min/max so that every peak stays: each row is an item of every layer drawn
# over it, whose encodings Streamlit's Vega expression interpreter evaluates one by one. 600
# buckets still give one per ~2 px of a full-width chart; the categories, one area per category
# over each timestamp, get 300 (one per ~4 px) (benchmarks/README.md, "Wave 14").
MAX_POINTS = 1200
CATEGORY_POINTS = 600


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


@dataclass(frozen=True)
class CategoryView:
    """Memory by category of one memory timeline: the chart and the breakdown at the peak
    (``compute_category_peak``); ``spec`` is None when the file holds no records."""

    spec: dict[str, Any] | None
    peak: pd.DataFrame | None = None


def _device_view(rows: pd.DataFrame, events: pd.DataFrame, origin: float, title: str) -> TraceMemoryView:
    if rows["allocated_bytes"].isna().all():
        return TraceMemoryView(spec=None, origin_us=origin)
    if not (rows["reserved_bytes"] > 0).any():  # CPU allocators report no reserved memory
        rows = rows.assign(reserved_bytes=np.nan)
    peak = int(rows["allocated_bytes"].idxmax())
    peak_ts = float(rows.at[peak, "ts_us"])
    keep = minmax_downsample_indices(rows["allocated_bytes"].to_numpy(np.float64), MAX_POINTS)
    shown = rows.iloc[keep].assign(time_ms=lambda d: (d["ts_us"] - origin) / 1000)
    reserved = rows["reserved_bytes"]
    spec = memory_timeline_chart(shown, x="time_ms", x_title="ms since trace start", peak_index=peak, title=title)
    return TraceMemoryView(spec=spec, origin_us=origin, peak_bytes=int(rows.at[peak, "allocated_bytes"]),
                           peak_reserved_bytes=int(reserved.max()) if reserved.notna().any() else None,
                           peak_ms=(peak_ts - origin) / 1000, ops=compute_ops_at(events, peak_ts, before=10))


@st.cache_resource(max_entries=8, ttl=900, show_spinner=False)
def _trace_memory_views(run_dir: str, sig: tuple[float, ...], index: int) -> dict[str, TraceMemoryView]:
    timeline = cached_memory_timeline(run_dir, index)
    if timeline.empty:
        return {}
    trace = cached_traces(run_dir)[index]
    events = trace.events
    origin = float(events["ts_us"].min()) if len(events) else float(timeline["ts_us"].min())
    devices = sorted(timeline["device"].unique(), key=lambda d: (d == "cpu", d))
    return {str(d): _device_view(timeline[timeline["device"] == d].reset_index(drop=True), events, origin,
                                 f"{d} · rank {trace.rank}") for d in devices}


def cached_trace_memory_views(run_dir: str | os.PathLike[str], index: int) -> dict[str, TraceMemoryView]:
    """Per device (CUDA devices first, in order) of the ``index``-th trace of the run, its view;
    empty when the trace has no memory events. Shared, treat as read-only."""
    return _trace_memory_views(str(run_dir), run_signature(run_dir), index)


def _category_view(raw: pd.DataFrame) -> CategoryView:
    cats = compute_category_timeline(raw, max_points=CATEGORY_POINTS)
    if cats.empty:
        return CategoryView(spec=None)
    return CategoryView(spec=category_chart(cats), peak=compute_category_peak(cats))


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
