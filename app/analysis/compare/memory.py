"""Memory of two sides: timelines aligned by step, and top allocation differences (analysis layer).

Two runs' clocks have nothing in common, so timelines are put on a step axis: an event at time
t inside profiled step i (of that rank) gets x = i + (t - start_i) / (end_i - start_i), counting
steps from the first profiled one. Events outside every step are dropped.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from app.analysis.curves.smoothing import minmax_downsample_indices
from app.analysis.memory.events import compute_memory_timeline
from app.analysis.memory.snapshot import compute_largest_allocations
from app.data.trace import TraceSet

__all__ = ["ALIGNED_COLUMNS", "compute_step_aligned_memory", "diff_largest_allocations"]

ALIGNED_COLUMNS = ["step_pos", "device", "allocated_bytes", "reserved_bytes"]


def _align(tl: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    s = steps.sort_values("start_us")
    starts, ends = s["start_us"].to_numpy(float), s["end_us"].to_numpy(float)
    ts = tl["ts_us"].to_numpy(float)
    i = np.searchsorted(starts, ts, side="right") - 1
    ok = (i >= 0) & (ts <= ends[np.clip(i, 0, len(ends) - 1)])
    i, ts = i[ok], ts[ok]
    span = np.maximum(ends[i] - starts[i], 1e-9)
    out = tl.loc[ok, ["device", "allocated_bytes", "reserved_bytes"]].copy()
    out.insert(0, "step_pos", i + (ts - starts[i]) / span)
    return out


def compute_step_aligned_memory(traces: TraceSet, steps: pd.DataFrame, *, max_points: int = 4000) -> pd.DataFrame:
    """Allocator levels of the traces on a step axis (columns ALIGNED_COLUMNS), rank 0 only
    (or the lowest rank), at most ``max_points`` rows per device (min/max kept per bucket)."""
    if not traces or steps is None or len(steps) == 0 or not {"start_us", "end_us"} <= set(steps.columns):
        return pd.DataFrame(columns=ALIGNED_COLUMNS)
    trace = min(traces, key=lambda t: t.rank)
    tl = compute_memory_timeline(trace)
    own = steps[steps["rank"] == trace.rank] if "rank" in steps.columns else steps
    if len(tl) == 0 or len(own) == 0:
        return pd.DataFrame(columns=ALIGNED_COLUMNS)
    aligned = _align(tl, own)
    parts = []
    for _, g in aligned.groupby("device", sort=True):
        keep = minmax_downsample_indices(g["allocated_bytes"].to_numpy(float), max(4, max_points))
        parts.append(g.iloc[keep])
    return pd.concat(parts, ignore_index=True)[ALIGNED_COLUMNS] if parts else pd.DataFrame(columns=ALIGNED_COLUMNS)


def diff_largest_allocations(baseline: dict[str, Any], candidate: dict[str, Any], device: int = 0,
                             *, top: int = 50) -> pd.DataFrame:
    """Largest allocations of two allocator snapshots grouped by the user frame that made them:
    ``top_frame``, ``baseline_bytes``, ``candidate_bytes``, ``delta_bytes``, ``baseline_count``,
    ``candidate_count``; sorted by |delta_bytes| descending."""
    frames = []
    for label, snap in (("baseline", baseline), ("candidate", candidate)):
        big = compute_largest_allocations(snap, device, top=top)
        g = big.groupby("top_frame", sort=False)["size_bytes"].agg(["sum", "count"])
        frames.append(g.rename(columns={"sum": f"{label}_bytes", "count": f"{label}_count"}))
    out = pd.merge(frames[0], frames[1], how="outer", left_index=True, right_index=True).fillna(0)
    out = out.astype("int64").reset_index()
    out["delta_bytes"] = out["candidate_bytes"] - out["baseline_bytes"]
    out = out.iloc[np.lexsort((out["top_frame"].astype(str).to_numpy(), -out["delta_bytes"].abs().to_numpy()))]
    return out[["top_frame", "baseline_bytes", "candidate_bytes", "delta_bytes", "baseline_count",
                "candidate_count"]].reset_index(drop=True)
