"""Run page tab "Timeline": profiled steps as thread/stream lanes, with zoom, level of detail,
lane filters, flow arrows and the chosen range as a trace file (UI layer)."""
from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from app.analysis.trace.timeline import SHAPE_BOUND, Timeline
from app.errors import TorchscopeError
from app.ui.cache import cached_traces
from app.ui.deep_cache import TimelineView, cached_activity_span, cached_step_windows, cached_timeline_chart
from app.ui.tabs import RunContext
from app.ui.trace_view import NO_TRACE_HINT
from app.workspace.artifacts import read_run_bytes
from app.workspace.trace_export import export_trace_range
from profiler_agent.runformat import layout

__all__ = ["TITLE", "render", "has_traces", "LANES_PER_PAGE"]

TITLE = "Timeline"

# Above this a trace file is not offered as a download from the page (the browser would hold
# it in memory); its path is shown instead.
_MAX_DOWNLOAD_BYTES = 300 * 1024 * 1024
# Lanes drawn at once; more are paged, so each lane keeps a readable height at any lane count.
LANES_PER_PAGE = 40
_LEVELS = ("1", "2", "3", "4", "6", "8", "all")


def has_traces(run_dir: Path) -> bool:
    """True when the run has trace files (named by the run format, or any JSON in traces/)."""
    if layout.list_trace_files(run_dir):
        return True
    folder = run_dir / layout.TRACES_DIR
    return folder.is_dir() and any(p.name.endswith((".json", ".json.gz")) for p in folder.iterdir())


def _pick_trace(ctx: RunContext, traces: list[Any]) -> int:
    ranks = [t.rank for t in traces]
    default = ranks.index(ctx.rank) if ctx.rank is not None and ctx.rank in ranks else 0
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


def _steps(ctx: RunContext, windows: pd.DataFrame, column: Any) -> tuple[float, float, tuple[int, int] | None]:
    """(start_us, end_us, (first, last) step) of the chosen steps, or the whole trace's window."""
    steps = [int(s) for s in windows["step"]]
    if len(steps) == 1:
        column.caption(f"Step {steps[0]} (the trace's only profiled step)")
        first = last = steps[0]
    else:
        first, last = column.select_slider(
            "Steps", steps, value=(steps[0], steps[0]), key=ctx.key("timeline_steps"),
            help="One step, or drag both ends to see several steps at once.")
    chosen = windows[(windows["step"] >= first) & (windows["step"] <= last)]
    return float(chosen["start_us"].min()), float(chosen["end_us"].max()), (first, last)


def _whole(trace: Any) -> tuple[float, float]:
    start = float(trace.events["ts_us"].min())
    end = float((trace.events["ts_us"] + trace.events["dur_us"]).max())
    return start, (end if end > start else start + 1.0)


def _zoom(ctx: RunContext, start: float, end: float, activity: tuple[float, float], token: str) -> tuple[float, float]:
    """The zoomed part of [start, end] (µs), from a slider in ms; it opens on the work done
    (``activity``), so a step that mostly waits (or sleeps) shows its work, not a blank band."""
    span_ms = (end - start) / 1000.0
    lo, hi = (activity[0] - start) / 1000.0, (activity[1] - start) / 1000.0
    if hi - lo > 0.5 * span_ms:
        lo, hi = 0.0, span_ms
    else:
        pad = (hi - lo) * 0.02
        lo, hi = max(0.0, lo - pad), min(span_ms, hi + pad)
    a, b = st.slider(
        "Zoom (ms from the start of the steps)", 0.0, span_ms, (lo, hi), step=max(span_ms / 2000, 1e-3),
        key=ctx.key(f"timeline_zoom_{token}"), format="%.3f",
        help="Narrow the window to see more detail: slices narrower than a pixel are merged at the "
             "current zoom and split again as you zoom in. Scroll on the chart to look closer at what is drawn.")
    if not b > a:
        b = min(span_ms, a + max(span_ms / 2000, 1e-3))
    return start + a * 1000.0, start + b * 1000.0


def _render_counts(timeline: Timeline) -> None:
    lanes = len(timeline.lanes)
    parts = [f"{timeline.shown_events:,} of {timeline.total_events:,} events in {lanes} lane{'' if lanes == 1 else 's'}, "
             f"as {timeline.shapes:,} shapes (at most {SHAPE_BOUND:,})"]
    if timeline.merged_events:
        parts.append(f"{timeline.merged_events:,} events narrower than {timeline.resolution_us:,.2f} µs (a pixel) are "
                     "merged into paler slices: zoom in to see them apart")
    if timeline.folded_events:
        parts.append(f"{timeline.folded_events:,} nested events are folded into their parents")
    st.caption("; ".join(parts) + ". Scroll on the chart to zoom, drag to pan, double-click to reset, "
               "hover a slice for details.")
    if timeline.hidden_events:
        st.warning(
            f"{timeline.hidden_events:,} events of at most {timeline.hidden_max_dur_us:,.1f} µs did not fit the "
            f"{SHAPE_BOUND:,} shapes a browser is sent: narrow the window, fold nesting levels or filter lanes; "
            "or download the range and open it in Perfetto."
        )


def _view(ctx: RunContext, index: int, start: float, end: float, columns: Any) -> TimelineView:
    """The drawing options of the controls below the step picker."""
    c1, c2, c3, c4 = columns
    needle = c1.text_input("Search events by name", key=ctx.key("timeline_filter"),
                           placeholder="e.g. aten::copy_, nccl, Memcpy").strip()
    lane_needle = c2.text_input("Lanes whose name contains", key=ctx.key("timeline_lane_filter"),
                                placeholder="e.g. GPU, stream 7, autograd").strip()
    levels = c3.select_slider("Nesting levels", _LEVELS, value="all", key=ctx.key("timeline_levels"),
                              help="1 collapses every lane to its outermost slices.")
    flows = c4.toggle("Launch arrows", key=ctx.key("timeline_flows"),
                      help="An arrow from each CUDA/HIP launch to the kernel or copy it started "
                           "(matched by correlation id), for the longest device events in view.")
    hidden = tuple(str(h) for h in st.session_state.get(ctx.key("timeline_hidden"), ()))
    page = int(st.session_state.get(ctx.key("timeline_lane_page"), 0) or 0)
    return TimelineView(run_dir=str(ctx.run_dir), index=index, start_us=start, end_us=end, name_contains=needle,
                        lane_contains=lane_needle, hidden_lanes=hidden,
                        max_depth=None if levels == "all" else int(levels), flows=bool(flows),
                        lane_slice=(page * LANES_PER_PAGE, (page + 1) * LANES_PER_PAGE))


def _render_lane_controls(ctx: RunContext, timeline: Timeline) -> None:
    """Hidden lanes, and the page of lanes when more lanes pass the filters than fit one page."""
    c1, c2 = st.columns([3, 1])
    key = ctx.key("timeline_hidden")
    if key in st.session_state:  # lanes of another window or trace are no options here
        st.session_state[key] = [h for h in st.session_state[key] if h in timeline.all_lanes]
    c1.multiselect("Hidden lanes", list(timeline.all_lanes), key=ctx.key("timeline_hidden"),
                   placeholder="Choose lanes to leave out")
    matched = timeline.matched_lanes
    pages = max(1, -(-matched // LANES_PER_PAGE))
    if pages > 1:
        c2.selectbox("Lanes shown", range(pages), key=ctx.key("timeline_lane_page"),
                     format_func=lambda p: f"{p * LANES_PER_PAGE + 1}–{min(matched, (p + 1) * LANES_PER_PAGE)} "
                                           f"of {matched}")


def _export(ctx: RunContext, trace: Any, start: float, end: float) -> None:
    stem = re.sub(r"\.json(\.gz)?$", "", trace.path.name)
    name = f"{stem}.{(start - float(trace.events['ts_us'].min())) / 1000:.3f}-" \
           f"{(end - float(trace.events['ts_us'].min())) / 1000:.3f}ms.json"

    def data() -> bytes:
        try:
            return export_trace_range(ctx.run.path, trace.path, start, end)
        except (TorchscopeError, OSError, ValueError) as e:  # shown in the file rather than as a traceback
            return json.dumps({"traceEvents": [], "error": str(e)}).encode()

    st.download_button(
        "Download this range (Chrome trace JSON)", data=data, file_name=name, mime="application/json",
        key=ctx.key("timeline_range_dl"), on_click="ignore",
        help="The events of the window on screen (rank shown) with the trace's metadata, as a trace file "
             "the Perfetto UI (https://ui.perfetto.dev) and chrome://tracing open.")


def render(ctx: RunContext) -> None:
    """Pick a trace, steps and a zoom; draw it at that level of detail; offer the range and the file."""
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
    windows = cached_step_windows(ctx.run_dir, index)
    top = st.columns([3, 2])
    if len(windows):
        start, end, steps = _steps(ctx, windows, top[0])
    else:
        top[0].caption("No `ProfilerStep#` annotations in this trace: showing the whole trace.")
        (start, end), steps = _whole(trace), None
    together = len(traces) > 1 and steps is not None and top[1].toggle(
        f"All {len(traces)} ranks together", key=ctx.key("timeline_all_ranks"),
        help="The same steps on every rank, each block of lanes starting at that rank's first step.")
    token = f"{index}_{steps}_{together}"
    zs, ze = _zoom(ctx, start, end, cached_activity_span(ctx.run_dir, index, start, end), token)
    view = _view(ctx, index, zs, ze, st.columns([2, 2, 2, 1.5]))
    steps_text = "whole trace" if steps is None else (f"step {steps[0]}" if steps[0] == steps[1]
                                                       else f"steps {steps[0]}–{steps[1]}")
    where = "all ranks" if together else f"rank {trace.rank}"
    view = replace(view, title=f"{steps_text} · {where} · {(zs - start) / 1000:,.3f}–{(ze - start) / 1000:,.3f} ms")
    if together:
        view = replace(view, steps=steps, zoom_us=(zs - start, ze - start), lane_slice=None)
    with st.spinner("Laying out the timeline…"):
        timeline, fig, missing = cached_timeline_chart(view)
        pages = max(1, -(-timeline.matched_lanes // LANES_PER_PAGE))
        if view.lane_slice is not None and view.lane_slice[0] >= pages * LANES_PER_PAGE:  # filters changed
            st.session_state[ctx.key("timeline_lane_page")] = 0
            view = replace(view, lane_slice=(0, LANES_PER_PAGE))
            timeline, fig, missing = cached_timeline_chart(view)
    _render_lane_controls(ctx, timeline)
    if missing:
        st.caption(f"Those steps are not in the traces of rank(s) {', '.join(map(str, missing))}.")
    if view.name_contains and timeline.total_events == 0:
        st.info(f"No event in this window has a name containing “{view.name_contains}”.")
    else:
        _render_counts(timeline)
        st.vega_lite_chart(fig, width="stretch", key=ctx.key("timeline_fig"))  # Streamlit copies it: cached spec intact
    _export(ctx, trace, zs, ze)
    _render_download(ctx, trace.path)
