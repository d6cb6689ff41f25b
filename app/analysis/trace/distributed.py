"""Distributed view: per-rank steps, communication kernels, overlap, slowest rank (analysis layer).

- ``compute_communication_table``: per rank and collective kernel name (``nccl*``/``rccl*`` or
  launched by a collective op), calls and time;
- ``compute_overlap``: per (rank, step), as torch-tb-profiler's distributed view: ``computation_us``
  (kernel time, union), ``communication_us`` (collective kernels, union), ``overlap_us`` (both at
  once) and ``other_us`` = step − computation − communication + overlap;
- ``compute_rank_skew``: per step number, the slowest and fastest rank and the spread.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from app.analysis.trace.categories import communication_kernel_mask, is_kernel
from app.analysis.trace.intervals import covered_us, event_spans, merge_intervals
from app.analysis.trace.steps import compute_steps
from app.data.trace import TraceSet

__all__ = ["compute_communication_table", "compute_overlap", "compute_rank_skew"]


def compute_communication_table(traces: TraceSet) -> pd.DataFrame:
    """``rank``, ``name``, ``calls``, ``total_us``, ``mean_us`` of collective kernels, longest first."""
    frames = []
    for t in traces:
        ev = t.events
        sel = ev.loc[communication_kernel_mask(ev), ["name", "dur_us"]]
        frames.append(sel.assign(rank=t.rank, name=sel["name"].astype(str)))
    cols = ["rank", "name", "calls", "total_us", "mean_us"]
    ev = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if ev.empty:
        return pd.DataFrame(columns=cols)
    g = ev.groupby(["rank", "name"], sort=False)["dur_us"].agg(calls="size", total_us="sum").reset_index()
    g["mean_us"] = g["total_us"] / g["calls"]
    return g[cols].sort_values("total_us", ascending=False, ignore_index=True)


def compute_overlap(traces: TraceSet, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (rank, step): computation, communication, their overlap, and the rest (µs)."""
    rows = []
    for t in traces:
        st = compute_steps([t]) if steps is None else steps[steps["rank"] == t.rank]
        if st.empty:
            continue
        ev = t.events
        comm = communication_kernel_mask(ev)
        comp = is_kernel(ev) & ~comm
        cs, ce = merge_intervals(*event_spans(ev, comp))
        ms, me = merge_intervals(*event_spans(ev, comm))
        both_s, both_e = _intersect(cs, ce, ms, me)
        lo, hi = st["start_us"].to_numpy(float), st["end_us"].to_numpy(float)
        comp_us, comm_us = covered_us(cs, ce, lo, hi), covered_us(ms, me, lo, hi)
        over = covered_us(both_s, both_e, lo, hi)
        for step, d, a, b, o in zip(st["step"], hi - lo, comp_us, comm_us, over):
            rows.append({"rank": t.rank, "step": int(step), "duration_us": float(d), "computation_us": float(a),
                         "communication_us": float(b), "overlap_us": float(o), "other_us": float(d - a - b + o)})
    return pd.DataFrame(rows, columns=["rank", "step", "duration_us", "computation_us", "communication_us",
                                       "overlap_us", "other_us"])


def _intersect(a_s: np.ndarray, a_e: np.ndarray, b_s: np.ndarray, b_e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intersection of two disjoint sorted interval lists, in time order: for each interval of
    ``a`` the intervals of ``b`` that overlap it (a run of consecutive ones, found by binary
    search), without a Python step per interval."""
    a_s, a_e, b_s, b_e = (np.asarray(x, float) for x in (a_s, a_e, b_s, b_e))
    first = np.searchsorted(b_e, a_s, side="right")  # first b ending after a starts
    stop = np.maximum(np.searchsorted(b_s, a_e, side="left"), first)  # first b starting at or after a's end
    counts = stop - first
    i = np.repeat(np.arange(len(a_s)), counts)
    j = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(first, counts)
    lo, hi = np.maximum(a_s[i], b_s[j]), np.minimum(a_e[i], b_e[j])
    keep = lo < hi
    return lo[keep], hi[keep]


def compute_rank_skew(steps: pd.DataFrame) -> pd.DataFrame:
    """Per step number present on several ranks: slowest/fastest rank, their durations, spread."""
    cols = ["step", "ranks", "slowest_rank", "slowest_us", "fastest_rank", "fastest_us", "spread_us"]
    if steps.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for step, g in steps.groupby("step", sort=True):
        if g["rank"].nunique() < 2:
            continue
        slow = g.loc[g["duration_us"].idxmax()]
        fast = g.loc[g["duration_us"].idxmin()]
        rows.append({"step": int(step), "ranks": int(g["rank"].nunique()), "slowest_rank": int(slow["rank"]),
                     "slowest_us": float(slow["duration_us"]), "fastest_rank": int(fast["rank"]),
                     "fastest_us": float(fast["duration_us"]),
                     "spread_us": float(slow["duration_us"] - fast["duration_us"])})
    return pd.DataFrame(rows, columns=cols)
