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


def _device_links(ev: pd.DataFrame) -> pd.DataFrame:
    """Runtime calls with the span of the device events they launched (joined on correlation id)."""
    dc, ds, de = _with_corr(ev, is_device_activity(ev))
    rc, rs, re_ = _with_corr(ev, is_runtime(ev))
    if len(dc) == 0 or len(rc) == 0:
        return pd.DataFrame(columns=["rt_start", "rt_end", "dev_min", "dev_max", "n", "corr"])
    d = pd.DataFrame({"c": dc, "s": ds, "e": de}).groupby("c").agg(dev_min=("s", "min"), dev_max=("e", "max"),
                                                                   n=("s", "size"))
    r = pd.DataFrame({"c": rc, "rs": rs, "re": re_}).drop_duplicates("c")
    j = r.join(d, on="c", how="inner")
    return pd.DataFrame({"rt_start": j["rs"].to_numpy(float), "rt_end": j["re"].to_numpy(float),
                         "dev_min": j["dev_min"].to_numpy(float), "dev_max": j["dev_max"].to_numpy(float),
                         "n": j["n"].to_numpy(int), "corr": j["c"].to_numpy(np.int64)})


def _adjust_to_device(ev: pd.DataFrame, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Apply torch-tb-profiler's device-side step adjustment; return (start, end, steps kept)."""
    links = _device_links(ev)
    n_steps = len(start)
    if links.empty or n_steps == 0:
        return start, end, n_steps
    idx = np.searchsorted(start, links["rt_start"].to_numpy(), side="right") - 1
    inside = (idx >= 0) & (links["rt_end"].to_numpy() <= end[np.clip(idx, 0, None)])
    inside &= links["rt_start"].to_numpy() >= start[np.clip(idx, 0, None)]
    matched = links[inside].assign(step=idx[inside])
    if matched.empty:
        return start, end, n_steps
    per = matched.groupby("step").agg(dmin=("dev_min", "min"), dmax=("dev_max", "max"), n=("n", "sum"))
    dmin = np.full(n_steps, float(sys.maxsize))
    dmax = np.full(n_steps, -float(sys.maxsize))
    count = np.zeros(n_steps, int)
    dmin[per.index] = per["dmin"].to_numpy()
    dmax[per.index] = per["dmax"].to_numpy()
    count[per.index] = per["n"].to_numpy()
    prev_end = float(start[0])
    if count[0] > 0:  # device work launched before the first step and finished before its first kernel
        unmatched_end = _unmatched_device_ends(ev, matched)
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


def _unmatched_device_ends(ev: pd.DataFrame, matched: pd.DataFrame) -> np.ndarray:
    """Ends of device events not launched from inside any step."""
    dev = is_device_activity(ev)
    corr = ev["correlation"].to_numpy(dtype=np.int64, na_value=-1)[dev]
    ends = (ev["ts_us"].to_numpy(float) + ev["dur_us"].to_numpy(float))[dev]
    return np.asarray(ends[~np.isin(corr, matched["corr"].to_numpy(np.int64))], dtype=float)


def find_steps(events: pd.DataFrame) -> StepSpans:
    """Return the steps of one trace's events table (see the module docstring for the rules)."""
    events = events[["name", "cat", "ts_us", "dur_us", "correlation"]]  # filters below copy only these
    steps, hs, he, source = _host_steps(events)
    order = np.argsort(hs, kind="stable")
    steps, hs, he = steps[order], hs[order], he[order]
    s, e, keep = _adjust_to_device(events, hs, he)
    window = (float(np.min(hs)), float(np.max(he))) if source == StepSource.PROFILER_STEP and len(hs) else None
    dropped = float(np.sum(he[keep:] - hs[keep:])) if keep < len(hs) else 0.0
    return StepSpans(steps[:keep], hs[:keep], he[:keep], s[:keep], e[:keep], source, window, dropped)
