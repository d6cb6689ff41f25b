"""Memory over time from the trace's ``[memory]`` events, and its peaks (analysis layer, pure).

``torch.profiler(profile_memory=True)`` records one ``[memory]`` instant event per allocation and
free with the allocator's totals after it (``Total Allocated``, ``Total Reserved``). The timeline
is those totals per device; the peak is their maximum, with the host ops running at that moment.

Some traces carry only each event's ``Bytes`` delta (no totals). The timeline's
``allocated_bytes`` is then the running sum of the deltas per device (``estimated`` is True), and
the peak its maximum (``peak_source`` ``running_sum``): memory allocated before the profiler
started is not in it, so it is the growth over the trace, a lower bound of the allocator's peak.
Without totals or deltas the peak is unknown (NaN, ``peak_source`` ``unknown``), never 0.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from app.analysis.trace.categories import is_host_op
from app.data.trace import TraceSet, TraceTables

__all__ = ["TIMELINE_COLUMNS", "PEAK_COLUMNS", "PEAK_SOURCES", "device_label", "compute_memory_timeline", "compute_memory_peaks"]

TIMELINE_COLUMNS = ["ts_us", "device", "allocated_bytes", "reserved_bytes", "bytes", "estimated"]
PEAK_COLUMNS = ["rank", "device", "peak_allocated_bytes", "peak_reserved_bytes", "peak_ts_us", "ops_at_peak",
                "peak_source"]
# peak_source values: the allocator's totals, the running sum of Bytes deltas, or unknown
PEAK_SOURCES = ("allocator", "running_sum", "unknown")

# c10::DeviceType values that appear in traces.
_DEVICE_TYPES = {0: "cpu", 1: "cuda", 6: "hip", 12: "xpu", 13: "mps", 20: "privateuse1"}


def device_label(device_type: int | None, device_id: int | None) -> str:
    """``cpu``, ``cuda:0``, … from the event's ``Device Type`` and ``Device Id``."""
    kind = _DEVICE_TYPES.get(int(device_type), f"device{int(device_type)}") if device_type is not None else "unknown"
    if kind == "cpu" or device_id is None or int(device_id) < 0:
        return kind
    return f"{kind}:{int(device_id)}"


def compute_memory_timeline(trace: TraceTables) -> pd.DataFrame:
    """One row per ``[memory]`` event: ``ts_us``, ``device``, ``allocated_bytes``, ``reserved_bytes``,
    ``bytes``, ``estimated`` (allocated_bytes is the running sum of the deltas: module docstring)."""
    mem = trace.memory
    if mem is None or mem.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "device" else bool if c == "estimated" else float)
                             for c in TIMELINE_COLUMNS})
    types = mem["device_type"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)
    ids = mem["device_id"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)
    memo: dict[tuple[float, float], str] = {}
    labels = []
    for a, b in zip(types, ids):
        key = (a, b)
        if key not in memo:
            memo[key] = device_label(None if np.isnan(a) else int(a), None if np.isnan(b) else int(b))
        labels.append(memo[key])
    out = pd.DataFrame({
        "ts_us": mem["ts_us"].to_numpy(float),
        "device": labels,
        "allocated_bytes": mem["total_allocated_bytes"].astype("Float64").to_numpy(dtype=float, na_value=np.nan),
        "reserved_bytes": mem["total_reserved_bytes"].astype("Float64").to_numpy(dtype=float, na_value=np.nan),
        "bytes": mem["bytes"].astype("Float64").to_numpy(dtype=float, na_value=0.0),
    })
    out = out.sort_values("ts_us", kind="stable", ignore_index=True)
    return _running_sums(out)


def _running_sums(tl: pd.DataFrame) -> pd.DataFrame:
    """Fill ``allocated_bytes`` of devices without allocator totals with the running sum of the deltas."""
    estimated = np.zeros(len(tl), bool)
    alloc = tl["allocated_bytes"].to_numpy(float).copy()
    for idx in tl.groupby("device", sort=False).indices.values():
        if np.isnan(alloc[idx]).all() and (tl["bytes"].to_numpy(float)[idx] != 0).any():
            alloc[idx] = np.cumsum(tl["bytes"].to_numpy(float)[idx])
            estimated[idx] = True
    return tl.assign(allocated_bytes=alloc, estimated=estimated)


def _ops_at(trace: TraceTables, ts: float) -> str:
    """Host ops (outermost → innermost) running at ``ts`` on the thread with the deepest stack."""
    ev = trace.events
    host = ev[is_host_op(ev)]
    live = host[(host["ts_us"] <= ts) & (host["ts_us"] + host["dur_us"] >= ts)]
    if live.empty:
        return ""
    tid = live.groupby("tid", observed=True).size().idxmax()
    names = live[live["tid"] == tid].sort_values("ts_us")["name"].astype(str)
    return " > ".join(n for n in names if not n.startswith("ProfilerStep#")) or " > ".join(names)


def compute_memory_peaks(traces: TraceSet) -> pd.DataFrame:
    """Per (rank, device): peak allocated and reserved bytes (NaN when unknown), when, the ops
    running then, and ``peak_source`` (PEAK_SOURCES; module docstring)."""
    rows = []
    for t in traces:
        tl = compute_memory_timeline(t)
        for dev, g in tl.groupby("device", sort=True):
            alloc = g["allocated_bytes"]
            source = "running_sum" if bool(g["estimated"].any()) else "allocator"
            if alloc.notna().any() and not (source == "running_sum" and float(alloc.max()) <= 0):
                i = alloc.idxmax()
                peak_alloc, peak_ts = float(alloc[i]), float(g.at[i, "ts_us"])
            else:
                peak_alloc, peak_ts, source = float("nan"), float("nan"), "unknown"
            res = g["reserved_bytes"]
            rows.append({"rank": t.rank, "device": dev, "peak_allocated_bytes": peak_alloc,
                         "peak_reserved_bytes": float(res.max()) if res.notna().any() else float("nan"),
                         "peak_ts_us": peak_ts, "ops_at_peak": _ops_at(t, peak_ts) if peak_ts == peak_ts else "",
                         "peak_source": source})
    return pd.DataFrame(rows, columns=PEAK_COLUMNS)
