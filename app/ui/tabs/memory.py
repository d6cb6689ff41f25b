"""Run page tab "Memory": allocator totals over time with the peak and the ops around it, CUDA
allocator snapshots, memory by category (UI layer)."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from app.analysis.curves.smoothing import minmax_downsample_indices
from app.analysis.memory.snapshot import (
    compute_largest_allocations,
    compute_oom_events,
    compute_segment_summary,
    compute_snapshot_timeline,
    snapshot_devices,
    window_positions,
)
from app.charts.memory import memory_timeline_chart
from app.errors import TorchscopeError
from app.presentation.units import format_bytes, format_shape
from app.ui.cache import cached_traces
from app.ui.deep_cache import (
    cached_snapshot,
    cached_trace_allocations,
)
from app.ui.memory_views import (
    CATEGORY_POINTS,
    cached_recorded_category_view,
    cached_trace_memory_views,
    cached_uploaded_category_view,
    cached_zoomed_recorded_category_spec,
    cached_zoomed_trace_spec,
    cached_zoomed_uploaded_category_spec,
)
from app.ui.memory_views import MAX_POINTS as _MAX_POINTS
from app.ui.tabs import RunContext
from app.ui.tabs.timeline import has_traces
from profiler_agent.runformat import layout

__all__ = ["TITLE", "prefetch", "render"]

TITLE = "Memory"

_NO_MEMORY_HELP = (
    "No memory events in this run's traces. The profiler records allocations when it runs with "
    "`profile_memory=True` (Torchscope's profiling windows do; an imported trace may not)."
)
_NO_SNAPSHOT_HELP = (
    "No CUDA allocator snapshot in this run. On a CUDA job Torchscope records the allocator's "
    "history (`torch.cuda.memory._record_memory_history`) and dumps a snapshot under the run's "
    "`memory/` folder; CPU-only runs have none."
)
_CATEGORY_HELP = (
    "Memory by category (parameters, gradients, optimizer state, activations, temporaries) comes "
    "from torch.profiler's `prof.export_memory_timeline(\"mem.json\", device=\"cuda:0\")` (or a "
    "`.json.gz` / `.raw.json.gz` path; the profile needs `record_shapes=True, profile_memory=True, "
    "with_stack=True`). `torchscope run --memory-timeline` records it in the run's profiler "
    "windows; for other runs, upload such a file here."
)


def _ops_table(ops: pd.DataFrame) -> pd.DataFrame:
    return ops.assign(dur_ms=ops["dur_us"] / 1000, ended_ms_before=ops["ends_before_us"] / 1000,
                      input_shapes=ops["input_shapes"].map(format_shape))[
        ["relation", "name", "dur_ms", "ended_ms_before", "input_shapes"]]


_ZOOM_HELP = ("Drag either end to draw that part of the run again at full detail: the whole range "
              "shows at most {points} points, picked so that every peak stays; the wheel on the chart "
              "only magnifies those.")


def _zoom(ctx: RunContext, key: str, span: tuple[float, float], points: int,
          unit: str = "ms") -> tuple[float, float] | None:
    """A range slider under a chart over ``span`` (ms): the range chosen, or None for the whole span.
    The span is part of the widget's key: a chart of another span (another trace or file) starts
    from its whole range instead of a range kept from before, which could lie outside it."""
    lo, hi = round(span[0], 2), round(span[1], 2)
    if not hi > lo:
        return None
    widget = ctx.key(f"{key}_{lo}_{hi}")
    held = st.session_state.get(widget, (lo, hi))
    shown = "whole range" if tuple(held) == (lo, hi) else f"{held[0]:,.2f}–{held[1]:,.2f} {unit}"
    # In a popover: the slider is drawn only when opened, not on every visit of the tab (issue 16's
    # tab switch, benchmarks/README.md wave 15).
    with st.popover(f"Zoom: {shown}", icon=":material/zoom_in:"):
        chosen = st.slider(f"The range drawn ({unit})", min_value=lo, max_value=hi, value=(lo, hi), step=0.01,
                           key=widget, help=_ZOOM_HELP.format(points=points))
    return None if tuple(chosen) == (lo, hi) else (float(chosen[0]), float(chosen[1]))


def _default_trace(ctx: RunContext) -> int:
    """Index of the trace shown first: the chosen rank's, else the first."""
    ranks = [t.rank for t in cached_traces(ctx.run_dir)]
    return ranks.index(ctx.rank) if ctx.rank in ranks else 0


def _render_trace_memory(ctx: RunContext) -> None:
    st.subheader("Allocated memory over the profiled steps")
    if not has_traces(ctx.run_dir):
        st.info("No profiler trace in this run, so no allocation timeline. " + _NO_MEMORY_HELP)
        return
    traces = cached_traces(ctx.run_dir)
    index = _default_trace(ctx)
    if len(traces) > 1:
        index = st.selectbox("Trace", range(len(traces)), index=index, key=ctx.key("memory_trace"),
                             format_func=lambda i: f"rank {traces[i].rank} · {traces[i].path.name}")
    views = cached_trace_memory_views(ctx.run_dir, index)
    if not views:
        st.info(_NO_MEMORY_HELP)
        return
    devices = list(views)
    device = st.radio("Device", devices, horizontal=True, key=ctx.key("memory_device")) if len(devices) > 1 \
        else devices[0]
    view = views[device]
    if view.spec is None:
        st.info(f"The memory events of {device} carry no allocator totals to draw.")
        return
    c = st.columns(3)
    c[0].metric("Peak allocated", format_bytes(view.peak_bytes))
    c[1].metric("Peak reserved", format_bytes(view.peak_reserved_bytes) if view.peak_reserved_bytes is not None
                else "–", help="Memory the caching allocator holds (CUDA); not reported for CPU.")
    c[2].metric("Peak at", f"{view.peak_ms:,.2f} ms", help="since the trace's first event")
    chart = st.container()
    window = _zoom(ctx, f"memory_trace_zoom_{index}_{device}", view.span_ms, _MAX_POINTS)
    spec = view.spec if window is None else cached_zoomed_trace_spec(ctx.run_dir, index, device, view, window)
    chart.vega_lite_chart(spec, width="stretch", key=ctx.key("memory_trace_fig"))
    st.markdown("**Ops around the peak** — running at the peak (outermost first), then the last ops "
                "that ended before it: the allocation that made the peak is in one of them.")
    ops = view.ops
    if ops is None or ops.empty:
        st.caption("No host ops recorded around the peak.")
    else:
        st.dataframe(_ops_table(ops), hide_index=True, width="stretch", key=ctx.key("memory_ops"),
                     column_config={
                         "relation": st.column_config.TextColumn("when"),
                         "dur_ms": st.column_config.NumberColumn("duration (ms)", format="%.3f"),
                         "ended_ms_before": st.column_config.NumberColumn(
                             "ended before the peak (ms)", format="%.3f", help="0 for ops still running at the peak"),
                         "input_shapes": st.column_config.TextColumn("input shapes"),
                     })
    _render_trace_allocations(ctx, index, device, view.origin_us)


def _render_trace_allocations(ctx: RunContext, index: int, device: str, origin: float) -> None:
    allocs = cached_trace_allocations(ctx.run_dir, index, top=200)
    allocs = allocs[allocs["device"] == device].head(20)
    if allocs.empty:
        return
    st.markdown("**Largest allocations** — the op that made each one and how long it lived "
                "(long-lived ones during the forward pass are activations kept for backward).")
    table = pd.DataFrame({
        "size": [format_bytes(int(b)) for b in allocs["bytes"]],
        "at_ms": (allocs["ts_us"] - origin) / 1000,
        "lived_ms": allocs["lifetime_us"] / 1000,
        "op": allocs["op"], "input_shapes": allocs["input_shapes"].map(format_shape), "op_stack": allocs["op_stack"],
    })
    st.dataframe(table, hide_index=True, width="stretch", key=ctx.key("memory_trace_allocs"),
                 column_config={
                     "at_ms": st.column_config.NumberColumn("at (ms)", format="%.3f"),
                     "lived_ms": st.column_config.NumberColumn(
                         "lived (ms)", format="%.3f",
                         help="Until the same address was freed; empty when still held at the end of the trace"),
                     "input_shapes": st.column_config.TextColumn("input shapes"),
                     "op_stack": st.column_config.TextColumn("op stack"),
                 })


def _render_snapshot(ctx: RunContext) -> None:
    st.subheader("CUDA allocator snapshot")
    files = ctx.run.snapshot_files
    if not files:
        st.info(_NO_SNAPSHOT_HELP)
        return
    pos = 0
    if len(files) > 1:
        pos = st.selectbox("Snapshot", range(len(files)), index=len(files) - 1, key=ctx.key("memory_snapshot"),
                           format_func=lambda i: files[i].name)
    try:
        snap = cached_snapshot(files[pos], ctx.run_dir)
    except TorchscopeError as e:
        st.error(str(e))
        return
    devices = snapshot_devices(snap)
    if not devices:
        st.info(f"`{files[pos].name}` holds no segments and no allocation history.")
        return
    device = devices[0] if len(devices) == 1 else st.radio(
        "CUDA device", devices, horizontal=True, key=ctx.key("memory_snapshot_device"))
    _render_snapshot_device(ctx, snap, int(device))


def _render_snapshot_device(ctx: RunContext, snap: dict[str, Any], device: int) -> None:
    summary = compute_segment_summary(snap)
    row = summary[summary["device"] == device]
    if len(row):
        r = row.iloc[0]
        c = st.columns(4)
        c[0].metric("Allocated at snapshot", format_bytes(int(r["allocated_bytes"])))
        c[1].metric("Reserved", format_bytes(int(r["reserved_bytes"])), help=f"{int(r['segments'])} segments")
        c[2].metric("Cached, free", format_bytes(int(r["cached_free_bytes"])),
                    help="Reserved but unused: torch.cuda.empty_cache() would return it to the driver.")
        c[3].metric("Largest free block", format_bytes(int(r["largest_free_block_bytes"])),
                    help="Much free memory but small blocks means fragmentation.")
    for oom in compute_oom_events(snap, device).itertuples(index=False):
        st.warning(f"Out of memory at allocator event {oom.event}: {format_bytes(oom.requested_bytes)} requested "
                   f"while CUDA reported {format_bytes(oom.device_free_bytes)} free"
                   + (f", from {oom.top_frame}" if oom.top_frame else "") + ".")
    timeline = compute_snapshot_timeline(snap, device)
    if timeline.empty:
        st.info("The snapshot has no allocation history (it was taken without "
                "`torch.cuda.memory._record_memory_history()`): only its end state is shown.")
    else:
        peak = int(timeline["allocated_bytes"].idxmax())
        timed = timeline["time_us"].notna().all()
        if timed:
            timeline = timeline.assign(time_ms=(timeline["time_us"] - timeline["time_us"].iloc[0]) / 1000)
        x = "time_ms" if timed else "event"
        xs = timeline[x].to_numpy(np.float64)
        chart = st.container()
        window = _zoom(ctx, f"memory_snapshot_zoom_{device}", (float(xs.min()), float(xs.max())), _MAX_POINTS,
                       "ms" if timed else "allocator event")
        rows = timeline if window is None else timeline.iloc[window_positions(xs, window)]
        shown = rows.iloc[minmax_downsample_indices(rows["allocated_bytes"].to_numpy(np.float64), _MAX_POINTS)]
        spec = memory_timeline_chart(
            shown, x=x, x_title="ms since first recorded event" if timed else "allocator event",
            peak_index=peak, title=f"active memory · cuda:{device}")
        chart.vega_lite_chart(spec, width="stretch", key=ctx.key("memory_snapshot_fig"))
    largest = compute_largest_allocations(snap, device, top=25)
    if largest.empty:
        return
    st.markdown("**Largest allocations** with the line of your code that made them")
    table = largest.assign(size=[format_bytes(int(b)) for b in largest["size_bytes"]])
    st.dataframe(table[["size", "top_frame", "alive_at_end", "alloc_event", "free_event", "size_bytes"]],
                 hide_index=True, width="stretch", key=ctx.key("memory_largest"))
    with st.expander("Stacks of the largest allocations"):
        for r in largest.head(10).itertuples(index=False):
            st.text(f"{format_bytes(int(r.size_bytes))} at {r.top_frame or '?'}")
            st.code(r.stack or "(no frames recorded)", language=None)


def _render_categories(ctx: RunContext) -> None:
    st.subheader("Memory by category")
    recorded = layout.list_memory_timeline_files(ctx.run_dir)
    if recorded:
        names = [p.name for p in recorded]
        chosen = st.selectbox("Memory timeline (one per profiler window and rank)", names,
                              key=ctx.key("memory_categories_file")) if len(names) > 1 else names[0]
        source = chosen
        path = str(recorded[names.index(chosen)])
        view = cached_recorded_category_view(path, ctx.run_dir)
    else:
        upload = st.file_uploader("Memory timeline (.json, .json.gz, .raw.json.gz)", type=["json", "gz"],
                                  key=ctx.key("memory_categories_upload"), help=_CATEGORY_HELP)
        if upload is None:
            st.info(_CATEGORY_HELP)
            return
        source = upload.name
        path = None
        view = cached_uploaded_category_view(upload.getvalue(), upload.name)
    if view.spec is None or view.peak is None:
        st.info(f"`{source}` holds no memory records.")
        return
    chart = st.container()
    window = _zoom(ctx, f"memory_categories_zoom_{source}", view.span_ms, CATEGORY_POINTS)
    if window is None:
        spec = view.spec
    elif path is not None:
        spec = cached_zoomed_recorded_category_spec(path, ctx.run_dir, window)
    else:
        spec = cached_zoomed_uploaded_category_spec(upload.getvalue(), upload.name, window)
    chart.vega_lite_chart(spec, width="stretch", key=ctx.key("memory_categories_fig"))
    peak = view.peak
    st.caption(f"At the peak ({peak['time_ms'].iloc[0]:,.1f} ms, "
               f"{format_bytes(int(peak['bytes'].sum()))}):")
    st.dataframe(peak.assign(size=[format_bytes(int(b)) for b in peak["bytes"]])[["category", "size", "share"]],
                 hide_index=True, column_config={"share": st.column_config.ProgressColumn(
                     "share", format="percent", min_value=0.0, max_value=1.0)},
                 key=ctx.key("memory_categories_peak"))


def prefetch(ctx: RunContext) -> None:
    """Load what :func:`render` shows first into the caches, with no Streamlit element
    (``app.ui.prefetch``): the chosen rank's allocation views and largest allocations, and the
    first recorded memory timeline's categories. CUDA snapshots are left for the tab's own visit
    (they can be hundreds of MB)."""
    if has_traces(ctx.run_dir):
        index = _default_trace(ctx)
        if cached_trace_memory_views(ctx.run_dir, index):
            cached_trace_allocations(ctx.run_dir, index, top=200)
    recorded = layout.list_memory_timeline_files(ctx.run_dir)
    if recorded:
        cached_recorded_category_view(str(recorded[0]), ctx.run_dir)


def render(ctx: RunContext) -> None:
    """Trace allocations, then the CUDA snapshot, then categories; each explains when it has no data."""
    for section in (_render_trace_memory, _render_snapshot, _render_categories):
        try:
            section(ctx)
        except TorchscopeError as e:
            st.error(str(e))
