"""A run's profiler windows read from its manifest, and its trace analysis over the typical windows (workspace layer).

An anomaly-triggered window profiles steps because they were slow (app.analysis.trace.windows):
``analyze_run_traces`` keeps every profiled step in the step table but takes the breakdown, op
and kernel tables from the other windows' traces alone, when there are any. Each trace set is
analysed (and cached) on its own by app.workspace.traces.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from app.analysis.trace.summary import TraceAnalysis
from app.analysis.trace.windows import (
    ProfiledWindow,
    split_traces,
    windows_from_profiler,
    with_typical_tables,
)
from app.data.trace import TraceTables
from app.workspace.traces import analyze_trace_set
from profiler_agent import runformat as rf

__all__ = ["manifest_windows", "read_run_windows", "analyze_run_traces"]


def manifest_windows(manifest: rf.Manifest) -> tuple[ProfiledWindow, ...]:
    """The profiler windows with their reasons recorded in ``manifest`` (``profiler.windows``)."""
    extra = manifest.extra
    return windows_from_profiler(extra.get("profiler") if isinstance(extra, dict) else None)


def read_run_windows(path: str | os.PathLike[str]) -> tuple[ProfiledWindow, ...]:
    """The profiler windows recorded in the manifest of the run folder ``path``; () for a path that
    is not a run folder, or a manifest that cannot be read (the traces are then all typical)."""
    if not Path(path).is_dir() or not rf.is_run_dir(path):
        return ()
    try:
        return manifest_windows(rf.read_manifest(path))
    except rf.RunFormatError:
        return ()


def analyze_run_traces(traces: Sequence[TraceTables], windows: Sequence[ProfiledWindow], *,
                       use_cache: bool = True) -> TraceAnalysis:
    """The TraceAnalysis of ``traces``; with anomaly windows among ``windows`` (and traces of other
    windows), its breakdown, op and kernel tables come from the typical windows' traces only."""
    full = analyze_trace_set(traces, use_cache=use_cache)
    typical, anomalous = split_traces(list(traces), windows)
    if not anomalous:
        return full
    return with_typical_tables(full, analyze_trace_set(typical, use_cache=use_cache))
