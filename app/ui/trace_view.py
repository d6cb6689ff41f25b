"""Shared by the trace-based tabs: load a run's trace analysis or explain why there is none (UI layer)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from app.analysis.trace.kernels import compute_kernel_table
from app.analysis.trace.modules import compute_module_table
from app.analysis.trace.ops import compute_annotation_table, compute_op_table
from app.analysis.trace.windows import compute_window_table, split_traces
from app.errors import TorchscopeError
from app.presentation.progress import progress_text
from app.ui.cache import cached_step_analysis, cached_trace_analysis, cached_traces, run_signature
from app.ui.tabs import RunContext
from app.workspace.profiled_windows import manifest_windows, read_run_windows
from app.workspace.traces import ingest_trace, uncached_trace_files

__all__ = [
    "NO_TRACE_HINT",
    "load_trace_analysis",
    "load_step_analysis",
    "rank_rows",
    "cached_op_table",
    "cached_annotation_table",
    "cached_module_table",
    "cached_kernel_table",
    "render_trace_warnings",
    "ingest_with_progress",
]

NO_TRACE_HINT = (
    "No profiler trace in this run. `torchscope run` records traces in profiler windows a few "
    "steps into the job (after the first steps, which carry one-off costs), so a job that stops "
    "earlier, or ran with profiling turned off, has none. Run more steps, or bring an existing "
    "trace in with `torchscope import TRACE.json.gz`."
)


def load_trace_analysis(ctx: RunContext) -> Any | None:
    """The run's TraceAnalysis (steps, ops, kernels, memory), or None after an ``st.info`` saying
    why there is none. Raises the trace engine's errors (TorchscopeError) for unreadable traces."""
    return _load(ctx, cached_trace_analysis)


def load_step_analysis(ctx: RunContext) -> Any | None:
    """The run's StepAnalysis (steps, memory peaks, rank summary: what the Overview shows), as
    ``load_trace_analysis`` gives the whole TraceAnalysis; the op, kernel and breakdown tables are
    left for the tabs that show them."""
    return _load(ctx, cached_step_analysis)


def _load(ctx: RunContext, analyse: Callable[[Path], Any]) -> Any | None:
    if not ctx.run.trace_files:
        st.info(NO_TRACE_HINT)
        return None
    ingest_with_progress(ctx.run.trace_files)
    with st.spinner("Analysing the run's traces…"):
        analysis = analyse(ctx.run_dir)
    render_anomaly_windows(ctx, analysis)
    return analysis


def render_anomaly_windows(ctx: RunContext, analysis: Any) -> None:
    """Name the run's anomaly-triggered profiler windows, apart from the typical tables."""
    windows = manifest_windows(ctx.run.manifest)
    table = compute_window_table(windows, analysis.steps) if windows else None
    if table is None or table["typical"].all():
        return
    lines = []
    for w in table[~table["typical"]].itertuples(index=False):
        ratio = "" if pd.isna(w.ratio_to_typical) else f": its steps take {w.ratio_to_typical:.1f}× the typical one"
        lines.append(f"- **{w.label}**, steps {w.first_step}–{w.last_step}{ratio}")
    kept = "the breakdown, operator and kernel tables use the other windows only" if table["typical"].any() \
        else "no other window was profiled, so the tables below are these steps"
    st.warning("Anomaly-triggered profiler windows (steps the agent profiled because they were slow); "
               f"{kept}.\n" + "\n".join(lines))


def _typical_traces(path: str) -> list[Any]:
    """The run's traces without those of anomaly windows (all of them when that leaves none)."""
    return split_traces(cached_traces(path), read_run_windows(path))[0]


# The progress bar moves at most this often: the trace parser reports every piece (a dozen a second
# on a small trace), and the browser re-renders the page for every message.
_BAR_EVERY_S = 0.5


def ingest_with_progress(paths: list[Path]) -> None:
    """Ingest the traces that are not in the on-disk cache yet, with a progress bar.

    The first open of a big trace parses it (seconds to minutes); later opens read the columnar
    cache, so a warm run shows no bar at all. Unreadable files are left for the analysis to
    report with its own error message.
    """
    cold = uncached_trace_files(paths)
    if not cold:
        return
    sizes = [p.stat().st_size for p in cold]
    total = max(1, sum(sizes))
    bar = st.progress(0.0, text="Reading traces for the first time…")
    base = 0
    started = time.monotonic()
    shown = [started]  # when the bar last moved
    for path, size in zip(cold, sizes):
        def report(done: int, _total: int, base: int = base, name: str = path.name) -> None:
            now = time.monotonic()
            if now - shown[0] < _BAR_EVERY_S:  # each move is a message the browser redraws the page for
                return
            shown[0] = now
            bar.progress(min(1.0, (base + done) / total),
                         text=f"Reading {name} for the first time: "
                              f"{progress_text(base + done, total, now - started)} "
                              "(compressed sizes); later opens use the cache")

        try:
            ingest_trace(path, progress=report)
        except TorchscopeError:
            pass  # the analysis below raises it again with the file named, shown as st.error
        base += size
    bar.empty()


def rank_rows(df: pd.DataFrame | None, rank: int | None) -> pd.DataFrame:
    """Rows of the chosen rank (all rows when None or when the table has no rank column)."""
    if df is None:
        return pd.DataFrame()
    if rank is None or "rank" not in df.columns:
        return df
    return df[df["rank"] == rank]


@st.cache_data(max_entries=32, ttl=900, show_spinner=False)
def _op_table(path: str, sig: tuple[float, ...], rank: int | None, group_by: str | None) -> pd.DataFrame:
    traces = [t for t in _typical_traces(path) if rank is None or t.rank == rank]
    return compute_op_table(traces, group_by=group_by)


def cached_op_table(ctx: RunContext, *, group_by: str | None = None) -> pd.DataFrame:
    """The op table of the chosen rank (all ranks summed when ``ctx.rank`` is None);
    ``group_by="shape"`` splits each op by input shapes, ``"module"`` by nn.Module.

    Only the ungrouped table is in the on-disk analysis cache (TraceAnalysis.ops); the grouped
    ones are computed on demand and kept here, keyed by ``group_by`` (and run, signature, rank)."""
    return _op_table(str(ctx.run_dir), run_signature(ctx.run_dir), ctx.rank, group_by)


@st.cache_data(max_entries=16, ttl=900, show_spinner=False)
def _annotation_table(path: str, sig: tuple[float, ...], rank: int | None) -> pd.DataFrame:
    return compute_annotation_table([t for t in _typical_traces(path) if rank is None or t.rank == rank])


def cached_annotation_table(ctx: RunContext) -> pd.DataFrame:
    """The ``record_function`` ranges of the chosen rank (ops.compute_annotation_table), all ranks
    summed when ``ctx.rank`` is None; computed only when asked for."""
    return _annotation_table(str(ctx.run_dir), run_signature(ctx.run_dir), ctx.rank)


@st.cache_data(max_entries=16, ttl=900, show_spinner=False)
def _module_table(path: str, sig: tuple[float, ...], rank: int | None) -> pd.DataFrame:
    return compute_module_table([t for t in _typical_traces(path) if rank is None or t.rank == rank])


def cached_module_table(ctx: RunContext) -> pd.DataFrame:
    """The module view (app/analysis/trace/modules.py) of the chosen rank (all ranks summed when None)."""
    return _module_table(str(ctx.run_dir), run_signature(ctx.run_dir), ctx.rank)


@st.cache_data(max_entries=32, ttl=900, show_spinner=False)
def _kernel_table(path: str, sig: tuple[float, ...], rank: int | None) -> pd.DataFrame:
    return compute_kernel_table([t for t in _typical_traces(path) if rank is None or t.rank == rank])


def cached_kernel_table(ctx: RunContext) -> pd.DataFrame:
    """The kernel table of the chosen rank (all ranks summed when ``ctx.rank`` is None)."""
    return _kernel_table(str(ctx.run_dir), run_signature(ctx.run_dir), ctx.rank)


def render_trace_warnings(analysis: Any) -> None:
    """One warning per recovery the trace engine made (a truncated file, a cut gzip stream):
    numbers from such a trace miss what came after the cut, and its last step may be partial."""
    for trace in getattr(analysis, "traces", None) or []:
        for w in trace.get("warnings") or []:
            st.warning(
                f"{Path(str(trace.get('path', ''))).name}: {w}. Numbers from this trace miss what "
                "came after that point; its last profiled step may be incomplete."
            )
