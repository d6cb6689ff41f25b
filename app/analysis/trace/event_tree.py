"""The host events of each thread as a tree by interval containment (analysis layer, pure).

Shared by the op table (``ops``: parents give self times) and the module attribution
(``op_modules``: the nesting of module ranges).
"""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

__all__ = ["column_codes", "op_tree"]


def column_codes(col: pd.Series) -> np.ndarray:
    """Integer codes of a column's values (its categorical codes when it is categorical)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return np.asarray(col.cat.codes.to_numpy().astype(np.int64), dtype=np.int64)
    return np.asarray(pd.factorize(col)[0].astype(np.int64), dtype=np.int64)


def op_tree(host: pd.DataFrame) -> np.ndarray:
    """Parent row position (or -1) of each host event, per (pid, tid), by interval containment.

    ``host`` must be sorted by (ts_us ascending, dur_us descending) as load_trace leaves it.
    """
    n = len(host)
    parent = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return parent
    thread = column_codes(host["pid"]) * (int(column_codes(host["tid"]).max()) + 2) + column_codes(host["tid"])
    starts = host["ts_us"].to_numpy(float)
    ends = starts + host["dur_us"].to_numpy(float)
    order = np.argsort(thread, kind="stable")  # group threads, keep time order inside
    bounds = np.flatnonzero(np.r_[True, thread[order][1:] != thread[order][:-1], True])
    for lo, hi in itertools.pairwise(bounds):
        rows = order[lo:hi]
        local = _nested_parents(starts[rows], ends[rows])
        if local is None:  # not properly nested (overlapping siblings): walk a stack instead
            local = _stack_parents(starts[rows], ends[rows])
        ok = local >= 0
        parent[rows[ok]] = rows[local[ok]]
    return parent


def _nested_parents(s: np.ndarray, e: np.ndarray) -> np.ndarray | None:
    """Vectorised parents for properly nested intervals sorted by (start, -duration).

    The depth of event i is the number of earlier events still open at its start; its parent is
    the last earlier event one level up. Returns None when some child sticks out of its parent.
    """
    n = len(s)
    # events with end <= s_i (any position), minus the zero-length events at the same start
    # placed at or after i (they sort last); each temporary is freed as soon as it is used: for
    # the main thread of a 100 MB trace every one is ~2 MB, and together they were the peak of a
    # cold `analyze` (benchmarks/README.md, issue 13, wave 15)
    closed = np.searchsorted(np.sort(e), s, side="right")
    zero = (e == s).astype(np.int64)
    group = np.zeros(n, np.int64)
    np.cumsum(s[1:] != s[:-1], out=group[1:])
    last_in_group = np.r_[np.flatnonzero(group[1:] != group[:-1]), n - 1][group]
    del group
    cz = np.cumsum(zero)
    later = cz[last_in_group]
    del last_in_group
    later -= cz
    del cz
    later += zero
    del zero
    closed -= later  # now: the events closed before i
    del later
    depth = np.arange(n) - closed
    del closed
    if (depth < 0).any():
        return None
    key = depth * (n + 1)
    key += np.arange(n)
    sorted_idx = np.argsort(key, kind="stable")
    sorted_key = key[sorted_idx]
    want = key  # (depth - 1) * (n + 1) + pos, in place of key
    want -= n + 1
    del key
    j = np.searchsorted(sorted_key, want)
    del sorted_key, want
    j -= 1
    cand = sorted_idx[np.clip(j, 0, None)]
    del sorted_idx
    inner = depth > 0
    has = inner & (j >= 0) & (depth[cand] == depth - 1)
    del j
    if (has != inner).any():
        return None
    del inner, depth
    par = np.where(has, cand, -1)
    p = par[has]
    if (s[p] > s[has]).any() or (e[has] > e[p] + 1e-6).any():
        return None
    return par


def _stack_parents(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    par = np.full(len(s), -1, dtype=np.int64)
    st, en = s.tolist(), e.tolist()
    stack: list[int] = []
    for k in range(len(st)):
        while stack and en[stack[-1]] <= st[k]:
            stack.pop()
        if stack:
            par[k] = stack[-1]
        stack.append(k)
    return par
