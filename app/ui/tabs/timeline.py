"""Run page tab "Timeline": one profiled step as thread/stream lanes (UI layer)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from app.analysis.trace.timeline import Timeline, combine_timelines, compute_timeline
from app.charts.timeline import make_timeline_figure
from app.ui.cache import cached_traces
from app.ui.deep_cache import cached_step_windows
from app.ui.tabs import RunContext
from app.ui.trace_view import NO_TRACE_HINT
from app.workspace.artifacts import read_run_bytes
from profiler_agent.runformat import layout

__all__ = ["TITLE", "render", "has_traces"]

TITLE = "Timeline"

# Above this a trace file is not offered as a download from the page (the browser would hold
# it in memory); its path is shown instead.
_MAX_DOWNLOAD_BYTES = 300 * 1024 * 1024
_BUDGETS = (5_000, 10_000, 20_000, 50_000)


def has_traces(run_dir: Path) -> bool:
    """True when the run has trace files (named by the run format, or any JSON in traces/)."""
    if layout.list_trace_files(run_dir):
        return True
    folder = run_dir / layout.TRACES_DIR
    return folder.is_dir() and any(p.name.endswith((".json", ".json.gz")) for p in folder.iterdir())


def _pick_trace(ctx: RunContext, traces: list[Any]) -> int:
    ranks = [t.rank for t in traces]
    if ctx.rank is not None and ctx.rank in ranks:
        default = ranks.index(ctx.rank)
    else:
        default = 0
    if len(traces) == 1:
        return 0
    return st.selectbox(
        "Trace", range(len(traces)), index=default, key=ctx.key("timeline_trace"),
        format_func=lambda i: f"rank {traces[i].rank} · {traces[i].path.name}",
    )


def _render_download(ctx: RunContext, path: Path) -> None:
    size = path.stat().st_size
    c1, c2 = st.columns([1, 3])
    if size <= _MAX_DOWNLOAD_BYTES:
        c1.download_button(
            "Download raw trace", data=lambda: read_run_bytes(ctx.run.path, path), file_name=path.name,
            mime="application/gzip" if path.name.endswith(".gz") else "application/json",
            key=ctx.key(f"timeline_dl_{path.name}"), on_click="ignore",
        )
    else:
        c1.caption(f"Trace file ({size / 2**20:,.0f} MiB): `{path}`")
    c2.caption(
        "Every event, flow arrow and counter: open the file at https://ui.perfetto.dev "
        "(drag and drop; it stays in your browser) or in chrome://tracing. "
        "TensorBoard's profiler plugin and HTA read the same file."
    )


def _window(ctx: RunContext, trace: Any, windows: pd.DataFrame, column: Any) -> tuple[float, float, int | None]:
    """(start_us, end_us, step) of the chosen step, or of the whole trace without step marks."""
    if len(windows):
        labels = [f"step {s} · {d / 1000:,.1f} ms" for s, d in zip(windows["step"], windows["duration_us"])]
        pos = column.selectbox("Step", range(len(windows)), format_func=lambda i: labels[i],
                               key=ctx.key("timeline_step"))
        row = windows.iloc[pos]
        return float(row["start_us"]), float(row["end_us"]), int(row["step"])
    column.caption("No `ProfilerStep#` annotations in this trace: showing the whole trace.")
    start = float(trace.events["ts_us"].min())
    end = float((trace.events["ts_us"] + trace.events["dur_us"]).max())
    return start, (end if end > start else start + 1.0), None


def _all_ranks(ctx: RunContext, traces: list[Any], step: int, budget: int, needle: str) -> tuple[Timeline, list[int]]:
    """The same step on every rank, one block of lanes per rank, aligned at each rank's step
    start; returns the timeline and the ranks that do not have that step."""
    parts, missing = [], []
    per_rank = max(1, budget // len(traces))
    for i, t in enumerate(traces):
        windows = cached_step_windows(ctx.run_dir, i)
        row = windows[windows["step"] == step]
        if row.empty:
            missing.append(t.rank)
            continue
        parts.append(compute_timeline(t.events, t.threads, float(row["start_us"].iloc[0]),
                                      float(row["end_us"].iloc[0]), max_events=per_rank,
                                      name_contains=needle, lane_prefix=f"rank {t.rank} · "))
    return combine_timelines(parts), missing


def _render_counts(timeline: Timeline) -> None:
    if timeline.hidden_events:
        st.warning(
            f"Showing the {timeline.shown_events:,} longest of {timeline.total_events:,} events; "
            f"{timeline.hidden_events:,} events of at most {timeline.hidden_max_dur_us:,.1f} µs are hidden. "
            "Raise the limit, or open the raw trace in Perfetto to see all of them."
        )
    else:
        lanes = len(timeline.lanes)
        st.caption(f"{timeline.total_events:,} events in {lanes} lane{'' if lanes == 1 else 's'}. "
                   "Drag to zoom, double-click to reset, hover the middle of an event for details.")


def render(ctx: RunContext) -> None:
    """Pick a trace and a step, draw it, say what was left out, offer the raw file."""
    if not has_traces(ctx.run_dir):
        st.info(NO_TRACE_HINT)
        return
    with st.spinner("Reading traces…"):
        traces = cached_traces(ctx.run_dir)
    index = _pick_trace(ctx, traces)
    trace = traces[index]
    for w in trace.warnings:
        st.warning(w)
    if trace.events.empty:
        st.info(f"`{trace.path.name}` holds no complete events to draw.")
        _render_download(ctx, trace.path)
        return
    c1, c2, c3 = st.columns([3, 2, 2])
    start, end, step = _window(ctx, trace, cached_step_windows(ctx.run_dir, index), c1)
    needle = c2.text_input("Only events whose name contains", key=ctx.key("timeline_filter"),
                           placeholder="e.g. aten::copy_, nccl, Memcpy").strip()
    budget = int(c3.select_slider("Events drawn at most", _BUDGETS, value=20_000, key=ctx.key("timeline_budget"),
                                  help="The longest events are kept; a browser draws more only slowly."))
    together = len(traces) > 1 and step is not None and st.toggle(
        f"All {len(traces)} ranks together", key=ctx.key("timeline_all_ranks"),
        help="The same step on every rank, each block of lanes starting at that rank's step start.")
    if together and step is not None:
        timeline, missing = _all_ranks(ctx, traces, int(step), budget, needle)
        if missing:
            st.caption(f"Step {step} is not in the traces of rank(s) {', '.join(map(str, missing))}.")
        title = f"step {step} · all ranks"
    else:
        timeline = compute_timeline(trace.events, trace.threads, start, end, max_events=budget, name_contains=needle)
        title = f"{'whole trace' if step is None else f'step {step}'} · rank {trace.rank}"
    if needle and timeline.total_events == 0:
        st.info(f"No event in this window has a name containing “{needle}”.")
    else:
        _render_counts(timeline)
        st.plotly_chart(make_timeline_figure(timeline, title=title), width="stretch", key=ctx.key("timeline_fig"),
                        config={"scrollZoom": True})
    _render_download(ctx, trace.path)
