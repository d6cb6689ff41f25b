"""Which ``nn.Module`` each host event ran in, forward and backward (analysis layer, pure).

A *module range* is an event named ``nn.Module: <label>``: the agent's ``record_function``
ranges (cat ``user_annotation``, label = qualified name from ``named_modules()``, ``(model)``
for the model itself) or, in traces recorded with ``with_stack=True``, the Python tracer's
``python_function`` events (label such as ``Linear_0``). When a trace has both, only the
``user_annotation`` ranges are used.

- Forward: an event's module is the innermost module range on its own thread that contains it.
- Backward: an autograd op (``autograd::engine::evaluate_function: XBackward0``, or any op whose
  ``Fwd thread id`` is >= 1) carries the ``Sequence number`` of the forward op that created its
  autograd node. The forward op is the latest op before it with that sequence number on the
  forward thread (``Fwd thread id`` numbers threads the way RecordFunction does, not by OS id:
  each number is mapped to the OS thread holding most of the matching forward ops). The whole
  subtree of the autograd op takes that forward op's module, with phase ``backward``.
  ``evaluate_function`` events without a sequence number (``AccumulateGrad``) are backward
  with no module.
- Scopes nest; the innermost one wins (a module re-run inside backward by activation
  checkpointing is that module, in the backward phase).

Every event also gets its ``module_path``: the labels of the module ranges around it, outermost
first, joined by PATH_SEP (for backward, the forward op's path).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from app.analysis.trace.categories import cat_in, name_mask
from app.analysis.trace.event_tree import column_codes, op_tree

__all__ = ["MODULE_PREFIX", "PATH_SEP", "PHASES", "ModuleScopes", "attribute_modules", "is_module_range"]

MODULE_PREFIX = "nn.Module: "
EVALUATE_PREFIX = "autograd::engine::evaluate_function"
PATH_SEP = " / "
PHASES = ("", "forward", "backward")  # codes 0, 1, 2 of the phase column
_TOL_US = 1e-3  # Kineto rounds to the ns: a child may end a rounding step after its parent


@dataclass(frozen=True)
class ModuleScopes:
    """Result of attribute_modules for the queried events, plus the module ranges used."""

    module: pd.Categorical  # innermost module label per queried event ("" outside every module)
    module_path: pd.Categorical  # outermost → innermost labels, joined by PATH_SEP ("" outside)
    phase: pd.Categorical  # "forward" | "backward" | "" (outside every module and autograd op)
    ranges: pd.DataFrame  # one row per module range used: label, module_path, dur_us
    source: str  # "user_annotation" | "python_function" | "" (no module ranges in the trace)


def is_module_range(ev: pd.DataFrame) -> np.ndarray:
    """Events named ``nn.Module: …`` (of any category)."""
    return name_mask(ev, lambda n: n.startswith(MODULE_PREFIX))


def _thread_keys(events: pd.DataFrame) -> np.ndarray:
    pid, tid = column_codes(events["pid"]), column_codes(events["tid"])
    return np.asarray(pid * (int(tid.max(initial=0)) + 2) + tid, dtype=np.int64)


def _categorical(codes: np.ndarray, categories: list[str]) -> pd.Categorical:
    """Codes into ``categories``; a label that repeats a category (e.g. one holding PATH_SEP) is merged."""
    if len(set(categories)) == len(categories):
        return pd.Categorical.from_codes(codes, categories)
    return pd.Categorical(np.asarray(categories, dtype=object)[codes])


def _names(events: pd.DataFrame, pos: np.ndarray) -> list[str]:
    col = events["name"]
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = np.asarray(col.cat.categories, dtype=object)
        return [str(n) for n in cats[col.cat.codes.to_numpy()[pos]]]
    return [str(n) for n in col.to_numpy(dtype=object)[pos]]


def _scope_parents(thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Innermost enclosing scope of each scope (same thread), scopes sorted by (start, -duration)."""
    frame = pd.DataFrame({"pid": np.zeros(len(thread), np.int64), "tid": thread, "ts_us": start,
                          "dur_us": end - start})
    return op_tree(frame)


def _innermost(scope: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
               thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Position of the innermost scope containing each query interval (same thread), or -1.

    ``scope`` = (thread, start, end, parent), sorted by (start, -duration) with ``parent`` from
    _scope_parents. The latest scope starting at or before the query is found by binary search;
    when it does not contain the query, the containing scope is one of its ancestors (scopes
    nest), so the search climbs parents, as many rounds as scopes are deep.
    """
    s_thread, s_start, s_end, s_parent = scope
    out = np.full(len(thread), -1, dtype=np.int64)
    for t in np.unique(s_thread):
        mine = np.flatnonzero(s_thread == t)
        q = np.flatnonzero(thread == t)
        if not len(q):
            continue
        j = np.searchsorted(s_start[mine], start[q], side="right") - 1
        cand = np.where(j >= 0, mine[np.clip(j, 0, None)], -1)
        qe = end[q]
        while True:
            live = np.flatnonzero(cand >= 0)
            bad = live[s_end[cand[live]] + _TOL_US < qe[live]]
            if not len(bad):
                break
            cand[bad] = s_parent[cand[bad]]
        out[q] = cand
    return out


def _paths(labels: np.ndarray, parent: np.ndarray) -> tuple[np.ndarray, list[str], list[str]]:
    """Path code of each range (parents precede children), the path texts and their innermost labels."""
    n = len(labels)
    code = np.full(n, -1, dtype=np.int64)
    texts: list[str] = []
    last: list[str] = []
    memo: dict[tuple[int, str], int] = {}
    depth = np.zeros(n, dtype=np.int64)
    for i in range(n):  # ranges are in time order, so a parent's depth is known before its children's
        if parent[i] >= 0:
            depth[i] = depth[parent[i]] + 1
    for d in range(int(depth.max(initial=-1)) + 1):
        at = np.flatnonzero(depth == d)
        pc = np.where(parent[at] >= 0, code[np.clip(parent[at], 0, None)], -1)
        for i, p, lab in zip(at.tolist(), pc.tolist(), labels[at].tolist()):  # one step per range
            k = memo.get((p, lab))
            if k is None:
                k = memo[(p, lab)] = len(texts)
                texts.append(lab if p < 0 else texts[p] + PATH_SEP + lab)
                last.append(lab)
            code[i] = k
    return code, texts, last


def _module_ranges(events: pd.DataFrame) -> tuple[np.ndarray, str]:
    rng = is_module_range(events)
    if not rng.any():
        return np.array([], dtype=np.int64), ""
    ua = rng & cat_in(events, {"user_annotation"})
    if ua.any():
        return np.flatnonzero(ua), "user_annotation"
    py = rng & cat_in(events, {"python_function"})
    return np.flatnonzero(py), "python_function" if py.any() else ""


def _backward_labels(events: pd.DataFrame, tkey: np.ndarray, fwd: np.ndarray, fwd_path: np.ndarray,
                     roots: np.ndarray) -> np.ndarray:
    """Path code for each backward root (positions in ``events``): that of the latest forward op
    (positions ``fwd``, path codes ``fwd_path``) with its sequence number on its forward thread, or -1."""
    seq = events["sequence"].to_numpy(dtype=np.int64, na_value=-1)
    ftid = events["fwd_tid"].to_numpy(dtype=np.int64, na_value=0)
    pid = column_codes(events["pid"])
    ts = events["ts_us"].to_numpy(float)
    out = np.full(len(roots), -1, dtype=np.int64)
    if not len(fwd) or not len(roots):
        return out
    F = pd.DataFrame({"pid": pid[fwd], "thread": tkey[fwd], "seq": seq[fwd], "ts": ts[fwd], "path": fwd_path})
    R = pd.DataFrame({"pid": pid[roots], "ftid": ftid[roots], "seq": seq[roots], "ts": ts[roots],
                      "row": np.arange(len(roots))})
    # Fwd thread id -> OS thread: the thread holding most of the sequence numbers asked for.
    pairs = R[["pid", "ftid", "seq"]].drop_duplicates().merge(
        F[["pid", "thread", "seq"]].drop_duplicates(), on=["pid", "seq"])
    if not len(pairs):
        return out
    votes = (pairs.groupby(["pid", "ftid", "thread"]).size().reset_index(name="n")
             .sort_values(["n", "thread"], ascending=[False, True], kind="stable")
             .drop_duplicates(["pid", "ftid"]))
    R = R.merge(votes[["pid", "ftid", "thread"]], on=["pid", "ftid"], how="inner")
    matched = pd.merge_asof(R.sort_values("ts", kind="stable"), F.sort_values("ts", kind="stable")[
        ["ts", "thread", "seq", "path"]], on="ts", by=["thread", "seq"], direction="backward")
    ok = matched["path"].notna().to_numpy()
    out[matched["row"].to_numpy()[ok]] = matched["path"].to_numpy()[ok].astype(np.int64)
    return out


@dataclass(frozen=True)
class _Events:
    """The per-event arrays every step needs."""

    tkey: np.ndarray
    start: np.ndarray
    end: np.ndarray
    seq: np.ndarray
    ftid: np.ndarray

    @classmethod
    def of(cls, events: pd.DataFrame) -> _Events:
        start = events["ts_us"].to_numpy(float)
        return cls(_thread_keys(events), start, start + events["dur_us"].to_numpy(float),
                   events["sequence"].to_numpy(dtype=np.int64, na_value=-1),
                   events["fwd_tid"].to_numpy(dtype=np.int64, na_value=0))

    def scope(self, pos: np.ndarray, parent: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return self.tkey[pos], self.start[pos], self.end[pos], parent

    def innermost(self, scope: tuple[np.ndarray, ...], pos: np.ndarray) -> np.ndarray:
        return _innermost(scope, self.tkey[pos], self.start[pos], self.end[pos])  # type: ignore[arg-type]


def _backward_scopes(events: pd.DataFrame, e: _Events, host: np.ndarray, ranges: np.ndarray,
                     r_parent: np.ndarray, r_code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the backward scopes among ``host`` events (autograd ops, evaluate_function
    wrappers) and the module path code each takes (-1: none)."""
    evaluate = name_mask(events, lambda n: n.startswith(EVALUATE_PREFIX))[host]
    autograd = (e.seq[host] >= 0) & (e.ftid[host] >= 1)
    bwd = host[evaluate | autograd]
    fwd = host[(e.seq[host] >= 0) & (e.ftid[host] <= 0)]
    inner = e.innermost(e.scope(ranges, r_parent), fwd)
    fwd_path = np.where(inner >= 0, r_code[np.clip(inner, 0, None)], -1)
    roots = host[autograd]
    path = np.full(len(bwd), -1, dtype=np.int64)
    path[np.searchsorted(bwd, roots)] = _backward_labels(events, e.tkey, fwd, fwd_path, roots)
    return bwd, path


def _innermost_scope(e: _Events, ranges: np.ndarray, r_code: np.ndarray, bwd: np.ndarray, bwd_path: np.ndarray,
                     query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(path code, phase code) of each query event from the innermost scope around it."""
    pos = np.r_[ranges, bwd]
    order = np.lexsort((-(e.end[pos] - e.start[pos]), e.start[pos]))
    pos = pos[order]
    s_path = np.r_[r_code, bwd_path][order]
    s_bwd = np.r_[np.zeros(len(ranges), bool), np.ones(len(bwd), bool)][order]
    s_parent = _scope_parents(e.tkey[pos], e.start[pos], e.end[pos])
    for _ in range(len(pos)):  # in backward if any enclosing scope is (rounds = nesting depth)
        nxt = s_bwd | ((s_parent >= 0) & s_bwd[np.clip(s_parent, 0, None)])
        if (nxt == s_bwd).all():
            break
        s_bwd = nxt
    inner = e.innermost(e.scope(pos, s_parent), query)
    at = np.clip(inner, 0, None)
    path = np.where(inner >= 0, s_path[at], -1)
    phase = np.where(inner >= 0, np.where(s_bwd[at], 2, np.where(path >= 0, 1, 0)), 0)
    return path, phase


def attribute_modules(events: pd.DataFrame, query_pos: np.ndarray) -> ModuleScopes:
    """Module, module path and phase of the events at positions ``query_pos`` of ``events``
    (a trace's event table, sorted by start then longest first as load_trace leaves it); the
    backward ops looked at are those among the queried events."""
    query_pos = np.asarray(query_pos, dtype=np.int64)
    ranges, source = _module_ranges(events)
    if not len(ranges):
        blank = pd.Categorical.from_codes(np.zeros(len(query_pos), np.int8), [""])
        empty = pd.DataFrame({"label": pd.Series(dtype=str), "module_path": pd.Series(dtype=str),
                              "dur_us": pd.Series(dtype=float)})
        return ModuleScopes(blank, blank, pd.Categorical.from_codes(np.zeros(len(query_pos), np.int8), PHASES),
                            empty, "")
    e = _Events.of(events)
    labels = np.asarray([n[len(MODULE_PREFIX):] for n in _names(events, ranges)], dtype=object)
    r_parent = _scope_parents(e.tkey[ranges], e.start[ranges], e.end[ranges])
    r_code, texts, last = _paths(labels, r_parent)
    host = query_pos if (np.diff(query_pos) > 0).all() else np.unique(query_pos)  # time order
    bwd, bwd_path = _backward_scopes(events, e, host, ranges, r_parent, r_code)
    path, phase = _innermost_scope(e, ranges, r_code, bwd, bwd_path, query_pos)
    # Categorical codes: 0 is "", path k is k + 1; the module is the path's last label.
    label_names = sorted(set(last))
    index = {lab: i + 1 for i, lab in enumerate(label_names)}
    label_code = np.asarray([index[x] for x in last], dtype=np.int64)
    return ModuleScopes(
        module=_categorical(np.where(path >= 0, label_code[np.clip(path, 0, None)], 0), [""] + label_names),
        module_path=_categorical(path + 1, [""] + texts),
        phase=pd.Categorical.from_codes(phase, PHASES),
        ranges=pd.DataFrame({"label": labels.astype(str), "module_path": [texts[c] for c in r_code],
                             "dur_us": e.end[ranges] - e.start[ranges]}),
        source=source,
    )
