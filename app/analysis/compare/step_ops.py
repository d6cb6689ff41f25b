"""Operator and kernel time per profiled step, so comparisons can choose steps and show spread (analysis layer).

The trace analysis' op and kernel tables sum a whole trace. A comparison needs them per
(rank, step): to leave whole steps out (a profiled step that held an evaluation, a stall; see
app.analysis.trace.step_window) and to give each delta its step-to-step spread. Operators are assigned
to the step whose host span holds their start (after the profiled-window cut of
app.analysis.trace.ops), kernels to the step whose device span holds their start. Events outside
every step are not counted.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from app.analysis.trace.categories import is_kernel
from app.analysis.trace.ops import compute_op_events_with_scopes, is_op_row, profiled_window
from app.analysis.trace.step_spans import find_steps
from app.data.trace import TraceSet

__all__ = ["STEP_KEYS", "compute_step_ops", "compute_step_kernels", "reduce_steps"]

STEP_KEYS = ["rank", "step"]


def _assign(ts: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Index of the span holding each timestamp (spans sorted by start), -1 outside every span."""
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    pos = np.searchsorted(s, ts, side="right") - 1
    ok = (pos >= 0) & (ts < e[np.clip(pos, 0, None)])
    return np.where(ok, order[np.clip(pos, 0, None)], -1)


def compute_step_ops(traces: TraceSet, key: str | None = None) -> pd.DataFrame:
    """Per (rank, step, name[, key]): ``calls``, ``self_us``, ``total_us``, ``device_self_us``.

    ``key`` is ``input_shapes`` or ``module`` (the grouping of app.analysis.trace.ops), None for names
    only. Empty (no rows) when no trace has steps."""
    keys = ["name"] + ([key] if key else [])
    frames = []
    for t in traces:
        spans = find_steps(t.events)
        if not len(spans.steps):
            continue
        window = profiled_window(t)
        ev, _ = compute_op_events_with_scopes(t.events, modules=key == "module", window=window)
        keep = is_op_row(ev) & (ev["inside"].to_numpy() if window is not None else True)
        ev = ev[keep]
        ts = ev["ts_us"].to_numpy(float)
        if window is not None:
            ts = np.maximum(ts, window[0])  # a clipped event starts at the window
        idx = _assign(ts, spans.host_start, spans.host_end)
        ev = ev[idx >= 0]
        part = pd.DataFrame({"rank": int(t.rank), "step": spans.steps.astype(int)[idx[idx >= 0]],
                             **{k: ev[k].astype(str).to_numpy() for k in keys},
                             "self_us": ev["self_us"].to_numpy(float), "total_us": ev["dur_us"].to_numpy(float),
                             "device_self_us": ev["device_self_us"].to_numpy(float)})
        frames.append(part)
    cols = [*STEP_KEYS, *keys, "calls", "self_us", "total_us", "device_self_us"]
    if not frames:
        return pd.DataFrame(columns=cols)
    ev = pd.concat(frames, ignore_index=True)
    g = ev.groupby([*STEP_KEYS, *keys], sort=False).agg(
        calls=("self_us", "size"), self_us=("self_us", "sum"), total_us=("total_us", "sum"),
        device_self_us=("device_self_us", "sum")).reset_index()
    return g[cols]


def compute_step_kernels(traces: TraceSet) -> pd.DataFrame:
    """Per (rank, step, name): ``calls``, ``total_us`` of the device kernels, counting only the
    part of each kernel inside the step's device span (the step breakdown's rule), so a kernel
    that starts in a step and runs on after the profiled steps does not count whole for every
    step. A call is counted in the step holding its start. Empty when no trace has steps."""
    frames = []
    for t in traces:
        spans = find_steps(t.events)
        if not len(spans.steps):
            continue
        k = t.events.loc[is_kernel(t.events), ["name", "ts_us", "dur_us"]]
        frames.append(_kernel_time_per_step(k, spans.start, spans.end, spans.steps.astype(int), int(t.rank)))
    cols = [*STEP_KEYS, "name", "calls", "total_us"]
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=cols)
    ev = pd.concat(frames, ignore_index=True)
    g = ev.groupby([*STEP_KEYS, "name"], sort=False).agg(calls=("calls", "sum"),
                                                          total_us=("total_us", "sum")).reset_index()
    return g[cols]


def _kernel_time_per_step(k: pd.DataFrame, start: np.ndarray, end: np.ndarray, steps: np.ndarray,
                          rank: int) -> pd.DataFrame:
    """One row per (kernel, step it overlaps): ``calls`` (1 in the step holding its start),
    ``total_us`` (its time inside that step). Steps do not overlap (step_spans)."""
    order = np.argsort(start, kind="stable")
    s, e, num = start[order], end[order], steps[order]
    ks = k["ts_us"].to_numpy(float)
    ke = ks + k["dur_us"].to_numpy(float)
    first = np.clip(np.searchsorted(e, ks, side="right"), 0, len(s))  # first step ending after the start
    last = np.searchsorted(s, ke, side="right") - 1  # last step starting before (or at) the end
    names = k["name"].astype(str).to_numpy()
    n = np.clip(last - first + 1, 0, None)  # steps each kernel overlaps: usually 0 or 1
    if not n.sum():
        return pd.DataFrame(columns=[*STEP_KEYS, "name", "calls", "total_us"])
    ki = np.repeat(np.arange(len(ks)), n)
    si = first[ki] + (np.arange(len(ki)) - np.repeat(np.cumsum(n) - n, n))
    inside = np.clip(np.minimum(ke[ki], e[si]) - np.maximum(ks[ki], s[si]), 0, None)
    holds_start = (s[si] <= ks[ki]) & (ks[ki] < e[si])
    return pd.DataFrame({"rank": rank, "step": num[si], "name": names[ki],
                         "calls": holds_start.astype(int), "total_us": inside})


def reduce_steps(table: pd.DataFrame, kept: pd.DataFrame, keys: list[str], values: Sequence[str],
                 spread_of: str) -> pd.DataFrame:
    """Mean per kept (rank, step) row of every value, and ``spread_us``: the standard deviation
    over those rows of ``spread_of`` (a step where the key does not occur counts 0; NaN with
    fewer than 2 rows). ``kept``: the (rank, step) rows that count. One row per key."""
    rows = kept[STEP_KEYS].drop_duplicates()
    n = len(rows)
    part = table.merge(rows.astype({"rank": int, "step": int}), on=STEP_KEYS, how="inner")
    cols = [*keys, *values, "spread_us"]
    if n == 0 or len(part) == 0:
        return pd.DataFrame(columns=cols)
    g = part.groupby(keys, sort=False)
    out = g[list(values)].sum() / n
    x = part[spread_of].to_numpy(float)
    s1 = pd.Series(x, index=part.index).groupby([part[k] for k in keys], sort=False).sum()
    s2 = pd.Series(x * x, index=part.index).groupby([part[k] for k in keys], sort=False).sum()
    if n >= 2:
        var = np.clip((s2 - s1 * s1 / n) / (n - 1), 0.0, None)
        out["spread_us"] = np.sqrt(var.reindex(out.index).to_numpy(float))
    else:
        out["spread_us"] = np.nan
    return out.reset_index()[cols]
