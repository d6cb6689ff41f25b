"""Which ``nn.Module`` each host event ran in, forward and backward (analysis layer, pure).

A *module range* is an event named ``nn.Module: <label>``: the agent's ``record_function``
ranges (cat ``user_annotation``, label = qualified name from ``named_modules()``, ``(root)``
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

from app.analysis.breakdown import cat_in, name_mask

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


def _codes(col: pd.Series) -> np.ndarray:
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy().astype(np.int64)
    return pd.factorize(col)[0].astype(np.int64)


def _thread_keys(events: pd.DataFrame) -> np.ndarray:
    pid, tid = _codes(events["pid"]), _codes(events["tid"])
    return pid * (int(tid.max(initial=0)) + 2) + tid


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
    from app.analysis.ops import op_tree  # ops imports this module

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


def _backward_labels(events: pd.DataFrame, host_pos: np.ndarray, tkey: np.ndarray, fwd_path: np.ndarray,
                     roots: np.ndarray) -> np.ndarray:
    """Path code for each backward root (positions in ``events``): the forward op's, or -1."""
    seq = events["sequence"].to_numpy(dtype=np.int64, na_value=-1)
    ftid = events["fwd_tid"].to_numpy(dtype=np.int64, na_value=0)
    pid = _codes(events["pid"])
    ts = events["ts_us"].to_numpy(float)
    fwd = host_pos[(seq[host_pos] >= 0) & (ftid[host_pos] <= 0)]
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


def attribute_modules(events: pd.DataFrame, query_pos: np.ndarray) -> ModuleScopes:
    """Module, module path and phase of the events at positions ``query_pos`` of ``events``
    (a trace's event table, sorted by start then longest first as load_trace leaves it)."""
    query_pos = np.asarray(query_pos, dtype=np.int64)
    ranges, source = _module_ranges(events)
    empty = pd.DataFrame({"label": pd.Series(dtype=str), "module_path": pd.Series(dtype=str),
                          "dur_us": pd.Series(dtype=float)})
    if not len(ranges):
        blank = pd.Categorical.from_codes(np.zeros(len(query_pos), np.int8), [""])
        return ModuleScopes(blank, blank, pd.Categorical.from_codes(np.zeros(len(query_pos), np.int8), PHASES),
                            empty, "")
    tkey = _thread_keys(events)
    start = events["ts_us"].to_numpy(float)
    end = start + events["dur_us"].to_numpy(float)
    labels = np.asarray([n[len(MODULE_PREFIX):] for n in _names(events, ranges)], dtype=object)
    m_parent = _scope_parents(tkey[ranges], start[ranges], end[ranges])
    m_code, texts, last = _paths(labels, m_parent)
    mod_scope = (tkey[ranges], start[ranges], end[ranges], m_parent)

    # Backward scopes: autograd ops (and their evaluate_function wrappers without a sequence number).
    seq = events["sequence"].to_numpy(dtype=np.int64, na_value=-1)
    ftid = events["fwd_tid"].to_numpy(dtype=np.int64, na_value=0)
    evaluate = name_mask(events, lambda n: n.startswith(EVALUATE_PREFIX))
    qmask = np.zeros(len(events), bool)
    qmask[query_pos] = True
    host_pos = np.flatnonzero(qmask)  # the queried events, in time order
    bwd = np.flatnonzero(qmask & ((evaluate) | ((seq >= 0) & (ftid >= 1))))
    fwd = host_pos[(seq[host_pos] >= 0) & (ftid[host_pos] <= 0)]
    inner = _innermost(mod_scope, tkey[fwd], start[fwd], end[fwd])
    fwd_path = np.where(inner >= 0, m_code[np.clip(inner, 0, None)], -1)
    roots = bwd[(seq[bwd] >= 0) & (ftid[bwd] >= 1)]
    root_path = _backward_labels(events, host_pos, tkey, fwd_path, roots)
    bwd_path = np.full(len(bwd), -1, dtype=np.int64)
    bwd_path[np.searchsorted(bwd, roots)] = root_path

    # All scopes together, innermost wins.
    pos = np.r_[ranges, bwd]
    order = np.lexsort((-(end[pos] - start[pos]), start[pos]))
    pos = pos[order]
    s_path = np.r_[m_code, bwd_path][order]
    s_bwd = np.r_[np.zeros(len(ranges), bool), np.ones(len(bwd), bool)][order]
    s_parent = _scope_parents(tkey[pos], start[pos], end[pos])
    for _ in range(len(pos)):  # in backward if any enclosing scope is (rounds = nesting depth)
        nxt = s_bwd | ((s_parent >= 0) & s_bwd[np.clip(s_parent, 0, None)])
        if (nxt == s_bwd).all():
            break
        s_bwd = nxt
    scope = (tkey[pos], start[pos], end[pos], s_parent)
    inner = _innermost(scope, tkey[query_pos], start[query_pos], end[query_pos])
    has = inner >= 0
    path = np.where(has, s_path[np.clip(inner, 0, None)], -1)
    phase = np.where(has, np.where(s_bwd[np.clip(inner, 0, None)], 2, np.where(path >= 0, 1, 0)), 0)
    # Categorical codes: 0 is "", path k is k + 1; the module is the path's last label.
    label_names = sorted(set(last))
    index = {lab: i + 1 for i, lab in enumerate(label_names)}
    label_code = np.asarray([index[x] for x in last], dtype=np.int64)
    mod_codes = np.where(path >= 0, label_code[np.clip(path, 0, None)], 0)
    ranges_df = pd.DataFrame({"label": labels.astype(str), "module_path": [texts[c] for c in m_code],
                              "dur_us": end[ranges] - start[ranges]})
    return ModuleScopes(
        module=_categorical(mod_codes, [""] + label_names),
        module_path=_categorical(path + 1, [""] + texts),
        phase=pd.Categorical.from_codes(phase, PHASES),
        ranges=ranges_df,
        source=source,
    )
