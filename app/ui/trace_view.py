"""Shared by the trace-based tabs: load a run's trace analysis or explain why there is none (UI layer)."""
from __future__ import annotations

import importlib.util
from typing import Any

import pandas as pd
import streamlit as st

from app.ui.cache import cached_trace_analysis
from app.ui.tabs import RunContext

__all__ = ["NO_TRACE_HINT", "load_trace_analysis", "rank_rows"]

NO_TRACE_HINT = (
    "No profiler trace in this run. `torchscope run` records traces in profiler windows a few "
    "steps into the job (after the first steps, which carry one-off costs), so a job that stops "
    "earlier, or ran with profiling turned off, has none. Run more steps, or bring an existing "
    "trace in with `torchscope import TRACE.json.gz`."
)


def load_trace_analysis(ctx: RunContext) -> Any | None:
    """The run's TraceAnalysis (steps, ops, kernels, memory), or None after an ``st.info`` saying
    why there is none. Raises the trace engine's errors (TorchscopeError) for unreadable traces."""
    if not ctx.run.trace_files:
        st.info(NO_TRACE_HINT)
        return None
    if importlib.util.find_spec("app.analysis.trace_summary") is None:
        st.info("This Torchscope has no trace analysis installed (app.analysis.trace_summary).")
        return None
    with st.spinner("Reading the run's traces (once; later views use the cache)…"):
        return cached_trace_analysis(ctx.run_dir)


def rank_rows(df: pd.DataFrame | None, rank: int | None) -> pd.DataFrame:
    """Rows of the chosen rank (all rows when None or when the table has no rank column)."""
    if df is None:
        return pd.DataFrame()
    if rank is None or "rank" not in df.columns:
        return df
    return df[df["rank"] == rank]
