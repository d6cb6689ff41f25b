"""Event-level measurements the advisor's trace rules share: kernel→op links, syncs, busy time (analysis layer).

Every function takes one trace's events table (app.data.trace columns: name, cat, ts_us, dur_us,
pid, tid, correlation, input_types, sequence, ...) and returns plain numbers or small tables.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np
import pandas as pd

__all__ = [
    "KERNEL_CATS",
    "LAUNCH_CATS",
    "by_cat",
    "kernel_ops",
    "float_kind",
    "merged_busy_us",
    "idle_gaps_us",
    "is_comm_kernel",
    "overlap_us",
    "in_spans",
]

KERNEL_CATS = ("kernel",)
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
HOST_CATS = ("cpu_op", "user_annotation")
_COMM = re.compile(r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|sendrecv|alltoall", re.IGNORECASE)


def by_cat(events: pd.DataFrame, cats: Iterable[str]) -> pd.DataFrame:
    """Rows whose ``cat`` is one of ``cats``."""
    return events[events["cat"].astype(str).isin(tuple(cats))]


def _innermost_ops(ops: pd.DataFrame, times: np.ndarray) -> np.ndarray:
    """Index (into ``ops``) of the innermost op containing each time, or -1; one thread's ops."""
    start = ops["ts_us"].to_numpy(float)
    end = start + ops["dur_us"].to_numpy(float)
    order = np.lexsort((-end, start))  # parents before children when they start together
    start, end = start[order], end[order]
    result = np.full(len(times), -1, dtype=np.int64)
    t_order = np.argsort(times, kind="stable")
    stack: list[int] = []
    i = 0
    for j in t_order:
        t = times[j]
        while i < len(start) and start[i] <= t:
            while stack and end[stack[-1]] < start[i]:
                stack.pop()
            stack.append(i)
            i += 1
        while stack and end[stack[-1]] < t:
            stack.pop()
        result[j] = order[stack[-1]] if stack else -1
    return result


def kernel_ops(events: pd.DataFrame) -> pd.DataFrame:
    """One row per GPU kernel: ``name``, ``dur_us``, ``ts_us`` and the launching host op's
    ``op`` name and ``op_types`` (input dtypes; "" when shapes were not recorded or no op found).

    The link is kernel.correlation → runtime launch (same correlation) → innermost ``cpu_op``
    on the launching thread that contains the launch, as torch-tb-profiler attributes device time.
    """
    kernels = by_cat(events, KERNEL_CATS)
    out = pd.DataFrame({"name": kernels["name"].astype(str).to_numpy(), "dur_us": kernels["dur_us"].to_numpy(float),
                        "ts_us": kernels["ts_us"].to_numpy(float), "op": "", "op_types": ""})
    if kernels.empty:
        return out
    launches = by_cat(events, LAUNCH_CATS).dropna(subset=["correlation"])
    launches = launches.drop_duplicates(subset=["correlation"])
    ops = by_cat(events, ("cpu_op",))
    op_name = pd.Series("", index=launches.index, dtype=object)
    op_types = pd.Series("", index=launches.index, dtype=object)
    for (pid, tid), group in launches.groupby(["pid", "tid"], observed=True):
        thread_ops = ops[(ops["pid"] == pid) & (ops["tid"] == tid)]
        if thread_ops.empty:
            continue
        idx = _innermost_ops(thread_ops, group["ts_us"].to_numpy(float))
        found = idx >= 0
        names = thread_ops["name"].astype(str).to_numpy()
        types = thread_ops["input_types"].astype(str).to_numpy()
        op_name.loc[group.index[found]] = names[idx[found]]
        op_types.loc[group.index[found]] = types[idx[found]]
    by_corr_name = dict(zip(launches["correlation"].astype("int64"), op_name))
    by_corr_types = dict(zip(launches["correlation"].astype("int64"), op_types))
    corr = kernels["correlation"].astype("Int64")
    out["op"] = [by_corr_name.get(int(c), "") if pd.notna(c) else "" for c in corr]
    out["op_types"] = [by_corr_types.get(int(c), "") if pd.notna(c) else "" for c in corr]
    return out


_HALF = re.compile(r"half|bfloat16|float16|\bbf16\b|\bfp16\b|float8", re.IGNORECASE)
_FLOAT32 = re.compile(r'"float"|^float\b|\bfloat\b(?!\d)')
# cuBLAS/cuDNN kernels that compute in fp32 on the CUDA cores (no tensor cores).
_SIMT_FP32_KERNEL = re.compile(r"sgemm|implicit_convolve_sgemm|simt_s|gemv2T_kernel_val<int, int, float", re.IGNORECASE)
_HALF_KERNEL = re.compile(r"h884|h1688|h16816|hmma|bf16|f16f16|_half|c10::Half|c10::BFloat16|fp16", re.IGNORECASE)


def float_kind(op_types: str, kernel_name: str) -> str:
    """"half" (fp16/bf16/fp8), "float32" or "" (unknown/other) for one kernel.

    Uses the launching op's input dtypes when the trace recorded them, else the kernel name.
    """
    if op_types:
        if _HALF.search(op_types):
            return "half"
        if _FLOAT32.search(op_types):
            return "float32"
        return ""
    if _HALF_KERNEL.search(kernel_name):
        return "half"
    if _SIMT_FP32_KERNEL.search(kernel_name):
        return "float32"
    return ""


def _merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(starts) == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    groups = np.cumsum(new) - 1
    ms = s[new]
    me = np.zeros(len(ms))
    np.maximum.at(me, groups, run_end)
    return ms, me


def merged_busy_us(starts: np.ndarray, ends: np.ndarray) -> float:
    """Total length of the union of intervals."""
    ms, me = _merge(np.asarray(starts, float), np.asarray(ends, float))
    return float((me - ms).sum())


def idle_gaps_us(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Lengths of the gaps between the merged intervals (device idle between kernels)."""
    ms, me = _merge(np.asarray(starts, float), np.asarray(ends, float))
    return ms[1:] - me[:-1] if len(ms) > 1 else np.zeros(0)


def overlap_us(a_start: np.ndarray, a_end: np.ndarray, b_start: np.ndarray, b_end: np.ndarray) -> float:
    """Length of (union of A) ∩ (union of B)."""
    total_a = merged_busy_us(a_start, a_end)
    total_b = merged_busy_us(b_start, b_end)
    both = merged_busy_us(np.concatenate([a_start, b_start]), np.concatenate([a_end, b_end]))
    return max(0.0, total_a + total_b - both)


def is_comm_kernel(names: pd.Series) -> pd.Series:
    """True for collective-communication kernels (NCCL/RCCL)."""
    return names.astype(str).str.contains(_COMM)


def in_spans(ts: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Boolean mask: which times fall in one of the (sorted, non-overlapping) spans."""
    if len(starts) == 0:
        return np.zeros(len(ts), dtype=bool)
    order = np.argsort(starts)
    s, e = np.asarray(starts, float)[order], np.asarray(ends, float)[order]
    i = np.searchsorted(s, ts, side="right") - 1
    ok = i >= 0
    ok[ok] = ts[ok] <= e[i[ok]]
    return ok
