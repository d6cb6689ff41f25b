"""The timeline's level of detail (shape bound, sub-pixel merging), lanes, labels, flow arrows,
activity span and range export: app.analysis.trace.timeline(_detail), trace_range, charts.timeline."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.analysis.trace.timeline import SHAPE_BOUND, compute_activity_span, compute_timeline
from app.analysis.trace.timeline_detail import merge_subpixel
from app.analysis.trace.trace_range import select_trace_range
from app.charts.timeline import MAX_LABELS, slice_labels, timeline_chart
from tests.analysis.trace.test_timeline import EVENTS, THREADS, _events


def _big(n_steps: int, per_step: int, threads: int, seed: int = 0) -> pd.DataFrame:
    """A synthetic trace of ``n_steps`` steps of ``per_step`` tiny ops per host thread (each op
    launching a kernel on one of 4 streams), nested under one annotation per step and thread."""
    rng = np.random.default_rng(seed)
    step_us = 10_000.0
    parts = []
    for t in range(threads):
        starts = (np.arange(n_steps)[:, None] * step_us + np.sort(rng.uniform(0, step_us * 0.9, (n_steps, per_step)),
                                                                  axis=1)).ravel()
        durs = rng.uniform(0.1, 4.0, starts.size)
        corr = np.arange(starts.size) + t * 10_000_000
        host = pd.DataFrame({"name": "aten::add", "cat": "cpu_op", "ts_us": starts, "dur_us": durs,
                             "pid": "1", "tid": str(100 + t), "correlation": corr, "device": -1, "stream": -1})
        launch = host.assign(name="cudaLaunchKernel", cat="cuda_runtime", dur_us=durs / 4)
        kern = host.assign(name="vectorized_elementwise_kernel", cat="kernel", ts_us=starts + 5.0, pid="0",
                           tid=str(7 + t % 4), device=0, stream=7 + t % 4)
        ann = pd.DataFrame({"name": [f"ProfilerStep#{s}" for s in range(n_steps)], "cat": "user_annotation",
                            "ts_us": np.arange(n_steps) * step_us, "dur_us": step_us * 0.95, "pid": "1",
                            "tid": str(100 + t), "correlation": -1, "device": -1, "stream": -1})
        parts += [ann, host, launch, kern]
    df = pd.concat(parts, ignore_index=True)
    for c in ("correlation", "device", "stream"):
        df[c] = pd.array(df[c].where(df[c] >= 0), dtype="Int64")
    for c in ("name", "cat", "pid", "tid"):
        df[c] = df[c].astype("category")
    df["input_shapes"] = pd.Categorical([""] * len(df))
    return df.sort_values("ts_us", kind="stable").reset_index(drop=True)


@pytest.fixture(scope="module")
def big() -> pd.DataFrame:
    return _big(n_steps=20, per_step=1_000, threads=6)  # 360k events, 10 lanes


def test_big_trace_never_exceeds_the_shape_bound(big: pd.DataFrame) -> None:
    start, end = float(big["ts_us"].min()), float((big["ts_us"] + big["dur_us"]).max())
    whole = compute_timeline(big, None, start, end, flows=True)
    assert whole.total_events == len(big) > 50 * SHAPE_BOUND
    assert whole.shapes <= SHAPE_BOUND and len(whole.flows) > 0
    assert int(whole.events["count"].sum()) == whole.shown_events  # every drawn event is in one shape
    assert whole.merged_events > 0.9 * whole.total_events  # sub-pixel ops merged at this zoom
    # zooming in on 1 ms splits the merged runs: real slices with their own names come back
    zoomed = compute_timeline(big, None, start + 5_000.0, start + 6_000.0, flows=True)
    assert zoomed.shapes <= SHAPE_BOUND
    assert (zoomed.events["count"] == 1).mean() > (whole.events["count"] == 1).mean()
    assert "vectorized_elementwise_kernel" in set(zoomed.events.loc[zoomed.events["count"] == 1, "name"])


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 400), st.integers(1, 60), st.integers(1, 3000), st.booleans())
def test_shape_bound_whatever_the_size(per_step: int, bound: int, width_px: int, flows: bool) -> None:
    ev = _big(n_steps=2, per_step=per_step, threads=2, seed=per_step)
    tl = compute_timeline(ev, None, 0.0, 20_000.0, max_events=bound, width_px=width_px, flows=flows)
    assert tl.shapes <= bound
    assert tl.shown_events + tl.hidden_events == tl.total_events == len(ev)
    if tl.hidden_events:  # what was left out is never wider than what is drawn
        assert ((tl.events["end_ms"] - tl.events["start_ms"]) * 1000 >= tl.hidden_max_dur_us - 1e-6).all()


def test_merge_subpixel_keeps_wide_slices_and_merges_runs_of_narrow_ones() -> None:
    frame = pd.DataFrame({
        "lane": ["a"] * 5 + ["b"], "depth": [0] * 6, "name": ["x", "y", "z", "wide", "far", "x"],
        "cat": ["cpu_op"] * 6, "ts_us": [0.0, 0.5, 1.0, 2.0, 50.0, 0.0], "end_us": [0.4, 0.9, 1.9, 20.0, 50.5, 0.4],
        "dur_us": [0.4, 0.4, 0.9, 18.0, 0.5, 0.4], "input_shapes": [""] * 6,
    })
    out = merge_subpixel(frame, resolution_us=1.0)
    rows = out.set_index(["lane", "name"])
    assert rows.loc[("a", "z"), "count"] == 3  # x, y, z: one merged shape named after its longest event
    assert rows.loc[("a", "z"), "ts_us"] == 0.0 and rows.loc[("a", "z"), "end_us"] == 1.9
    assert rows.loc[("a", "wide"), "count"] == 1 and rows.loc[("a", "far"), "count"] == 1  # a gap keeps it apart
    assert rows.loc[("b", "x"), "count"] == 1  # other lanes never merge in
    assert int(out["count"].sum()) == len(frame)


def test_lane_filters_pages_and_folding() -> None:
    tl = compute_timeline(EVENTS, THREADS, 0.0, 200.0, lane_contains="gpu")
    assert tl.lanes == ["GPU 0 · stream 7", "GPU 0 · stream 8"] and tl.matched_lanes == 2
    assert tl.all_lanes == ("main thread (tid 11)", "GPU 0 · stream 7", "GPU 0 · stream 8")
    page = compute_timeline(EVENTS, THREADS, 0.0, 200.0, lane_slice=(1, 2))
    assert page.lanes == ["GPU 0 · stream 7"] and page.matched_lanes == 3
    hidden = compute_timeline(EVENTS, THREADS, 0.0, 200.0, hidden_lanes=["main thread (tid 11)"])
    assert set(hidden.events["lane"]) == {"GPU 0 · stream 7", "GPU 0 · stream 8"}
    folded = compute_timeline(EVENTS, THREADS, 0.0, 200.0, max_depth=1)
    assert folded.events["depth"].max() == 0 and folded.folded_events == 4  # linear, addmm, launch, relu
    assert folded.shown_events == folded.total_events - 4


def test_flow_arrow_from_launch_to_kernel() -> None:
    tl = compute_timeline(EVENTS, THREADS, 0.0, 200.0, flows=True)
    assert len(tl.flows) == 1  # the memcpy's correlation id has no launch in the trace
    arrow = tl.flows.iloc[0]
    assert (arrow["from_lane"], arrow["from_depth"], arrow["from_ms"]) == ("main thread (tid 11)", 3, 0.025)
    assert (arrow["to_lane"], arrow["to_depth"], arrow["to_ms"]) == ("GPU 0 · stream 7", 0, 0.040)
    spec = timeline_chart(tl)
    arrows = [layer for layer in spec["layer"] if layer["mark"].get("color") == "rgba(200,30,30,0.75)"]
    assert [layer["mark"]["type"] for layer in arrows] == ["rule", "point"]
    (arrow_row,) = arrows[0]["data"]["values"]
    rows = dict(zip(tl.lanes, spec["layer"][0]["encoding"]["y"]["axis"]["values"]))
    assert (arrow_row["x0"], arrow_row["x1"]) == (0.025, 0.040)
    assert (arrow_row["y0"], arrow_row["y1"]) == (rows["main thread (tid 11)"] + 3, rows["GPU 0 · stream 7"])
    assert not [layer for layer in timeline_chart(compute_timeline(EVENTS, THREADS, 0.0, 200.0))["layer"]
                if layer["mark"].get("color") == "rgba(200,30,30,0.75)"]
    assert compute_timeline(EVENTS, THREADS, 0.0, 200.0).flows.empty  # only on demand


def test_labels_on_wide_slices_only() -> None:
    tl = compute_timeline(EVENTS, THREADS, 0.0, 200.0)
    y = -np.arange(len(tl.events), dtype=float)
    x, _ys, texts = slice_labels(tl, y, plot_px=1200)
    names = set(tl.events["name"])
    assert "ProfilerStep#3" in texts and "gemm_kernel" in texts
    assert "cudaLaunchKernel" not in texts and any(t.startswith("cudaLaunch") is False for t in texts)
    assert all(t.rstrip("…") and (t in names or t.endswith("…")) for t in texts)
    narrow = slice_labels(tl, y, plot_px=200)[2]  # a narrow plot: names are cut to the slices' width
    assert any(t.endswith("…") for t in narrow) and len(narrow) <= len(texts)
    assert len(slice_labels(tl, y, max_labels=2)[2]) == 2 and MAX_LABELS >= 100
    assert len(x) == len(texts)


def test_activity_span_opens_on_the_work_not_a_blank_band() -> None:
    # A step of 13 s (the profiler waited) whose work took 1.5 ms, as in a shared Triton trace.
    ev = _events([
        ("ProfilerStep#1", "user_annotation", 0.0, 13e6, "1", "1", None, None, None, ""),
        ("aten::cos", "cpu_op", 100.0, 1400.0, "1", "1", None, None, None, ""),
        ("triton_kernel", "kernel", 900.0, 2.0, "0", "7", 3, 0, 7, ""),
    ])
    assert compute_activity_span(ev, 0.0, 13e6) == (100.0, 1500.0)
    assert compute_activity_span(ev, 5e6, 6e6) == (5e6, 6e6)  # nothing there: the window itself


def test_range_export_parses_keeps_metadata_and_only_the_range() -> None:
    doc = {
        "schemaVersion": 1, "deviceProperties": [{"id": 0}],
        "traceEvents": [
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
            {"ph": "X", "name": "before", "ts": 0, "dur": 5, "pid": 1, "tid": 1},
            {"ph": "X", "name": "across", "ts": 8, "dur": 10, "pid": 1, "tid": 1},
            {"ph": "X", "name": "inside", "ts": 12, "dur": 2, "pid": 1, "tid": 1, "args": {"correlation": 3}},
            {"ph": "i", "name": "mark", "ts": 13, "pid": 1, "tid": 1, "s": "t"},
            {"ph": "C", "name": "mem", "ts": 30, "pid": 1, "args": {"v": 1}},
            {"ph": "X", "name": "after", "ts": 25, "dur": 1, "pid": 1, "tid": 1},
            {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
        ],
    }
    out = json.loads(json.dumps(select_trace_range(doc, 10.0, 20.0)))  # what the download holds parses
    names = [e["name"] for e in out["traceEvents"]]
    assert names == ["thread_name", "across", "inside", "mark", "process_name"]
    assert out["deviceProperties"] == [{"id": 0}] and out["schemaVersion"] == 1
    assert out["traceEvents"][2]["args"] == {"correlation": 3}  # events are kept whole
    assert len(doc["traceEvents"]) == 8  # the source is not touched
    with pytest.raises(ValueError):
        select_trace_range(doc, 5.0, 5.0)


def test_flow_arrows_survive_folding() -> None:
    tl = compute_timeline(EVENTS, THREADS, 0.0, 200.0, flows=True, max_depth=1)
    assert len(tl.flows) == 1 and tl.flows.iloc[0]["from_depth"] == 0  # from the outermost row drawn
