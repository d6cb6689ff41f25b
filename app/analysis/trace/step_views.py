"""Where each step's time goes: device view and training-loop view, per step (analysis layer, pure).

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

import numpy as np
import pandas as pd

from app.analysis.trace.categories import (
    ANNOTATION_CATS,
    COMM_OP_NAMES,
    DEVICE_CATEGORIES,
    LOOP_PHASES,
    MEMCPY_CATS,
    MEMSET_CATS,
    OP_CATS,
    cat_in,
    communication_kernel_mask,
    dataloader_mask,
    is_device_activity,
    is_host_op,
    is_kernel,
    is_runtime,
    name_mask,
)
from app.analysis.trace.intervals import event_spans, exclusive_us, merge_intervals
from app.analysis.trace.step_spans import StepSpans

__all__ = ["device_view", "loop_view"]


def device_view(ev: pd.DataFrame, spans: StepSpans, *, nccl_by_name: bool = True) -> dict[str, np.ndarray]:
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
    costs = exclusive_us(layers, spans.start, spans.end)
    out = dict(zip(DEVICE_CATEGORIES[:-1], costs))
    out["other"] = (spans.end - spans.start) - np.sum(costs, axis=0)
    return out


def _launch_times(ev: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Device events (in table order) with the start time of the runtime call that launched them:
    the first runtime call of the same correlation id; events without one are left out."""
    has = ev["correlation"].notna().to_numpy()
    corr = ev["correlation"].to_numpy(dtype=np.int64, na_value=-1)
    ts = ev["ts_us"].to_numpy(float)
    rt = np.flatnonzero(is_runtime(ev) & has)
    ids, first = np.unique(corr[rt], return_index=True)  # the first call of each id, as drop_duplicates
    dev = np.flatnonzero(is_device_activity(ev) & has)
    if len(ids) == 0 or len(dev) == 0:
        empty = np.zeros(0)
        return empty, empty, empty
    pos = np.minimum(np.searchsorted(ids, corr[dev]), len(ids) - 1)
    ok = ids[pos] == corr[dev]
    dev, pos = dev[ok], pos[ok]
    s = ts[dev]
    return ts[rt[first[pos]]], s, s + ev["dur_us"].to_numpy(float)[dev]


def _inside(ms: np.ndarray, me: np.ndarray, t: np.ndarray) -> np.ndarray:
    if len(ms) == 0:
        return np.zeros(len(t), bool)
    i = np.searchsorted(ms, t, side="right") - 1
    return (i >= 0) & (t <= me[np.clip(i, 0, None)])


def _loop_host_windows(ev: pd.DataFrame, spans: StepSpans) -> dict[str, tuple[np.ndarray, np.ndarray]]:
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


def loop_view(ev: pd.DataFrame, spans: StepSpans) -> dict[str, np.ndarray]:
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
    costs = exclusive_us(layers, spans.start, spans.end)
    out = {p: np.zeros(len(spans.start)) for p in LOOP_PHASES}
    for (phase, _), c in zip(order, costs):
        out[phase] = out[phase] + c
    out["other"] = (spans.end - spans.start) - np.sum(costs, axis=0)
    return out
