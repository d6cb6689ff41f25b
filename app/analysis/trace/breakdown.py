"""Where each step's time goes: device view and training-loop view (analysis layer, pure).

Device view — the same categories and priority as torch-tb-profiler's Overview
(``overall_parser.py``): every instant of a step is given to the first category active at that
instant in the order Kernel, Memcpy, Memset, Communication, Runtime, DataLoader, CPU Exec; what is
left is Other. So the categories never overlap and always sum to the step's duration.

Training-loop view — forward, backward, optimizer, dataloader, other. An instant where the device
runs work is given to the phase whose host code launched that work (device first: a GPU busy with
backward kernels while the host already loads the next batch is backward time); an instant where
the device is idle goes to the phase the host is in. Host phases: ``enumerate(DataLoader)…``
spans, ``Optimizer.step#…``/``Optimizer.zero_grad#…`` spans, the backward window (first to last
``autograd::engine::evaluate_function`` / ``…Backward`` op), and forward = from the step's start
to the backward window (or the optimizer step). docs/trace-engine.md has the full definitions.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "DEVICE_CATEGORIES", "LOOP_CATEGORIES", "LOOP_PHASES", "compute_breakdown", "device_view", "loop_view",
    "merge_intervals", "covered_us", "cat_in", "is_host_op", "is_device_activity", "is_runtime", "is_kernel",
    "communication_kernel_mask", "dataloader_mask", "name_mask", "event_spans", "RUNTIME_CATS", "KERNEL_CATS",
    "MEMCPY_CATS", "MEMSET_CATS",
]

DEVICE_CATEGORIES = ("kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec", "other")
LOOP_CATEGORIES = ("forward", "backward", "optimizer")
LOOP_PHASES = ("forward", "backward", "optimizer", "dataloader", "other")

KERNEL_CATS = frozenset({"kernel"})
MEMCPY_CATS = frozenset({"gpu_memcpy", "memcpy"})
MEMSET_CATS = frozenset({"gpu_memset", "memset"})
RUNTIME_CATS = frozenset({"cuda_runtime", "runtime", "mtia_runtime", "glow_runtime", "xpu_runtime",
                          "privateuse1_runtime"})
OP_CATS = frozenset({"cpu_op", "operator"})
ANNOTATION_CATS = frozenset({"user_annotation", "gpu_user_annotation"})
# torch-tb-profiler's names of collective ops (trace.py NcclOpNameSet / GlooOpNameSet).
COMM_OP_NAMES = frozenset(f"{lib}:{op}" for lib in ("nccl", "gloo")
                          for op in ("broadcast", "reduce", "all_reduce", "all_gather", "reduce_scatter"))


# ---------------------------------------------------------------- event classes


def cat_in(ev: pd.DataFrame, names: Iterable[str]) -> np.ndarray:
    """Boolean mask: the event's ``cat`` (case-insensitive) is one of ``names``."""
    col = ev["cat"]
    if not isinstance(col.dtype, pd.CategoricalDtype):
        return col.astype(str).str.lower().isin(set(names)).to_numpy()
    cats = np.asarray([str(c).lower() in names for c in col.cat.categories] + [False])
    return cats[col.cat.codes.to_numpy()]  # code -1 (missing) indexes the trailing False


def name_mask(ev: pd.DataFrame, pred: Any) -> np.ndarray:
    """Evaluate ``pred(name)`` once per distinct name, not once per event."""
    col = ev["name"]
    if not isinstance(col.dtype, pd.CategoricalDtype):
        return np.fromiter((bool(pred(str(n))) for n in col), bool, len(col))
    hits = np.asarray([bool(pred(str(c))) for c in col.cat.categories] + [False])
    return hits[col.cat.codes.to_numpy()]


def is_host_op(ev: pd.DataFrame) -> np.ndarray:
    """cpu_op/operator/user_annotation: the host events that hold steps and ops."""
    return cat_in(ev, OP_CATS | {"user_annotation"})


def is_kernel(ev: pd.DataFrame) -> np.ndarray:
    return cat_in(ev, KERNEL_CATS)


def is_device_activity(ev: pd.DataFrame) -> np.ndarray:
    return cat_in(ev, KERNEL_CATS | MEMCPY_CATS | MEMSET_CATS)


def is_runtime(ev: pd.DataFrame) -> np.ndarray:
    return cat_in(ev, RUNTIME_CATS)


def _is_dataloader_name(n: str) -> bool:
    return (n.startswith("enumerate(DataLoader)#") and n.endswith(".__next__")) or n.startswith("enumerate(DataPipe)#")


def dataloader_mask(ev: pd.DataFrame) -> np.ndarray:
    return cat_in(ev, OP_CATS | ANNOTATION_CATS) & name_mask(ev, _is_dataloader_name)


def communication_kernel_mask(ev: pd.DataFrame, by_name: bool = True) -> np.ndarray:
    """Kernels launched by a collective op (tb-profiler's rule), or named nccl*/rccl* (our addition,
    off with ``by_name=False``: newer torch launches collectives from ``record_param_comms``, which
    tb-profiler's name list misses)."""
    kern = is_kernel(ev)
    comm_ops = cat_in(ev, OP_CATS | ANNOTATION_CATS | {"python"}) & name_mask(ev, COMM_OP_NAMES.__contains__)
    ext = set(ev.loc[comm_ops, "external_id"].dropna().astype(int))
    by_ext = ev["external_id"].isin(ext).to_numpy() if ext else np.zeros(len(ev), bool)
    if not by_name:
        return kern & by_ext
    return kern & (by_ext | name_mask(ev, lambda n: n[:4].lower() in ("nccl", "rccl")))


# ---------------------------------------------------------------- interval arithmetic


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted, disjoint (starts, ends)."""
    starts = np.asarray(starts, float)
    ends = np.asarray(ends, float)
    if len(starts) == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    group_end = np.nonzero(np.r_[new[1:], True])[0]
    return s[new], reach[group_end]


def covered_us(ms: np.ndarray, me: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """For each window [lo, hi], the length covered by the disjoint sorted intervals (ms, me)."""
    lo = np.asarray(lo, float)
    hi = np.asarray(hi, float)
    if len(ms) == 0:
        return np.zeros(len(lo))
    cum = np.r_[0.0, np.cumsum(me - ms)]
    i = np.searchsorted(me, lo, side="right")
    j = np.searchsorted(ms, hi, side="left")
    total = cum[j] - cum[np.minimum(i, j)]
    has = i < j
    ii = np.minimum(i, len(ms) - 1)
    jj = np.maximum(j - 1, 0)
    total -= np.where(has, np.clip(lo - ms[ii], 0, None), 0.0)
    total -= np.where(has, np.clip(me[jj] - hi, 0, None), 0.0)
    return np.clip(total, 0, None)


def _exclusive(layers: list[tuple[np.ndarray, np.ndarray]], lo: np.ndarray, hi: np.ndarray) -> list[np.ndarray]:
    """Time of each layer inside [lo, hi] not covered by an earlier layer (priority order)."""
    out = []
    acc_s, acc_e = np.array([]), np.array([])
    before = np.zeros(len(lo))
    for s, e in layers:
        acc_s, acc_e = merge_intervals(np.r_[acc_s, s], np.r_[acc_e, e])
        now = covered_us(acc_s, acc_e, lo, hi)
        out.append(now - before)
        before = now
    return out


def event_spans(ev: pd.DataFrame, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) in µs of the masked events."""
    s = ev["ts_us"].to_numpy(float)[mask]
    return s, s + ev["dur_us"].to_numpy(float)[mask]


# ---------------------------------------------------------------- the two views


def device_view(ev: pd.DataFrame, spans: Any, *, nccl_by_name: bool = True) -> dict[str, np.ndarray]:
    """tb-profiler's Overview categories per step (µs), summing to each step's duration.

    ``nccl_by_name=False`` gives tb-profiler's exact rule for Communication (see
    communication_kernel_mask).
    """
    comm_kernel = communication_kernel_mask(ev, by_name=nccl_by_name)
    kernel = is_kernel(ev) & ~comm_kernel
    host = cat_in(ev, OP_CATS | ANNOTATION_CATS | {"python"})
    names_step = name_mask(ev, lambda n: n.startswith("ProfilerStep#"))
    dl = dataloader_mask(ev)
    comm_host = host & name_mask(ev, COMM_OP_NAMES.__contains__)
    cpu = host & ~names_step & ~dl & ~comm_host
    roles = [kernel, cat_in(ev, MEMCPY_CATS), cat_in(ev, MEMSET_CATS), comm_kernel | comm_host, is_runtime(ev), dl, cpu]
    layers = [merge_intervals(*event_spans(ev, m)) for m in roles]
    costs = _exclusive(layers, spans.start, spans.end)
    out = dict(zip(DEVICE_CATEGORIES[:-1], costs))
    out["other"] = (spans.end - spans.start) - np.sum(costs, axis=0)
    return out


def _launch_times(ev: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Device events with the start time of the runtime call that launched them."""
    dev = ev[is_device_activity(ev) & ev["correlation"].notna().to_numpy()]
    rt = ev[is_runtime(ev) & ev["correlation"].notna().to_numpy()].drop_duplicates("correlation")
    launch = dev["correlation"].map(pd.Series(rt["ts_us"].to_numpy(), index=rt["correlation"].to_numpy()))
    ok = launch.notna().to_numpy()
    s = dev["ts_us"].to_numpy(float)[ok]
    return launch.to_numpy(float)[ok], s, s + dev["dur_us"].to_numpy(float)[ok]


def _inside(ms: np.ndarray, me: np.ndarray, t: np.ndarray) -> np.ndarray:
    if len(ms) == 0:
        return np.zeros(len(t), bool)
    i = np.searchsorted(ms, t, side="right") - 1
    return (i >= 0) & (t <= me[np.clip(i, 0, None)])


def _loop_host_windows(ev: pd.DataFrame, spans: Any) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    host = is_host_op(ev)
    bwd = host & name_mask(ev, lambda n: n.startswith("autograd::engine::evaluate_function")
                            or n.rstrip("0123456789").endswith("Backward"))
    opt = host & name_mask(ev, lambda n: n.startswith(("Optimizer.step#", "Optimizer.zero_grad#")))
    opt_step = host & name_mask(ev, lambda n: n.startswith("Optimizer.step#"))
    bs, be = event_spans(ev, bwd)
    os_, _ = event_spans(ev, opt_step)
    hs, he = spans.host_start, spans.host_end
    bw_s, bw_e, fw_s, fw_e = [], [], [], []
    for lo, hi in zip(hs, he):
        inb = (bs >= lo) & (bs < hi)
        first_opt = os_[(os_ >= lo) & (os_ < hi)]
        if inb.any():
            bw_s.append(bs[inb].min())
            bw_e.append(be[inb].max())
            end = bs[inb].min()
        else:
            end = first_opt.min() if len(first_opt) else hi
        fw_s.append(lo)
        fw_e.append(end)
    return {
        "dataloader": merge_intervals(*event_spans(ev, dataloader_mask(ev))),
        "optimizer": merge_intervals(*event_spans(ev, opt)),
        "backward": merge_intervals(np.array(bw_s), np.array(bw_e)),
        "forward": merge_intervals(np.array(fw_s), np.array(fw_e)),
    }


def loop_view(ev: pd.DataFrame, spans: Any) -> dict[str, np.ndarray]:
    """Forward/backward/optimizer/dataloader/other per step (µs), summing to each step's duration."""
    host = _loop_host_windows(ev, spans)
    launch, ds, de = _launch_times(ev)
    in_opt = _inside(*host["optimizer"], launch)
    in_bwd = _inside(*host["backward"], launch) & ~in_opt
    in_dl = _inside(*host["dataloader"], launch) & ~in_opt & ~in_bwd
    in_fwd = _inside(*host["forward"], launch) & ~in_opt & ~in_bwd & ~in_dl
    dev = {"backward": in_bwd, "forward": in_fwd, "optimizer": in_opt, "dataloader": in_dl}
    order = [("backward", "dev"), ("forward", "dev"), ("optimizer", "dev"), ("dataloader", "dev"),
             ("dataloader", "host"), ("optimizer", "host"), ("backward", "host"), ("forward", "host")]
    layers = [merge_intervals(ds[dev[p]], de[dev[p]]) if kind == "dev" else host[p] for p, kind in order]
    costs = _exclusive(layers, spans.start, spans.end)
    out = {p: np.zeros(len(spans.start)) for p in LOOP_PHASES}
    for (phase, _), c in zip(order, costs):
        out[phase] = out[phase] + c
    out["other"] = (spans.end - spans.start) - np.sum(costs, axis=0)
    return out


def compute_breakdown(traces: TraceSet, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """Mean time per step of each category, per rank and view.

    Returns columns ``rank``, ``view`` ("device" | "loop"), ``category``, ``time_us`` (mean per
    step), ``total_us`` (over the steps) and ``share`` (of the mean step; sums to 1 per view).
    """
    if steps is None:
        from app.analysis.trace.steps import compute_steps

        steps = compute_steps(traces)
    rows = []
    loop_cols = {"forward": "forward_us", "backward": "backward_us", "optimizer": "optimizer_us",
                 "dataloader": "loop_dataloader_us", "other": "loop_other_us"}
    for rank, g in steps.groupby("rank", sort=True):
        dur = float(g["duration_us"].mean()) if len(g) else 0.0
        for view, cols in (("device", {c: f"{c}_us" for c in DEVICE_CATEGORIES}), ("loop", loop_cols)):
            for cat, col in cols.items():
                mean = float(g[col].mean())
                rows.append({"rank": int(rank), "view": view, "category": cat, "time_us": mean,
                             "total_us": float(g[col].sum()), "share": mean / dur if dur > 0 else 0.0})
    return pd.DataFrame(rows, columns=["rank", "view", "category", "time_us", "total_us", "share"])
