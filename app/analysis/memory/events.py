"""Memory over time from the trace's ``[memory]`` events, and its peaks (analysis layer, pure).

``torch.profiler(profile_memory=True)`` records one ``[memory]`` instant event per allocation and
free with the allocator's totals after it (``Total Allocated``, ``Total Reserved``). The timeline
is those totals per device; the peak is their maximum, with the host ops running at that moment.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from app.analysis.trace.categories import is_host_op
from app.data.trace import TraceSet, TraceTables

__all__ = ["TIMELINE_COLUMNS", "PEAK_COLUMNS", "device_label", "compute_memory_timeline", "compute_memory_peaks"]

TIMELINE_COLUMNS = ["ts_us", "device", "allocated_bytes", "reserved_bytes", "bytes"]
PEAK_COLUMNS = ["rank", "device", "peak_allocated_bytes", "peak_reserved_bytes", "peak_ts_us", "ops_at_peak"]

# c10::DeviceType values that appear in traces.
_DEVICE_TYPES = {0: "cpu", 1: "cuda", 6: "hip", 12: "xpu", 13: "mps", 20: "privateuse1"}


def device_label(device_type: int | None, device_id: int | None) -> str:
    """``cpu``, ``cuda:0``, … from the event's ``Device Type`` and ``Device Id``."""
    kind = _DEVICE_TYPES.get(int(device_type), f"device{int(device_type)}") if device_type is not None else "unknown"
    if kind == "cpu" or device_id is None or int(device_id) < 0:
        return kind
    return f"{kind}:{int(device_id)}"


def compute_memory_timeline(trace: TraceTables) -> pd.DataFrame:
    """One row per ``[memory]`` event: ``ts_us``, ``device``, ``allocated_bytes``, ``reserved_bytes``, ``bytes``."""
    mem = trace.memory
    if mem is None or mem.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "device" else float) for c in TIMELINE_COLUMNS})
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
    return out.sort_values("ts_us", kind="stable", ignore_index=True)


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
    """Per (rank, device): peak allocated and reserved bytes, when, and the ops running then."""
    rows = []
    for t in traces:
        tl = compute_memory_timeline(t)
        for dev, g in tl.groupby("device", sort=True):
            alloc = g["allocated_bytes"]
            if alloc.notna().any():
                i = alloc.idxmax()
                peak_alloc, peak_ts = float(alloc[i]), float(g.at[i, "ts_us"])
            else:
                peak_alloc, peak_ts = 0.0, float("nan")
            res = g["reserved_bytes"]
            rows.append({"rank": t.rank, "device": dev, "peak_allocated_bytes": int(peak_alloc),
                         "peak_reserved_bytes": int(res.max()) if res.notna().any() else 0,
                         "peak_ts_us": peak_ts, "ops_at_peak": _ops_at(t, peak_ts) if peak_ts == peak_ts else ""})
    return pd.DataFrame(rows, columns=PEAK_COLUMNS)
