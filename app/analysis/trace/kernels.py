"""Device kernels, copies and utilisation (analysis layer, pure).

- ``compute_kernel_table``: per kernel name, calls / total / mean / min / max and ``share`` of
  all kernel time;
- ``compute_memcpy_table``: per copy kind (``Memcpy HtoD …``, ``Memset …``), calls, time and bytes;
- ``compute_temporal_breakdown``: HTA's temporal breakdown (whole GPU timeline: compute,
  non-compute, idle), computed the same way so the two can be checked against each other;
- ``compute_device_utilization``: per step, the time at least one kernel runs on a device
  (``busy_us``, union over streams), ``idle_us`` = step duration − busy, and ``utilization``.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from app.analysis.trace.categories import (
    MEMCPY_CATS,
    MEMSET_CATS,
    cat_in,
    communication_kernel_mask,
    is_kernel,
    is_runtime,
)
from app.analysis.trace.intervals import covered_us, event_spans, merge_intervals
from app.analysis.trace.step_spans import StepSource, find_steps
from app.analysis.trace.steps import compute_steps
from app.data.trace import TraceSet

__all__ = ["KERNEL_COLUMNS", "compute_kernel_table", "compute_memcpy_table", "compute_device_utilization",
           "compute_temporal_breakdown"]

KERNEL_COLUMNS = ["name", "calls", "total_us", "mean_us", "min_us", "max_us", "share"]


def compute_kernel_table(traces: TraceSet) -> pd.DataFrame:
    """One row per kernel name over all traces, sorted by ``total_us`` descending."""
    frames = [t.events.loc[is_kernel(t.events), ["name", "dur_us"]] for t in traces]
    ev = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["name", "dur_us"])
    if ev.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "name" else float) for c in KERNEL_COLUMNS})
    # grouped on the categorical codes; only the grouped names become text
    g = ev.groupby("name", sort=False, observed=True)["dur_us"].agg(calls="size", total_us="sum", min_us="min",
                                                                    max_us="max").reset_index()
    g["name"] = g["name"].astype(str)
    g["mean_us"] = g["total_us"] / g["calls"]
    total = float(g["total_us"].sum())
    g["share"] = g["total_us"] / total if total > 0 else 0.0
    g["calls"] = g["calls"].astype(int)
    return g[KERNEL_COLUMNS].sort_values(["total_us", "name"], ascending=[False, True], ignore_index=True)


def compute_memcpy_table(traces: TraceSet) -> pd.DataFrame:
    """Per copy/set kind: ``name``, ``kind`` (memcpy|memset), ``calls``, ``total_us``, ``bytes``, ``gb_per_s``."""
    frames = []
    for t in traces:
        ev = t.events
        for kind, cats in (("memcpy", MEMCPY_CATS), ("memset", MEMSET_CATS)):
            sel = ev.loc[cat_in(ev, cats), ["name", "dur_us", "bytes"]]
            frames.append(sel.assign(kind=kind))
    cols = ["name", "kind", "calls", "total_us", "bytes", "gb_per_s"]
    ev = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if ev.empty:
        return pd.DataFrame(columns=cols)
    ev["name"] = ev["name"].astype(str)
    ev["bytes"] = ev["bytes"].astype("Float64").fillna(0).astype(float)
    g = ev.groupby(["name", "kind"], sort=False).agg(calls=("dur_us", "size"), total_us=("dur_us", "sum"),
                                                      bytes=("bytes", "sum")).reset_index()
    g["gb_per_s"] = np.where(g["total_us"] > 0, g["bytes"] / (g["total_us"] * 1e3), 0.0)
    return g[cols].sort_values("total_us", ascending=False, ignore_index=True)


def compute_device_utilization(traces: TraceSet, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (rank, step, device): ``busy_us`` (kernels running), ``idle_us``, ``utilization`` (0..1)."""
    rows = []
    for t in traces:
        st = compute_steps([t]) if steps is None else steps[steps["rank"] == t.rank]
        ev = t.events
        kern = is_kernel(ev)
        if st.empty or not kern.any():
            continue
        dev = ev.loc[kern, "device"].astype("Float64").fillna(-1).astype(int).to_numpy()
        s, e = event_spans(ev, kern)
        lo, hi = st["start_us"].to_numpy(float), st["end_us"].to_numpy(float)
        for d in np.unique(dev):
            ms, me = merge_intervals(s[dev == d], e[dev == d])
            busy = covered_us(ms, me, lo, hi)
            dur = hi - lo
            for step, b, du in zip(st["step"], busy, dur):
                rows.append({"rank": t.rank, "step": int(step), "device": int(d), "busy_us": float(b),
                             "idle_us": float(du - b), "utilization": float(b / du) if du > 0 else 0.0})
    return pd.DataFrame(rows, columns=["rank", "step", "device", "busy_us", "idle_us", "utilization"])


def _launched_in(ev: pd.DataFrame, lo: float, hi: float) -> np.ndarray:
    """Mask of events whose launching runtime call (same correlation id) starts in [lo, hi)."""
    rt = ev[is_runtime(ev) & ev["correlation"].notna().to_numpy()].drop_duplicates("correlation")
    start = pd.Series(rt["ts_us"].to_numpy(float), index=rt["correlation"].to_numpy(dtype=np.int64))
    corr = ev["correlation"].to_numpy(dtype=np.int64, na_value=-1)
    launch = start.reindex(corr).to_numpy(float)
    return np.asarray((launch >= lo) & (launch < hi), dtype=bool)


def compute_temporal_breakdown(traces: TraceSet, *, drop_last_step: bool = True,
                               launched_only: bool = False) -> pd.DataFrame:
    """Per rank, as HTA's ``get_temporal_breakdown``: ``span_us`` (first device event start to last
    end), ``compute_us`` (union of non-collective kernels), ``non_compute_us`` (collectives and
    memcpy/memset not under a compute kernel), ``idle_us`` (nothing running), and their shares.

    HTA leaves out the device work launched in the last ProfilerStep (``drop_last_step``), and
    with it every device event whose launch is not recorded; ``launched_only=True`` leaves those
    out too, to reproduce HTA's figures (docs/trace-engine.md, "Comparison with HTA"). By default
    they count: they are device time.
    """
    rows = []
    for t in traces:
        ev = t.events
        work = is_kernel(ev) | cat_in(ev, MEMCPY_CATS | MEMSET_CATS)
        if launched_only:
            work &= _launched_in(ev, -np.inf, np.inf)
        spans = find_steps(ev)
        if drop_last_step and spans.source == StepSource.PROFILER_STEP and len(spans.steps) > 1:
            work &= ~_launched_in(ev, float(spans.host_start[-1]), float(spans.host_end[-1]))
        if not work.any():
            continue
        compute = work & is_kernel(ev) & ~communication_kernel_mask(ev)
        s, e = event_spans(ev, work)
        lo, hi = np.array([s.min()]), np.array([e.max()])
        busy = float(covered_us(*merge_intervals(s, e), lo, hi)[0])
        comp = float(covered_us(*merge_intervals(*event_spans(ev, compute)), lo, hi)[0])
        span = float(hi[0] - lo[0])
        rows.append({"rank": t.rank, "span_us": span, "compute_us": comp, "non_compute_us": busy - comp,
                     "idle_us": span - busy, "compute_share": comp / span if span else 0.0,
                     "non_compute_share": (busy - comp) / span if span else 0.0,
                     "idle_share": (span - busy) / span if span else 0.0})
    return pd.DataFrame(rows, columns=["rank", "span_us", "compute_us", "non_compute_us", "idle_us",
                                       "compute_share", "non_compute_share", "idle_share"])
