"""Run page tab "Kernels": GPU kernel table and time share, device busy/idle per step (UI layer)."""

from __future__ import annotations

import streamlit as st

from app.charts.kernels import gpu_busy_chart, kernel_share_chart
from app.ui.tabs import RunContext
from app.ui.trace_view import cached_kernel_table, load_trace_analysis, rank_rows

__all__ = ["TITLE", "render"]

TITLE = "Kernels"

_COLUMNS = {
    "name": st.column_config.TextColumn("Kernel", width="large"),
    "calls": st.column_config.NumberColumn("Calls", format="%d"),
    "total_ms": st.column_config.NumberColumn("Total (ms)", format="%.3f"),
    "mean_us": st.column_config.NumberColumn("Mean (µs)", format="%.2f"),
    "share_pct": st.column_config.NumberColumn("% of kernel time", format="%.2f"),
}


def render(ctx: RunContext) -> None:
    """Kernel table, share donut and busy/idle per step; an explanation on CPU-only runs."""
    analysis = load_trace_analysis(ctx)
    if analysis is None:
        return
    kernels = cached_kernel_table(ctx) if ctx.rank is not None else analysis.kernels
    if kernels.empty:
        st.info(
            "No GPU kernels in this run's traces: the job ran on the CPU (or CUDA activity was not "
            "recorded). Operators and their CPU time are in the Operators tab."
        )
        return
    steps = rank_rows(analysis.steps, ctx.rank)
    if not steps.empty and "kernel_us" in steps.columns:
        st.subheader("Device busy and idle per profiled step")
        st.vega_lite_chart(gpu_busy_chart(steps), width="stretch", key=ctx.key("kernels_busy"))
        st.caption(
            "Busy = kernels + memcpy + memset + communication on the device, as a share of the step's "
            "wall time; idle is the rest (the device waiting for the CPU, data or synchronisation)."
        )
    n = st.slider("Kernels in the chart", 5, 40, 12, key=ctx.key("kernels_top_n"))
    st.vega_lite_chart(kernel_share_chart(kernels, n=n), width="stretch", key=ctx.key("kernels_share"))
    table = kernels.sort_values("total_us", ascending=False).copy()
    table["total_ms"] = table["total_us"] / 1e3
    if "mean_us" not in table.columns:
        table["mean_us"] = table["total_us"] / table["calls"]
    table["share_pct"] = table["total_us"] / table["total_us"].sum() * 100
    st.dataframe(
        table[["name", "calls", "total_ms", "mean_us", "share_pct"]],
        hide_index=True,
        width="stretch",
        column_config=_COLUMNS,
        key=ctx.key("kernels_table"),
    )
