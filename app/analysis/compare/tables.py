"""Where the time went: per-step breakdown, operator and kernel diffs of two trace analyses (analysis layer).

Everything is normalised per profiled step (per rank and step) so that a trace of 3 steps and a
trace of 10 steps compare fairly: ``self_us`` here means microseconds per step on average.
Deltas are always candidate minus baseline.
"""
from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any

import numpy as np
import pandas as pd

from app.analysis.compare.step_ops import compute_step_kernels, compute_step_ops, reduce_steps
from app.analysis.trace.categories import DEVICE_CATEGORIES
from app.analysis.trace.ops import compute_op_table
from app.analysis.trace.summary import TraceAnalysis
from app.data.trace import TraceSet

__all__ = [
    "DEVICE_CATEGORIES",
    "PHASE_CATEGORIES",
    "OpGrouping",
    "profiled_step_count",
    "diff_breakdown",
    "diff_ops",
    "diff_kernels",
    "diff_tables",
]

# The training-loop view; what the phases do not cover is reported as "rest".
PHASE_CATEGORIES = ("forward", "backward", "optimizer")

BREAKDOWN_COLUMNS = ["view", "category", "baseline_us", "candidate_us", "delta_us", "delta_share"]


class OpGrouping(StrEnum):
    """How operators of the two sides are matched."""

    NAME = "name"
    SHAPE = "shape"  # name + input shapes
    MODULE = "module"  # name + the nn.Module the op ran in (app/analysis/trace/op_modules.py)


_GROUP_KEY = {OpGrouping.SHAPE: "input_shapes", OpGrouping.MODULE: "module"}


def profiled_step_count(analysis: TraceAnalysis | None) -> int:
    """Number of (rank, step) rows of the analysis' step table; 1 when no steps were marked
    (the whole trace then counts as one step)."""
    steps = getattr(analysis, "steps", None)
    return max(1, 0 if steps is None else len(steps))


def _mean_steps(steps: pd.DataFrame | None) -> pd.Series | None:
    if steps is None or len(steps) == 0:
        return None
    numeric = steps.drop(columns=[c for c in ("rank", "step") if c in steps.columns])
    return numeric.apply(pd.to_numeric, errors="coerce").mean()


def diff_breakdown(baseline_steps: pd.DataFrame | None, candidate_steps: pd.DataFrame | None) -> pd.DataFrame:
    """Return the per-step mean of every category on both sides, with columns BREAKDOWN_COLUMNS.

    ``view`` is ``device`` (kernel, memcpy, ... other: they add up to the step) or ``phase``
    (forward, backward, optimizer, rest). A ``step`` row of each view holds the mean step
    duration, so ``delta_share`` (delta / baseline step) shows each category's part of the
    change. Empty when either side has no steps.
    """
    a, b = _mean_steps(baseline_steps), _mean_steps(candidate_steps)
    if a is None or b is None:
        return pd.DataFrame(columns=BREAKDOWN_COLUMNS)
    rows: list[dict[str, Any]] = []
    base_step = float(a.get("duration_us", np.nan))
    for view, cats in (("device", DEVICE_CATEGORIES), ("phase", PHASE_CATEGORIES)):
        present = [c for c in cats if f"{c}_us" in a.index and f"{c}_us" in b.index]
        for c in present:
            rows.append({"view": view, "category": c, "baseline_us": float(a[f"{c}_us"]),
                         "candidate_us": float(b[f"{c}_us"])})
        rest_a = float(a["duration_us"]) - sum(float(a[f"{c}_us"]) for c in present)
        rest_b = float(b["duration_us"]) - sum(float(b[f"{c}_us"]) for c in present)
        # Categories that do not add up to the step (overlap or gaps) show as one honest residual.
        if abs(rest_a) > 1e-6 * abs(base_step) or abs(rest_b) > 1e-6 * abs(base_step):
            rows.append({"view": view, "category": "rest" if view == "phase" else "unattributed",
                         "baseline_us": rest_a, "candidate_us": rest_b})
        rows.append({"view": view, "category": "step", "baseline_us": float(a["duration_us"]),
                     "candidate_us": float(b["duration_us"])})
    out = pd.DataFrame(rows)
    out["delta_us"] = out["candidate_us"] - out["baseline_us"]
    out["delta_share"] = out["delta_us"] / base_step if base_step else np.nan
    return out[BREAKDOWN_COLUMNS]


def _per_step(table: pd.DataFrame, keys: list[str], values: Sequence[str], steps: int) -> pd.DataFrame:
    present = [v for v in values if v in table.columns]
    t = table[keys + present].copy()
    for v in present:
        t[v] = pd.to_numeric(t[v], errors="coerce").fillna(0.0)
    for k in keys:
        t[k] = t[k].astype(str)
    g = t.groupby(keys, sort=False, observed=True)[present].sum() / float(steps)
    for v in values:
        if v not in g.columns:
            g[v] = 0.0
    return g


def diff_tables(
    baseline: pd.DataFrame,
    candidate: pd.DataFrame,
    *,
    keys: list[str],
    values: Sequence[str],
    sort_by: str,
    baseline_steps: int = 1,
    candidate_steps: int = 1,
) -> pd.DataFrame:
    """Outer-join two tables on ``keys``, divide ``values`` by each side's step count and return
    ``baseline_<v>``, ``candidate_<v>`` and ``delta_<v>`` per value, ``change`` (added /
    removed / both) and rows sorted by |delta_<sort_by>| descending (then by key)."""
    a = _per_step(baseline, keys, values, baseline_steps)
    b = _per_step(candidate, keys, values, candidate_steps)
    joined = pd.merge(a.add_suffix("_a"), b.add_suffix("_b"), how="outer", left_index=True, right_index=True)
    out = pd.DataFrame(index=joined.index)
    in_a = joined.index.isin(a.index)
    in_b = joined.index.isin(b.index)
    for v in values:
        out[f"baseline_{v}"] = joined[f"{v}_a"].fillna(0.0).to_numpy()
        out[f"candidate_{v}"] = joined[f"{v}_b"].fillna(0.0).to_numpy()
        out[f"delta_{v}"] = out[f"candidate_{v}"] - out[f"baseline_{v}"]
    out["change"] = np.where(in_a & in_b, "both", np.where(in_a, "removed", "added"))
    out = out.reset_index()
    order = np.lexsort((out[keys[0]].to_numpy(str), -out[f"delta_{sort_by}"].abs().to_numpy()))
    return out.iloc[order].reset_index(drop=True)


def _op_table(analysis: TraceAnalysis | None, traces: TraceSet, grouping: OpGrouping) -> pd.DataFrame:
    if grouping is OpGrouping.NAME or not traces:
        ops = getattr(analysis, "ops", None)
        return ops if ops is not None else pd.DataFrame(columns=["name"])
    return compute_op_table(list(traces), group_by=grouping.value)


_OP_VALUES = ("calls", "self_us", "total_us", "device_self_us")
_KERNEL_VALUES = ("calls", "total_us")


def _per_step_path(traces: tuple[TraceSet, TraceSet], kept: tuple[pd.DataFrame | None, pd.DataFrame | None]) -> bool:
    """Whether both sides can be cut into profiled steps (their events and the kept steps given)."""
    return all(len(t) > 0 for t in traces) and all(k is not None and len(k) > 0 for k in kept)


def _with_spread(out: pd.DataFrame, per_step: bool) -> pd.DataFrame:
    """Spread columns (µs per step, step-to-step standard deviation): NaN without per-step data."""
    out = out.drop(columns=[c for c in ("delta_spread_us",) if c in out.columns])
    if not per_step:
        out["baseline_spread_us"] = np.nan
        out["candidate_spread_us"] = np.nan
    return out


def diff_ops(
    baseline: TraceAnalysis | None,
    candidate: TraceAnalysis | None,
    *,
    grouping: OpGrouping = OpGrouping.NAME,
    baseline_traces: TraceSet = (),
    candidate_traces: TraceSet = (),
    baseline_kept: pd.DataFrame | None = None,
    candidate_kept: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Operators of both sides matched by name (or name + input shapes, or name + module), per
    profiled step.

    Columns: ``name`` [``input_shapes`` | ``module``], ``baseline_calls``/``candidate_calls`` (calls per
    step), ``baseline_self_us``/``candidate_self_us``/``delta_us`` (host self time per step),
    ``baseline_total_us``/``candidate_total_us``, ``baseline_device_self_us``/
    ``candidate_device_self_us``/``device_delta_us``, ``change``, ``baseline_spread_us``/
    ``candidate_spread_us`` (standard deviation of the op's self time per step over the steps
    averaged); sorted by |delta_us|.

    With both sides' traces and ``*_kept`` (the (rank, step) rows to average, e.g.
    step_window.typical_steps) only those steps count and the spread is known; otherwise the
    whole profiled window is divided by its step count and the spread is NaN.
    """
    if _per_step_path((baseline_traces, candidate_traces), (baseline_kept, candidate_kept)):
        key = _GROUP_KEY.get(grouping)
        keys = ["name"] + ([key] if key else [])
        ta, tb = (reduce_steps(compute_step_ops(list(tr), key), kept, keys, _OP_VALUES, "self_us")
                  for tr, kept in ((baseline_traces, baseline_kept), (candidate_traces, candidate_kept)))
        out = diff_tables(ta, tb, keys=keys, values=(*_OP_VALUES, "spread_us"), sort_by="self_us")
        per_step = True
    else:
        ta = _op_table(baseline, baseline_traces, grouping)
        tb = _op_table(candidate, candidate_traces, grouping)
        extra = _GROUP_KEY.get(grouping)
        keys = ["name", extra] if extra and extra in ta.columns and extra in tb.columns else ["name"]
        out = diff_tables(ta, tb, keys=keys, values=_OP_VALUES, sort_by="self_us",
                          baseline_steps=profiled_step_count(baseline), candidate_steps=profiled_step_count(candidate))
        per_step = False
    out = out.rename(columns={"delta_self_us": "delta_us", "delta_device_self_us": "device_delta_us"}).drop(
        columns=["delta_calls", "delta_total_us"])
    return _with_spread(out, per_step)


def diff_kernels(baseline: TraceAnalysis | None, candidate: TraceAnalysis | None, *, baseline_traces: TraceSet = (),
                 candidate_traces: TraceSet = (), baseline_kept: pd.DataFrame | None = None,
                 candidate_kept: pd.DataFrame | None = None) -> pd.DataFrame:
    """Device kernels of both sides matched by name, per profiled step: ``name``,
    ``baseline_calls``/``candidate_calls``, ``baseline_us``/``candidate_us``/``delta_us``,
    ``change``, ``baseline_spread_us``/``candidate_spread_us`` (standard deviation of the kernel's
    time per step); sorted by |delta_us|. Steps as in ``diff_ops``. Empty when neither side has
    kernels."""
    cols = ["name", "baseline_calls", "candidate_calls", "baseline_us", "candidate_us", "delta_us", "change",
            "baseline_spread_us", "candidate_spread_us"]
    if _per_step_path((baseline_traces, candidate_traces), (baseline_kept, candidate_kept)):
        ka, kb = (reduce_steps(compute_step_kernels(list(tr)), kept, ["name"], _KERNEL_VALUES, "total_us")
                  for tr, kept in ((baseline_traces, baseline_kept), (candidate_traces, candidate_kept)))
        values: tuple[str, ...] = (*_KERNEL_VALUES, "spread_us")
        steps, per_step = (1, 1), True
    else:
        ka = getattr(baseline, "kernels", None)
        kb = getattr(candidate, "kernels", None)
        ka = ka if ka is not None else pd.DataFrame(columns=["name", "calls", "total_us"])
        kb = kb if kb is not None else pd.DataFrame(columns=["name", "calls", "total_us"])
        values, per_step = _KERNEL_VALUES, False
        steps = (profiled_step_count(baseline), profiled_step_count(candidate))
    if len(ka) == 0 and len(kb) == 0:
        return pd.DataFrame(columns=cols)
    out = diff_tables(ka, kb, keys=["name"], values=values, sort_by="total_us",
                      baseline_steps=steps[0], candidate_steps=steps[1])
    out = out.rename(columns={"baseline_total_us": "baseline_us", "candidate_total_us": "candidate_us",
                              "delta_total_us": "delta_us"}).drop(columns=["delta_calls"])
    return _with_spread(out, per_step)[cols]
