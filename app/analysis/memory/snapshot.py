"""Memory tables beyond the trace engine's totals: CUDA allocator snapshots, memory categories,
and the largest allocations of a profiler trace with the ops that made them (analysis layer).

Snapshot input is the plain dict of ``app.data.snapshot.load_snapshot`` (torch's
``_dump_snapshot`` format: ``segments`` with ``blocks``, and ``device_traces[device]`` entries
with ``action``, ``addr``, ``size``, ``frames``, optionally ``time_us``). Category input is
``app.data.snapshot.load_memory_timeline_raw``.

The device trace is a ring buffer: memory allocated before its first entry shows up only in
``segments``. Timelines therefore start from a baseline chosen so that the last point equals
the memory the snapshot's segments hold at the end (as torch's MemoryViz does).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from app.analysis.curves.smoothing import minmax_downsample_indices
from app.analysis.memory.events import device_label
from app.analysis.trace.timeline import host_ops

__all__ = [
    "SNAPSHOT_TIMELINE_COLUMNS",
    "window_positions",
    "ALLOCATION_COLUMNS",
    "snapshot_devices",
    "compute_segment_summary",
    "compute_snapshot_timeline",
    "compute_largest_allocations",
    "compute_oom_events",
    "format_frames",
    "compute_category_timeline",
    "compute_category_peak",
    "TRACE_ALLOCATION_COLUMNS",
    "compute_trace_allocations",
]

SNAPSHOT_TIMELINE_COLUMNS = ["event", "time_us", "action", "addr", "size_bytes", "allocated_bytes",
                             "reserved_bytes"]
ALLOCATION_COLUMNS = ["size_bytes", "addr", "alive_at_end", "alloc_event", "free_event", "top_frame", "stack"]

# Frames of the allocator, the interpreter and the dispatcher say nothing about the user's
# code (same filter as torch/cuda/_memory_viz.py).
_OMIT_FUNCTIONS = ("unwind::unwind", "CapturedTraceback::gather", "gather_with_cpp", "_start",
                   "__libc_start_main", "PyEval_", "PyObject_", "PyFunction_")
_OMIT_FILES = ("core/boxing", "/Register", "/Redispatch", "pythonrun.c", "Modules/main.c", "Objects/call.c",
               "Objects/methodobject.c", "pycore_ceval.h", "ceval.c", "cpython/abstract.h")
_INTERNAL_FILES = ("/torch/", "/site-packages/", "/dist-packages/", "<frozen", "/lib/python3")


def _traces(snapshot: dict[str, Any]) -> list[list[dict[str, Any]]]:
    return [t for t in snapshot.get("device_traces", []) if isinstance(t, list)]


def snapshot_devices(snapshot: dict[str, Any]) -> list[int]:
    """Return the device indexes that have segments or trace entries, sorted."""
    devices = {int(seg.get("device", 0)) for seg in snapshot.get("segments", [])}
    devices |= {i for i, t in enumerate(_traces(snapshot)) if t}
    return sorted(devices)


def compute_segment_summary(snapshot: dict[str, Any]) -> pd.DataFrame:
    """Return one row per device: ``segments``, ``reserved_bytes`` (cudaMalloc'd),
    ``allocated_bytes`` (blocks in use by tensors), ``active_bytes`` (in use or awaiting a
    cross-stream free), ``cached_free_bytes`` (reserved but inactive), ``largest_free_block_bytes``."""
    rows: dict[int, dict[str, int]] = {}
    for seg in snapshot.get("segments", []):
        dev = int(seg.get("device", 0))
        r = rows.setdefault(dev, {"segments": 0, "reserved_bytes": 0, "allocated_bytes": 0, "active_bytes": 0,
                                  "cached_free_bytes": 0, "largest_free_block_bytes": 0})
        r["segments"] += 1
        r["reserved_bytes"] += int(seg.get("total_size", 0))
        for b in seg.get("blocks", []):
            size, state = int(b.get("size", 0)), b.get("state")
            if state == "active_allocated":
                r["allocated_bytes"] += size
            if state in ("active_allocated", "active_awaiting_free"):
                r["active_bytes"] += size
            if state == "inactive":
                r["cached_free_bytes"] += size
                r["largest_free_block_bytes"] = max(r["largest_free_block_bytes"], size)
    frame = pd.DataFrame.from_dict(rows, orient="index").rename_axis("device").reset_index()
    return frame if len(frame) else pd.DataFrame(columns=["device", "segments", "reserved_bytes",
                                                          "allocated_bytes", "active_bytes", "cached_free_bytes",
                                                          "largest_free_block_bytes"])


def _end_state(snapshot: dict[str, Any], device: int) -> tuple[int, int]:
    """(active bytes, reserved bytes) of the device's segments at snapshot time."""
    active = reserved = 0
    for seg in snapshot.get("segments", []):
        if int(seg.get("device", 0)) != device:
            continue
        reserved += int(seg.get("total_size", 0))
        active += sum(int(b.get("size", 0)) for b in seg.get("blocks", [])
                      if b.get("state") in ("active_allocated", "active_awaiting_free"))
    return active, reserved


_ALLOC_DELTA = {"alloc": 1, "free_completed": -1}
_SEGMENT_DELTA = {"segment_alloc": 1, "segment_free": -1, "segment_map": 1, "segment_unmap": -1}


def compute_snapshot_timeline(snapshot: dict[str, Any], device: int) -> pd.DataFrame:
    """Return one row per trace entry of ``device`` with the memory after it.

    ``allocated_bytes`` rises at ``alloc`` and falls at ``free_completed`` (the block is
    reusable); ``reserved_bytes`` follows ``segment_alloc``/``segment_free``. ``time_us`` is the
    entry's timestamp when torch recorded one, else NaN (the x-axis is then the event number).
    Empty when the snapshot was taken without ``_record_memory_history``.
    """
    traces = _traces(snapshot)
    entries = traces[device] if device < len(traces) else []
    if not entries:
        return pd.DataFrame(columns=SNAPSHOT_TIMELINE_COLUMNS)
    action = [str(e.get("action", "")) for e in entries]
    size = np.array([int(e.get("size", 0) or 0) for e in entries], dtype=np.int64)
    alloc_delta = np.array([_ALLOC_DELTA.get(a, 0) for a in action], dtype=np.int64) * size
    seg_delta = np.array([_SEGMENT_DELTA.get(a, 0) for a in action], dtype=np.int64) * size
    end_active, end_reserved = _end_state(snapshot, device)
    allocated = np.cumsum(alloc_delta)
    reserved = np.cumsum(seg_delta)
    allocated += max(0, end_active - int(allocated[-1]))
    reserved += max(0, end_reserved - int(reserved[-1]))
    times = [e.get("time_us") for e in entries]
    return pd.DataFrame({
        "event": np.arange(len(entries)),
        "time_us": pd.to_numeric(pd.Series(times, dtype=object), errors="coerce").astype(np.float64),
        "action": action,
        "addr": pd.array([e.get("addr") for e in entries], dtype="Int64"),
        "size_bytes": size,
        "allocated_bytes": allocated,
        "reserved_bytes": np.maximum(reserved, allocated),
    })[SNAPSHOT_TIMELINE_COLUMNS]


def compute_oom_events(snapshot: dict[str, Any], device: int) -> pd.DataFrame:
    """Return the out-of-memory errors the allocator recorded on ``device``: ``event`` (trace
    entry number), ``requested_bytes`` and ``device_free_bytes`` (what CUDA still reported free),
    ``top_frame`` (the user's line that asked)."""
    traces = _traces(snapshot)
    rows = []
    for i, e in enumerate(traces[device] if device < len(traces) else []):
        if e.get("action") == "oom":
            top, _ = format_frames(e.get("frames") or [])
            rows.append({"event": i, "requested_bytes": int(e.get("size", 0) or 0),
                         "device_free_bytes": int(e.get("device_free", 0) or 0), "top_frame": top})
    return pd.DataFrame(rows, columns=["event", "requested_bytes", "device_free_bytes", "top_frame"])


def _keep_frame(frame: dict[str, Any]) -> bool:
    name, filename = str(frame.get("name", "")), str(frame.get("filename", ""))
    return not any(o in name for o in _OMIT_FUNCTIONS) and not any(o in filename for o in _OMIT_FILES)


def format_frames(frames: list[dict[str, Any]], *, limit: int = 12) -> tuple[str, str]:
    """Return (top frame, stack text) of an allocation's frames, innermost first.

    The top frame is the innermost Python frame outside torch and site-packages (the user's
    line that caused the allocation), else the innermost kept frame; the stack lists at most
    ``limit`` kept frames as ``file:line:function``.
    """
    kept = [f for f in frames if isinstance(f, dict) and _keep_frame(f)]
    if not kept:
        return "", ""

    def fmt(f: dict[str, Any]) -> str:
        return f"{str(f.get('filename', '?')).rsplit('/', 1)[-1]}:{f.get('line', '?')}:{f.get('name', '?')}"

    user = [f for f in kept if str(f.get("filename", "")).endswith(".py")
            and not any(s in str(f.get("filename", "")) for s in _INTERNAL_FILES)]
    top = fmt(user[0]) if user else fmt(kept[0])
    return top, "\n".join(fmt(f) for f in kept[:limit])


def compute_largest_allocations(snapshot: dict[str, Any], device: int, *, top: int = 20) -> pd.DataFrame:
    """Return the ``top`` largest allocations of ``device``, largest first (ALLOCATION_COLUMNS).

    Allocations come from the device trace (``alloc`` paired with the next ``free_completed``
    at the same address) and from the active blocks still in the segments (``alive_at_end``).
    ``alloc_event``/``free_event`` are trace entry numbers (-1 when outside the trace).
    """
    rows: list[dict[str, Any]] = []
    traces = _traces(snapshot)
    open_at: dict[int, int] = {}
    for i, e in enumerate(traces[device] if device < len(traces) else []):
        act, addr = e.get("action"), e.get("addr")
        if act == "alloc" and addr is not None:
            open_at[int(addr)] = len(rows)
            rows.append({"size_bytes": int(e.get("size", 0)), "addr": int(addr), "alive_at_end": True,
                         "alloc_event": i, "free_event": -1, "frames": e.get("frames", [])})
        elif act == "free_completed" and addr is not None and int(addr) in open_at:
            r = rows[open_at.pop(int(addr))]
            r["alive_at_end"], r["free_event"] = False, i
    for seg in snapshot.get("segments", []):
        if int(seg.get("device", 0)) != device:
            continue
        addr = int(seg.get("address", 0))
        for b in seg.get("blocks", []):
            b_addr = int(b.get("address", addr))
            if b.get("state") == "active_allocated" and b_addr not in open_at:
                rows.append({"size_bytes": int(b.get("requested_size", b.get("size", 0))), "addr": b_addr,
                             "alive_at_end": True, "alloc_event": -1, "free_event": -1,
                             "frames": b.get("frames", [])})
            addr = b_addr + int(b.get("size", 0))
    if not rows:
        return pd.DataFrame(columns=ALLOCATION_COLUMNS)
    frame = pd.DataFrame(rows).nlargest(top, "size_bytes", keep="first")
    formatted = [format_frames(f if isinstance(f, list) else []) for f in frame["frames"]]
    frame["top_frame"] = [t for t, _ in formatted]
    frame["stack"] = [s for _, s in formatted]
    return frame[ALLOCATION_COLUMNS].reset_index(drop=True)


def compute_category_timeline(raw: pd.DataFrame, *, max_points: int = 4000,
                              window_ms: tuple[float, float] | None = None) -> pd.DataFrame:
    """Return memory held per category over time from a raw memory timeline.

    One row per distinct timestamp (at most ``max_points``, picked so that the peaks of the
    total survive): ``ts_ns``, ``time_ms`` (since the first timestamped record), one
    ``<category>_bytes`` column per category that appears, and ``total_bytes``. Preexisting
    memory (time -1) is counted from the first point on. With ``window_ms`` (first, last ms) only
    the timestamps in it are kept, plus the last one before it (what was held when the window
    opens), before the ``max_points`` are picked: a zoomed chart at full detail.
    """
    if raw.empty:
        return pd.DataFrame(columns=["ts_ns", "time_ms", "total_bytes"])
    ts_raw = raw["ts_ns"].to_numpy(np.int64)
    timed = ts_raw >= 0  # int64 throughout: float64 would round nanosecond timestamps
    first = int(ts_raw[timed].min()) if timed.any() else 0
    ts = pd.Series(np.where(timed, ts_raw, first))
    cats = [str(c) for c in raw["category"].cat.categories if (raw["category"] == c).any()]
    deltas = pd.DataFrame({f"{c}_bytes": np.where(raw["category"] == c, raw["bytes"], 0) for c in cats})
    held = deltas.cumsum().assign(ts_ns=ts.to_numpy()).groupby("ts_ns", sort=True).last().reset_index()
    held["total_bytes"] = held[[f"{c}_bytes" for c in cats]].sum(axis=1)
    held.insert(1, "time_ms", (held["ts_ns"] - first) / 1e6)
    if window_ms is not None:
        held = held.iloc[window_positions(held["time_ms"].to_numpy(np.float64), window_ms)]
    keep = minmax_downsample_indices(held["total_bytes"].to_numpy(np.float64), max(4, max_points))
    return held.iloc[keep].reset_index(drop=True)


def window_positions(times: np.ndarray, window: tuple[float, float]) -> np.ndarray:
    """Positions of the sorted ``times`` in ``window`` (first, last), with the one just before it: a
    total drawn as a step holds from that one until the next, so the window opens at its value."""
    start = int(np.searchsorted(times, window[0], side="right"))
    stop = int(np.searchsorted(times, window[1], side="right"))
    return np.arange(max(0, start - 1), max(stop, start))


def compute_category_peak(categories: pd.DataFrame) -> pd.DataFrame:
    """Return the breakdown at the peak of ``total_bytes``: one row per category with
    ``category``, ``bytes``, ``share`` (of the total), largest first; plus ``time_ms`` of the peak."""
    if categories.empty:
        return pd.DataFrame(columns=["category", "bytes", "share", "time_ms"])
    row = categories.loc[categories["total_bytes"].idxmax()]
    cols = [c for c in categories.columns if c.endswith("_bytes") and c != "total_bytes"]
    total = float(row["total_bytes"]) or 1.0
    out = pd.DataFrame({
        "category": [c.removesuffix("_bytes") for c in cols],
        "bytes": [int(row[c]) for c in cols],
    })
    out["share"] = out["bytes"] / total
    out["time_ms"] = float(row["time_ms"])
    return out.sort_values("bytes", ascending=False, kind="stable").reset_index(drop=True)


TRACE_ALLOCATION_COLUMNS = ["ts_us", "device", "bytes", "lifetime_us", "op", "op_stack", "input_shapes"]
# Ops that only allocate: the op that asked for the memory is the one around them.
_ALLOCATOR_OPS = frozenset({"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty",
                            "aten::new_empty_strided", "aten::resize_"})


def compute_trace_allocations(memory: pd.DataFrame, events: pd.DataFrame, *, top: int = 20) -> pd.DataFrame:
    """Return the ``top`` largest allocations of a trace's ``[memory]`` events, largest first.

    For each: when (``ts_us``), on which device, how many bytes, how long it lived
    (``lifetime_us``: until the next free of the same address on the same device; NaN when not
    freed before the trace ends), and the host op that made it: the innermost op of the
    allocating thread whose interval contains the allocation, skipping pure allocation ops
    such as ``aten::empty`` (``op``, with its ``input_shapes``), and the innermost enclosing ops
    outermost first (``op_stack``, at most 5).
    """
    if memory.empty or "bytes" not in memory.columns:
        return pd.DataFrame(columns=TRACE_ALLOCATION_COLUMNS)
    size = pd.to_numeric(memory["bytes"], errors="coerce")
    allocs = memory[size > 0].assign(alloc_bytes=size[size > 0]).nlargest(top, "alloc_bytes", keep="first")
    frees = memory[(size < 0) & memory["addr"].isin(allocs["addr"].dropna())]
    ops = host_ops(events)
    # Plain arrays, filtered once per allocation: pandas masks over every op for each of the
    # ``top`` allocations took seconds on a 12-step CPU trace. Only the ops running at one of the
    # allocations' instants are kept (a few dozen), so the text columns are converted for those only.
    op_ts = ops["ts_us"].to_numpy(float)
    op_end = op_ts + ops["dur_us"].fillna(0.0).to_numpy(float)
    a_ts = np.sort(allocs["ts_us"].to_numpy(float))
    first = np.searchsorted(a_ts, op_ts, side="left")  # the first allocation at or after the op's start
    live = (first < len(a_ts)) & (a_ts[np.clip(first, 0, max(len(a_ts) - 1, 0))] <= op_end)
    ops, op_ts, op_end = ops[live], op_ts[live], op_end[live]
    op_tid = ops["tid"].astype(object).astype(str).to_numpy() if "tid" in ops.columns else None
    op_names = ops["name"].to_numpy(dtype=object)
    op_shapes = ops["input_shapes"].to_numpy(dtype=object) if "input_shapes" in ops.columns else None
    f_addr, f_dev, f_ts = (_floats(frees[c]) for c in ("addr", "device_id", "ts_us"))  # addresses < 2**53
    a_addr, a_dev = _floats(allocs["addr"]), _floats(allocs["device_id"])
    rows = []
    for k, a in enumerate(allocs.itertuples(index=False)):
        later = f_ts[(f_addr == a_addr[k]) & (f_dev == a_dev[k]) & (f_ts >= a.ts_us)]
        # Allocations are recorded on the allocating thread: match it when both sides know it.
        hit = (op_ts <= a.ts_us) & (op_end >= a.ts_us)
        if op_tid is not None and "tid" in memory.columns:
            hit &= op_tid == str(a.tid)
        around = np.flatnonzero(hit)
        around = around[np.argsort(op_ts[around], kind="stable")]
        names = [str(n) for n in op_names[around]]
        maker = next((i for i in range(len(names) - 1, -1, -1) if names[i] not in _ALLOCATOR_OPS), len(names) - 1)
        rows.append({
            "ts_us": float(a.ts_us),
            "device": device_label(_opt_int(a.device_type), _opt_int(a.device_id)),
            "bytes": int(a.alloc_bytes),
            "lifetime_us": float(later.min() - a.ts_us) if len(later) else float("nan"),
            "op": names[maker] if names else "",
            "op_stack": " > ".join(names[-5:]),
            "input_shapes": str(op_shapes[around[maker]]) if names and op_shapes is not None else "",
        })
    return pd.DataFrame(rows, columns=TRACE_ALLOCATION_COLUMNS)


def _floats(col: pd.Series) -> np.ndarray:
    return np.asarray(pd.to_numeric(col, errors="coerce").to_numpy(float, na_value=np.nan), dtype=float)


def _opt_int(value: Any) -> int | None:
    return None if value is None or pd.isna(value) else int(value)
