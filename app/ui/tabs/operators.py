"""Run page tab "Operators": op table (self/total, calls, % of step), top-N chart, and the ops
grouped by input shape or by nn.Module with a module view (UI layer)."""

from __future__ import annotations

from enum import StrEnum

import pandas as pd
import streamlit as st

from app.analysis.run.summary import compute_annotations_view, compute_ops_view
from app.analysis.trace.modules import has_module_ranges
from app.charts.operators import top_modules_chart, top_ops_chart
from app.presentation.units import format_shape
from app.ui.tabs import RunContext
from app.ui.trace_view import (
    cached_annotation_table,
    cached_module_table,
    cached_op_table,
    load_trace_analysis,
    rank_rows,
    render_trace_warnings,
)

__all__ = ["TITLE", "render"]

TITLE = "Operators"

_VALUES = {"self_us": "Self time", "total_us": "Total time", "device_self_us": "Device self time"}
_COLUMNS = {
    "name": st.column_config.TextColumn("Operator"),
    "calls": st.column_config.NumberColumn("Calls", format="%d"),
    "self_ms": st.column_config.NumberColumn(
        "Self (ms)", format="%.3f", help="time in the op itself, children excluded"
    ),
    "total_ms": st.column_config.NumberColumn("Total (ms)", format="%.3f", help="time including child ops"),
    "device_self_ms": st.column_config.NumberColumn(
        "Device self (ms)", format="%.3f", help="GPU kernel time launched by the op"
    ),
    "mean_ms": st.column_config.NumberColumn("Mean (ms)", format="%.4f", help="total time / calls"),
    "pct_of_step": st.column_config.NumberColumn(
        "% of step", format="%.2f", help="self time / time of the profiled steps, at most 100 (self time is "
                                          "summed over the threads an op ran on)"
    ),
    "threads": st.column_config.NumberColumn("Threads", format="%d", help="threads the op ran on"),
}


class Grouping(StrEnum):
    """How the operator table is split (the values of the "Group by" radio)."""

    NONE = "none"
    SHAPE = "shape"  # by input shapes
    MODULE = "module"  # by the nn.Module the op ran in


_GROUPS = {Grouping.NONE: "None", Grouping.SHAPE: "Input shape", Grouping.MODULE: "Module"}
NO_MODULES_HINT = (
    "These traces have no module scopes, so operators cannot be grouped by module. Runs recorded "
    "with `torchscope run` from this version have them (the agent wraps every `nn.Module` forward "
    "in a profiler range). Traces recorded elsewhere with `torch.profiler.profile(with_stack=True)` "
    "work too: their Python tracer events name the modules."
)
_MODULE_COLUMNS = {
    "module": st.column_config.TextColumn("Module", help="qualified name (`layer1.0.conv1`); `(model)` is the model"),
    "parent": st.column_config.TextColumn("Called from"),
    "calls": st.column_config.NumberColumn("Calls", format="%d", help="forward calls"),
    "forward_ms": st.column_config.NumberColumn(
        "Forward self (ms)", format="%.3f", help="self time of the ops run directly in the module's forward"
    ),
    "backward_ms": st.column_config.NumberColumn(
        "Backward self (ms)", format="%.3f", help="self time of the backward (autograd) ops of those forward ops"
    ),
    "self_ms": st.column_config.NumberColumn("Self (ms)", format="%.3f", help="forward + backward self time"),
    "total_ms": st.column_config.NumberColumn(
        "Total (ms)", format="%.3f", help="self time of the module and of every module under it"
    ),
    "device_total_ms": st.column_config.NumberColumn(
        "Device total (ms)", format="%.3f", help="GPU time launched by the module and its submodules"
    ),
    "pct_of_step": st.column_config.NumberColumn(
        "% of step", format="%.2f", help="total time / time of the profiled steps (host time of all threads)"
    ),
}


def _table(ops: pd.DataFrame) -> pd.DataFrame:
    shown = ops[["name", "calls"]].copy()
    for col in ("self_us", "total_us", "device_self_us", "mean_us"):
        if col in ops.columns:
            shown[col.replace("_us", "_ms")] = ops[col] / 1e3
    # Self time sums the op's threads: an op on several threads at once can pass 100 % (capped, explained).
    shown["pct_of_step"] = pd.to_numeric(ops["pct_of_step"], errors="coerce").clip(upper=100.0)
    if "threads" in ops.columns and (pd.to_numeric(ops["threads"], errors="coerce") > 1).any():
        shown["threads"] = ops["threads"]
    return shown


def _capped_note(view: pd.DataFrame) -> str:
    """A sentence naming the ops whose % of step is capped at 100, or ""."""
    if "threads" not in view.columns:
        return ""
    capped = view[(pd.to_numeric(view["pct_of_step"], errors="coerce") > 100) & (view["threads"] > 1)]
    if not len(capped):
        return ""
    names = ", ".join(f"`{n}` ({float(p):.0f} % over {int(t)} threads)"
                      for n, p, t in zip(capped["name"].head(5), capped["pct_of_step"], capped["threads"]))
    return (f" {names}: self time summed over several threads passes the steps' wall time, so the "
            "column shows 100.")


def _render_by_shape(ctx: RunContext, text: str) -> None:
    st.subheader("Operators by input shape")
    by_shape = cached_op_table(ctx, group_by=Grouping.SHAPE)
    if by_shape.empty or (by_shape["input_shapes"].astype(str).str.len() == 0).all():
        st.info(
            "These traces have no input shapes: record with `record_shapes=True` "
            "(`torchscope run` records them by default) to group operators by input shape."
        )
        return
    if text:
        by_shape = by_shape[by_shape["name"].astype(str).str.contains(text, case=False, regex=False)]
    shown = by_shape[["name", "input_shapes"]].copy()
    shown["input_shapes"] = by_shape["input_shapes"].map(format_shape)
    shown["calls"] = by_shape["calls"]
    shown["self_ms"] = by_shape["self_us"] / 1e3
    shown["total_ms"] = by_shape["total_us"] / 1e3
    shown["mean_ms"] = by_shape["mean_us"] / 1e3
    st.dataframe(
        shown.head(1000),
        hide_index=True,
        width="stretch",
        key=ctx.key("ops_shape_table"),
        column_config={**_COLUMNS, "input_shapes": st.column_config.TextColumn("Input shapes")},
    )


def _module_view(modules: pd.DataFrame, gpu: bool) -> pd.DataFrame:
    shown = modules[["module", "parent", "calls"]].copy()
    for src, dst in (("forward_self_us", "forward_ms"), ("backward_self_us", "backward_ms"), ("self_us", "self_ms"),
                     ("total_us", "total_ms")):
        shown[dst] = modules[src] / 1e3
    if gpu:
        shown["device_total_ms"] = modules["device_total_us"] / 1e3
    shown["pct_of_step"] = modules["total_share"] * 100
    return shown


def _render_by_module(ctx: RunContext, text: str, n: int) -> None:
    modules = cached_module_table(ctx)
    by_module = cached_op_table(ctx, group_by=Grouping.MODULE)
    if modules.empty or not has_module_ranges(by_module):
        st.info(NO_MODULES_HINT)
        return
    st.subheader("Modules")
    rank_by = st.radio("Modules by", ["self_us", "total_us"], horizontal=True, key=ctx.key("ops_module_value"),
                       format_func={"self_us": "Self time (forward + backward)",
                                    "total_us": "Total time (with submodules)"}.get)
    st.vega_lite_chart(top_modules_chart(modules, n=n, value=rank_by), width="stretch",
                       key=ctx.key("ops_module_fig"))
    gpu = bool((modules["device_total_us"] > 0).any())
    st.dataframe(_module_view(modules.sort_values(rank_by, ascending=False, kind="stable"), gpu),
                 hide_index=True, width="stretch", column_config=_MODULE_COLUMNS, key=ctx.key("ops_module_table"))
    outside = float(by_module.loc[by_module["module"].astype(str) == "", "self_us"].sum())
    total = float(by_module["self_us"].sum()) or 1.0
    st.caption(
        f"{len(modules)} modules. Backward ops count for the module whose forward op created them. "
        f"{100 * outside / total:.1f}% of the operators' self time ran outside every module "
        "(optimizer, data loading, functions called outside a module's forward)."
    )
    st.subheader("Operators by module")
    if text:
        hit = by_module["name"].astype(str).str.contains(text, case=False, regex=False) | by_module[
            "module"].astype(str).str.contains(text, case=False, regex=False)
        by_module = by_module[hit]
    shown = by_module[["module", "name", "calls"]].copy()
    shown["module"] = shown["module"].astype(str).replace("", "(outside modules)")
    for col in ("self_us", "total_us", "mean_us"):
        shown[col.replace("_us", "_ms")] = by_module[col] / 1e3
    if gpu:
        shown["device_self_ms"] = by_module["device_self_us"] / 1e3
    st.dataframe(shown.head(1000), hide_index=True, width="stretch", key=ctx.key("ops_module_ops"),
                 column_config={**_COLUMNS, "module": _MODULE_COLUMNS["module"]})


def _render_annotations(ctx: RunContext, analysis: object, text: str) -> None:
    view = compute_annotations_view(cached_annotation_table(ctx), rank_rows(getattr(analysis, "steps", None),
                                                                             ctx.rank), text)
    if view.empty:
        st.info("No `record_function` ranges in these traces" + (f" matching “{text}”." if text else "."))
        return
    st.dataframe(_table(view), hide_index=True, width="stretch", key=ctx.key("ops_annotations_table"),
                 column_config={**_COLUMNS, "name": st.column_config.TextColumn("Annotation"),
                                "pct_of_step": st.column_config.NumberColumn(
                                    "% of step", format="%.2f",
                                    help="wall time of the range (children included) / time of the profiled steps; "
                                         "ranges nest, so the column does not add up")})


def render(ctx: RunContext) -> None:
    """Searchable op table, a top-N chart and an optional grouping by input shape or module."""
    analysis = load_trace_analysis(ctx)
    if analysis is None:
        return
    render_trace_warnings(analysis)
    ops = cached_op_table(ctx) if ctx.rank is not None else analysis.ops
    if ops.empty:
        st.info("No CPU operators in this run's traces (was `torch.profiler` recording CPU activity?).")
        return
    if "device_self_us" in ops.columns and not (pd.to_numeric(ops["device_self_us"], errors="coerce") > 0).any():
        # A CPU-only trace: a column and a ranking of zeros only add noise.
        ops = ops.drop(columns=["device_self_us"])
    c1, c2, c3, c4 = st.columns([3, 2, 2, 3])
    text = c1.text_input(
        "Search operators", key=ctx.key("ops_search"), placeholder="e.g. conv, matmul, copy_"
    )
    options = [k for k in _VALUES if k in ops.columns]
    if st.session_state.get(ctx.key("ops_value")) not in options:  # e.g. a GPU run's choice
        st.session_state.pop(ctx.key("ops_value"), None)
    value = c2.radio(
        "Rank by",
        options,
        format_func=_VALUES.get,
        horizontal=True,
        key=ctx.key("ops_value"),
    )
    n = c3.slider("Top N", 5, 50, 15, key=ctx.key("ops_top_n"))
    group = c4.radio("Group by", list(_GROUPS), format_func=_GROUPS.get, horizontal=True, key=ctx.key("ops_group"),
                     help="Split each operator by its input shapes, or by the nn.Module it ran in (forward and "
                          "backward) with a module view; the grouped tables follow the operator table.")
    view = compute_ops_view(ops, rank_rows(analysis.steps, ctx.rank), text)
    if view.empty:  # the search may still match module names below
        st.info(f"No operator matches “{text}”.")
    else:
        st.vega_lite_chart(top_ops_chart(view, n=n, value=value), width="stretch", key=ctx.key("ops_top_fig"))
        st.dataframe(
            _table(view), hide_index=True, width="stretch", column_config=_COLUMNS, key=ctx.key("ops_table")
        )
        pooled = " (all ranks summed)" if ctx.rank is None and len(ctx.ranks) > 1 else ""
        st.caption(f"{len(view)} operators{pooled}; % of step = self time / wall time of the profiled steps. "
                   "`record_function` ranges (`## forward ##`, `Optimizer.step#…`) are not operators: "
                   "their children are." + _capped_note(view))
    if st.toggle("Show annotations (record_function ranges)", key=ctx.key("ops_annotations")):
        _render_annotations(ctx, analysis, text)
    if group == Grouping.SHAPE:
        _render_by_shape(ctx, text)
    elif group == Grouping.MODULE:
        _render_by_module(ctx, text, n)
