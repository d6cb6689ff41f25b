"""Run page tab "Operators": op table (self/total, calls, % of step), top-N chart, by shape (UI layer)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.analysis.run_summary import compute_ops_view
from app.charts.operators import make_top_ops_figure
from app.ui.tabs import RunContext
from app.ui.trace_view import cached_op_table, load_trace_analysis, rank_rows, render_trace_warnings

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
        "% of step", format="%.2f", help="self time / time of the profiled steps"
    ),
}


def _table(ops: pd.DataFrame) -> pd.DataFrame:
    shown = ops[["name", "calls"]].copy()
    for col in ("self_us", "total_us", "device_self_us", "mean_us"):
        if col in ops.columns:
            shown[col.replace("_us", "_ms")] = ops[col] / 1e3
    shown["pct_of_step"] = ops["pct_of_step"]
    return shown


def _render_by_shape(ctx: RunContext, text: str) -> None:
    by_shape = cached_op_table(ctx, group_by="shape")
    if by_shape.empty or (by_shape["input_shapes"].astype(str).str.len() == 0).all():
        st.info(
            "These traces have no input shapes: record with `record_shapes=True` "
            "(`torchscope run` records them by default) to group operators by input shape."
        )
        return
    if text:
        by_shape = by_shape[by_shape["name"].astype(str).str.contains(text, case=False, regex=False)]
    shown = by_shape[["name", "input_shapes"]].copy()
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


def render(ctx: RunContext) -> None:
    """Searchable op table, a top-N chart and an optional grouping by input shape."""
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
    c1, c2, c3 = st.columns([3, 2, 2])
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
    view = compute_ops_view(ops, rank_rows(analysis.steps, ctx.rank), text)
    if view.empty:
        st.info(f"No operator matches “{text}”.")
        return
    st.plotly_chart(make_top_ops_figure(view, n=n, value=value), width="stretch", key=ctx.key("ops_top_fig"))
    st.dataframe(
        _table(view), hide_index=True, width="stretch", column_config=_COLUMNS, key=ctx.key("ops_table")
    )
    pooled = " (all ranks summed)" if ctx.rank is None and len(ctx.ranks) > 1 else ""
    st.caption(f"{len(view)} operators{pooled}; % of step = self time / wall time of the profiled steps.")
    if st.toggle("Group by input shape", key=ctx.key("ops_by_shape")):
        _render_by_shape(ctx, text)
