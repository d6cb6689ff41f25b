"""Module view: where the time goes per ``nn.Module``, forward and backward (analysis layer, pure).

What torch-tb-profiler's "Module View" gave users, from the module ranges of the traces
(app/analysis/trace/op_modules.py decides each op's module). Per module label:

- ``calls``: forward calls (module ranges) in the traces;
- ``forward_self_us`` / ``backward_self_us``: summed host self time of the ops attributed to the
  module in each phase (ops run directly in it, not in a submodule); ``self_us`` is their sum.
  ``record_function`` ranges are not ops (ops.is_op_row, as in the op table): their children
  count, their own gaps do not;
- ``total_us``: ``self_us`` of the module and of every module under it. "Under" follows the
  nesting recorded in the trace (each op carries the path of module ranges around it, outermost
  first; for backward ops, the path of the forward op), so a module counts the ops of every
  module it called, and an op counts once per module even when a label recurs in its path;
- ``device_self_us`` / ``device_total_us``: the same for device time (kernels, copies) launched
  by those ops;
- ``parent``: the module it is most often called from ("" at the top), ``depth`` its level;
- ``share`` / ``total_share``: ``self_us`` / ``total_us`` over the summed duration of the
  profiled steps (or, without steps, over all host self time).
Module ranges themselves are never counted: only the ops inside them are.
"""
from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pandas as pd

from app.analysis.trace.op_modules import PATH_SEP
from app.analysis.trace.ops import compute_op_events_with_scopes, is_op_row, profiled_window, step_total_us
from app.data.trace import TraceSet

__all__ = ["MODULE_COLUMNS", "compute_module_table", "has_module_ranges"]

MODULE_COLUMNS = ["module", "parent", "depth", "calls", "forward_self_us", "backward_self_us", "self_us",
                  "total_us", "device_self_us", "device_total_us", "share", "total_share"]


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object if c in ("module", "parent") else
                                      (np.int64 if c in ("depth", "calls") else float)) for c in MODULE_COLUMNS})


def has_module_ranges(table: pd.DataFrame) -> bool:
    """True when a module table (or an op table grouped by module) attributes any time to a module."""
    return "module" in table.columns and bool((table["module"].astype(str) != "").any())


def _per_path(traces: TraceSet) -> tuple[pd.DataFrame, pd.DataFrame, float]:
    """Self times per (module_path, phase), the module ranges, and the host self time of all ops."""
    sums, ranges, host_total = [], [], 0.0
    for t in traces:
        window = profiled_window(t)  # the op table's cut to the profiled steps
        ev, scopes = compute_op_events_with_scopes(t.events, window=window)
        ev = ev[is_op_row(ev) & (ev["inside"].to_numpy() if window is not None else True)]
        host_total += float(ev["self_us"].sum())
        sums.append(ev.groupby(["module_path", "phase"], observed=True, sort=False)[
            ["self_us", "device_self_us"]].sum().reset_index()
            .astype({"module_path": str, "phase": str}))
        if scopes is not None:
            ranges.append(scopes.ranges)
    per_path = pd.concat(sums, ignore_index=True) if sums else pd.DataFrame(
        columns=["module_path", "phase", "self_us", "device_self_us"])
    per_path = per_path[per_path["module_path"] != ""]
    per_path = per_path.groupby(["module_path", "phase"], sort=False).sum().reset_index()
    rng = pd.concat(ranges, ignore_index=True) if ranges else pd.DataFrame(columns=["label", "module_path"])
    return per_path, rng, host_total


def _tree(rng: pd.DataFrame, paths: list[str]) -> tuple[dict[str, str], dict[str, int]]:
    """Most frequent parent label of each label (ties: first seen) and its depth."""
    parents: dict[str, Counter[str]] = defaultdict(Counter)
    weights = Counter(rng["module_path"].astype(str)) if len(rng) else Counter()
    for p in paths:
        weights.setdefault(p, 0)
    for path, n in weights.items():
        parts = path.split(PATH_SEP)
        parents[parts[-1]][parts[-2] if len(parts) > 1 else ""] += max(n, 1)
    parent = {lab: c.most_common(1)[0][0] for lab, c in parents.items()}
    depth: dict[str, int] = {}
    for lab in parent:
        d, seen, cur = 0, {lab}, parent[lab]
        while cur and cur not in seen and cur in parent:  # a label may recur in its own chain
            seen.add(cur)
            cur, d = parent[cur], d + 1
        depth[lab] = d
    return parent, depth


def compute_module_table(traces: TraceSet, *, steps_us: float | None = None) -> pd.DataFrame:
    """One row per module label, columns MODULE_COLUMNS (see the module docstring), sorted by
    ``total_us`` then ``self_us`` descending. Several traces (ranks) are summed. Empty when the
    traces have no module ranges."""
    per_path, rng, host_total = _per_path(traces)
    if not len(per_path) and not len(rng):
        return _empty()
    if steps_us is None:
        steps_us = sum(step_total_us(t) for t in traces)
    stats: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for path, phase, self_us, dev in per_path.itertuples(index=False, name=None):
        labels = path.split(PATH_SEP)
        own = stats[labels[-1]]
        own[f"{phase}_self_us"] += self_us
        own["device_self_us"] += dev
        for lab in dict.fromkeys(labels):  # once per distinct label of the path
            stats[lab]["total_us"] += self_us
            stats[lab]["device_total_us"] += dev
    calls = Counter(rng["label"].astype(str)) if len(rng) else Counter()
    parent, depth = _tree(rng, list(per_path["module_path"]))
    rows = []
    for lab in sorted(set(stats) | set(calls)):
        s = stats[lab]
        rows.append({"module": lab, "parent": parent.get(lab, ""), "depth": depth.get(lab, 0),
                     "calls": calls.get(lab, 0), "forward_self_us": s["forward_self_us"],
                     "backward_self_us": s["backward_self_us"],
                     "self_us": s["forward_self_us"] + s["backward_self_us"], "total_us": s["total_us"],
                     "device_self_us": s["device_self_us"], "device_total_us": s["device_total_us"]})
    out = pd.DataFrame(rows)
    denom = steps_us if steps_us and steps_us > 0 else (host_total or 1.0)
    out["share"] = out["self_us"] / denom
    out["total_share"] = out["total_us"] / denom
    out = out.astype({"depth": np.int64, "calls": np.int64})
    return out[MODULE_COLUMNS].sort_values(["total_us", "self_us", "module"], ascending=[False, False, True],
                                           ignore_index=True)
