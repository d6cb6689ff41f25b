"""Training steps of a trace: their numbers and host/device spans (analysis layer, pure).

Step boundaries follow torch-tb-profiler's Overview (``event_parser.StepParser``):

1. host steps are the ``ProfilerStep#N`` spans (cat ``cpu_op``/``user_annotation``); when a trace
   has none, the spans between consecutive ``Optimizer.step#…`` ends; when it has neither, one
   step covering every host op;
2. when device work (kernels, memcpy, memset) is linked to a runtime call made inside a host step,
   each step is stretched to end when the last such device event ends, and starts no earlier than
   the previous step's end (device time is what a step really costs);
3. trailing steps that launched no device work (or < 80 % of the previous step's) are dropped,
   because the profiler stopped before their kernels were recorded. They are dropped from the
   step breakdown only: ``profiled_host`` keeps the host span of every ``ProfilerStep#N``, the
   window a single run's op table covers (as ``key_averages()`` does).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import pandas as pd

from app.analysis.trace.categories import is_device_activity, is_host_op, is_runtime, name_mask
from app.analysis.trace.table_memo import last_table

__all__ = ["StepSource", "StepSpans", "find_steps"]


class StepSource(StrEnum):
    """Where a trace's steps came from (rule 1 of the module docstring)."""

    PROFILER_STEP = "profiler_step"
    OPTIMIZER_STEP = "optimizer_step"
    WHOLE_TRACE = "whole_trace"
    NONE = "none"


@dataclass(frozen=True)
class StepSpans:
    """Step numbers, host spans and device-adjusted spans (µs), and where the steps came from."""

    steps: np.ndarray  # int step numbers
    host_start: np.ndarray
    host_end: np.ndarray
    start: np.ndarray
    end: np.ndarray
    source: StepSource
    # (first start, last end) of every ProfilerStep#N host span, dropped trailing steps included;
    # None for optimizer-step or whole-trace steps (no profiling window).
    profiled_host: tuple[float, float] | None = None
    # summed host duration of the dropped trailing steps (µs), 0 when none was dropped
    dropped_host_us: float = 0.0


def _host_steps(ev: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, StepSource]:
    host = ev[is_host_op(ev)]
    is_prof = name_mask(host, lambda n: n.startswith("ProfilerStep#"))
    prof = host[is_prof]
    if len(prof):
        prof = prof.assign(step=pd.to_numeric(prof["name"].astype(str).str.split("#").str[1], errors="coerce"))
        prof = prof.dropna(subset=["step"]).drop_duplicates(subset=["step"]).sort_values("ts_us")
        if len(prof):
            s = prof["ts_us"].to_numpy(float)
            return prof["step"].to_numpy(int), s, s + prof["dur_us"].to_numpy(float), StepSource.PROFILER_STEP
    opt = host[name_mask(host, lambda n: n.startswith("Optimizer.step#"))].sort_values("ts_us")
    ops = host[~is_prof]
    if len(opt) and len(ops):
        ends = (opt["ts_us"] + opt["dur_us"]).to_numpy(float)
        starts = np.concatenate([[float(ops["ts_us"].min())], ends[:-1]])
        return np.arange(len(ends)), starts, ends, StepSource.OPTIMIZER_STEP
    if len(ops):
        lo = float(ops["ts_us"].min())
        hi = float((ops["ts_us"] + ops["dur_us"]).max())
        return np.array([0]), np.array([lo]), np.array([hi]), StepSource.WHOLE_TRACE
    return np.array([], int), np.array([]), np.array([]), StepSource.NONE


def _with_corr(ev: pd.DataFrame, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(correlation, start, end) numpy arrays of the masked events that have a correlation id."""
    corr = ev["correlation"]
    has = corr.notna().to_numpy() & mask
    c = corr.to_numpy(dtype=np.int64, na_value=-1)[has]
    s = ev["ts_us"].to_numpy(float)[has]
    return c, s, s + ev["dur_us"].to_numpy(float)[has]


@dataclass(frozen=True)
class _Links:
    """Runtime calls (first one per correlation id, in event order) joined with the span and count
    of the device events they launched."""

    rt_start: np.ndarray
    rt_end: np.ndarray
    dev_min: np.ndarray
    dev_max: np.ndarray
    n: np.ndarray
    corr: np.ndarray


def _group_min_max(inv: np.ndarray, size: int, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per group (``inv`` indexes groups), the min of ``lo`` and the max of ``hi``, skipping NaN
    as pandas does (NaN only where a group has nothing else)."""
    mn, mx = np.full(size, np.nan), np.full(size, np.nan)
    np.fmin.at(mn, inv, lo)
    np.fmax.at(mx, inv, hi)
    return mn, mx


def _device_links(ev: pd.DataFrame) -> _Links:
    """Runtime calls with the span of the device events they launched (joined on correlation id).

    numpy only: this runs once per trace and rank, and pandas' groupby/join cost more than the
    work on a small trace."""
    dc, ds, de = _with_corr(ev, is_device_activity(ev))
    rc, rs, re_ = _with_corr(ev, is_runtime(ev))
    if len(dc) == 0 or len(rc) == 0:
        e = np.array([])
        return _Links(e, e, e, e, np.array([], int), np.array([], np.int64))
    keys, inv = np.unique(dc, return_inverse=True)
    dmin, dmax = _group_min_max(inv, len(keys), ds, de)
    count = np.bincount(inv, minlength=len(keys))
    first = np.sort(np.unique(rc, return_index=True)[1])  # drop duplicate runtime correlations, keep the first
    rc, rs, re_ = rc[first], rs[first], re_[first]
    pos = np.clip(np.searchsorted(keys, rc), 0, len(keys) - 1)
    hit = keys[pos] == rc
    pos = pos[hit]
    return _Links(rs[hit], re_[hit], dmin[pos], dmax[pos], count[pos].astype(int), rc[hit])


def _adjust_to_device(ev: pd.DataFrame, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Apply torch-tb-profiler's device-side step adjustment; return (start, end, steps kept)."""
    links = _device_links(ev)
    n_steps = len(start)
    if len(links.corr) == 0 or n_steps == 0:
        return start, end, n_steps
    idx = np.searchsorted(start, links.rt_start, side="right") - 1
    inside = (idx >= 0) & (links.rt_end <= end[np.clip(idx, 0, None)])
    inside &= links.rt_start >= start[np.clip(idx, 0, None)]
    if not inside.any():
        return start, end, n_steps
    step = idx[inside]
    dmin = np.full(n_steps, float(sys.maxsize))
    dmax = np.full(n_steps, -float(sys.maxsize))
    count = np.zeros(n_steps, int)
    present = np.unique(step)
    mn, mx = _group_min_max(step, n_steps, links.dev_min[inside], links.dev_max[inside])
    dmin[present], dmax[present] = mn[present], mx[present]
    np.add.at(count, step, links.n[inside])
    prev_end = float(start[0])
    if count[0] > 0:  # device work launched before the first step and finished before its first kernel
        unmatched_end = _unmatched_device_ends(ev, links.corr[inside])
        before = unmatched_end[unmatched_end < dmin[0]]
        if len(before):
            prev_end = max(prev_end, float(before.max()))
    new_start, new_end = start.copy(), end.copy()
    for i in range(n_steps):
        s = max(prev_end, start[i])
        e = max(end[i], s) if count[i] == 0 else max(max(end[i], dmax[i]), s)
        new_start[i], new_end[i] = s, e
        prev_end = e
    keep = n_steps
    if n_steps > 1:
        last = np.nonzero(count > 0)[0]
        if len(last):
            i = int(last[-1])
            keep = i + 1
            if i > 0 and count[i - 1] * 0.8 > count[i]:
                keep = i
    return new_start, new_end, keep


def _unmatched_device_ends(ev: pd.DataFrame, matched_corr: np.ndarray) -> np.ndarray:
    """Ends of device events not launched from inside any step."""
    dev = is_device_activity(ev)
    corr = ev["correlation"].to_numpy(dtype=np.int64, na_value=-1)[dev]
    ends = (ev["ts_us"].to_numpy(float) + ev["dur_us"].to_numpy(float))[dev]
    return np.asarray(ends[~np.isin(corr, matched_corr)], dtype=float)


@last_table  # the step table, the op table's window and the collectives each ask (~40 ms each at 374,000 events)
def find_steps(events: pd.DataFrame) -> StepSpans:
    """Return the steps of one trace's events table (see the module docstring for the rules).
    Read-only arrays: the callers of one table share them (table_memo)."""
    spans = _find_steps(events)
    for a in (spans.steps, spans.host_start, spans.host_end, spans.start, spans.end):
        a.flags.writeable = False
    return spans


def _find_steps(events: pd.DataFrame) -> StepSpans:
    events = events[["name", "cat", "ts_us", "dur_us", "correlation"]]  # filters below copy only these
    steps, hs, he, source = _host_steps(events)
    order = np.argsort(hs, kind="stable")
    steps, hs, he = steps[order], hs[order], he[order]
    s, e, keep = _adjust_to_device(events, hs, he)
    window = (float(np.min(hs)), float(np.max(he))) if source == StepSource.PROFILER_STEP and len(hs) else None
    dropped = float(np.sum(he[keep:] - hs[keep:])) if keep < len(hs) else 0.0
    return StepSpans(steps[:keep], hs[:keep], he[:keep], s[:keep], e[:keep], source, window, dropped)
