"""Interval arithmetic on event spans in µs: union, coverage of windows, priority layers (analysis layer, pure)."""
from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["merge_intervals", "covered_us", "exclusive_us", "event_spans"]


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
    return np.asarray(np.clip(total, 0, None), dtype=float)


def exclusive_us(layers: list[tuple[np.ndarray, np.ndarray]], lo: np.ndarray, hi: np.ndarray) -> list[np.ndarray]:
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
