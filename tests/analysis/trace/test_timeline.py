"""Tests of app.analysis.trace.timeline and app.charts.timeline: step windows, lanes, budget, ops at an instant."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.analysis.trace.timeline import (
    TIMELINE_COLUMNS,
    compute_ops_at,
    compute_step_windows,
    compute_timeline,
)
from app.charts.timeline import lane_rows, timeline_chart


def _events(rows: list[tuple]) -> pd.DataFrame:
    cols = ["name", "cat", "ts_us", "dur_us", "pid", "tid", "correlation", "device", "stream", "input_shapes"]
    df = pd.DataFrame(rows, columns=cols)
    for c in ("correlation", "device", "stream"):
        df[c] = pd.array(df[c], dtype="Int64")
    for c in ("name", "cat", "pid", "tid", "input_shapes"):
        df[c] = df[c].astype("category")
    return df


# A host thread running two steps, each launching a kernel that ends after the host step.
EVENTS = _events([
    ("ProfilerStep#3", "user_annotation", 0.0, 100.0, "1", "11", None, None, None, ""),
    ("aten::linear", "cpu_op", 10.0, 50.0, "1", "11", None, None, None, "[[4,8],[8,8]]"),
    ("aten::addmm", "cpu_op", 20.0, 30.0, "1", "11", None, None, None, "[[4,8]]"),
    ("cudaLaunchKernel", "cuda_runtime", 25.0, 5.0, "1", "11", 7, None, None, ""),
    ("gemm_kernel", "kernel", 40.0, 90.0, "0", "7", 7, 0, 7, ""),
    ("ProfilerStep#4", "user_annotation", 100.0, 100.0, "1", "11", None, None, None, ""),
    ("aten::relu", "cpu_op", 110.0, 20.0, "1", "11", None, None, None, "[[4,8]]"),
    ("memcpy", "gpu_memcpy", 150.0, 10.0, "0", "8", 9, 0, 8, ""),
])
THREADS = pd.DataFrame({"pid": ["1", "1"], "tid": ["11", "11"], "kind": ["process", "thread"],
                        "name": ["python", "main thread"]})


def test_step_windows_extend_to_device_work() -> None:
    w = compute_step_windows(EVENTS)
    assert w["step"].tolist() == [3, 4]
    assert w["start_us"].tolist() == [0.0, 100.0]
    # step 3's kernel (launched at 25 µs) ends at 130 µs, after the host step's end at 100 µs.
    assert w["end_us"].tolist() == [130.0, 200.0]
    assert w["duration_us"].tolist() == [130.0, 100.0]


def test_step_windows_empty_without_annotations() -> None:
    assert compute_step_windows(EVENTS[~EVENTS["name"].astype(str).str.startswith("Profiler")]).empty
    assert compute_step_windows(EVENTS.iloc[0:0]).empty


def test_timeline_lanes_depths_and_names() -> None:
    tl = compute_timeline(EVENTS, THREADS, 0.0, 130.0)
    assert list(tl.events.columns) == TIMELINE_COLUMNS
    assert tl.lanes == ["main thread (tid 11)", "GPU 0 · stream 7"]
    by_name = tl.events.set_index("name")
    assert by_name.loc["ProfilerStep#3", "depth"] == 0
    assert by_name.loc["aten::linear", "depth"] == 1
    assert by_name.loc["aten::addmm", "depth"] == 2
    assert by_name.loc["cudaLaunchKernel", "depth"] == 3
    assert by_name.loc["gemm_kernel", "depth"] == 0
    assert by_name.loc["aten::relu", "start_ms"] == pytest.approx(0.110)
    assert "memcpy" not in by_name.index  # starts at 150 µs, after the window
    assert tl.hidden_events == 0 and tl.shown_events == tl.total_events == 7


def test_timeline_budget_keeps_longest_and_reports_hidden() -> None:
    tl = compute_timeline(EVENTS, THREADS, 0.0, 200.0, max_events=3)
    assert tl.total_events == 8 and tl.hidden_events == 5 and tl.shown_events == 3
    assert set(tl.events["dur_us"]) == {100.0, 90.0}
    assert tl.hidden_max_dur_us == 50.0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e4), st.floats(0, 1e3)), min_size=1, max_size=300), st.integers(1, 300))
def test_timeline_budget_property(intervals: list[tuple[float, float]], budget: int) -> None:
    rows = [(f"op{i}", "cpu_op", ts, dur, "1", "11", None, None, None, "") for i, (ts, dur) in enumerate(intervals)]
    ev = _events(rows)
    tl = compute_timeline(ev, None, -1.0, 1.2e4, max_events=budget)
    # at most `budget` shapes; every event is drawn (alone or merged into a sub-pixel run) or counted hidden
    assert len(tl.events) <= budget
    assert tl.shown_events + tl.hidden_events == len(rows) and int(tl.events["count"].sum()) == tl.shown_events
    if tl.hidden_events:
        assert ((tl.events["end_ms"] - tl.events["start_ms"]) * 1000 >= tl.hidden_max_dur_us - 1e-6).all()
    # Depth: an event nested in another one of the same lane is drawn below it.
    assert (tl.events["depth"] >= 0).all()


def test_timeline_rejects_bad_window() -> None:
    with pytest.raises(ValueError, match="end_us > start_us"):
        compute_timeline(EVENTS, THREADS, 5.0, 5.0)


def _layer(spec: dict, mark: str) -> dict:
    return next(layer for layer in spec["layer"] if layer["mark"]["type"] == mark)


def test_timeline_chart_one_rect_per_shape_lanes_top_down_and_plain_names() -> None:
    ev = EVENTS.copy()
    ev["name"] = ev["name"].cat.add_categories(["<script>x</script>"])
    ev.loc[1, "name"] = "<script>x</script>"
    tl = compute_timeline(ev, THREADS, 0.0, 200.0)
    spec = timeline_chart(tl, title="step 3")
    shapes = spec["data"]["values"]
    y, ticks, labels, rows = lane_rows(tl)
    assert labels == tl.lanes and len(y) == len(tl.events) and rows >= len(tl.lanes)
    # one rect per shape, at its lane's row and depth; the names written as SVG text, never as markup
    assert len(shapes) == len(tl.events) and shapes["row"].tolist() == y.tolist()
    assert "<script>x</script>" in shapes["name"].tolist()
    assert "<script>x</script>" in shapes["label"].tolist() and spec["title"]["text"] == "step 3"
    axis = _layer(spec, "rect")["encoding"]["y"]
    lo, hi = axis["scale"]["domain"]
    assert lo > hi  # row 0 at the top
    assert axis["axis"]["values"] == [int(t) for t in ticks]
    assert all(json.dumps(lane)[1:-1] in axis["axis"]["labelExpr"] for lane in labels)
    text = _layer(spec, "text")
    assert text["transform"][0]["filter"] == "datum.label != ''"
    # the window's x extent, in ms
    assert _layer(spec, "rect")["encoding"]["x"]["scale"]["domain"] == [0, 0.2]


def test_ops_at_instant() -> None:
    ops = compute_ops_at(EVENTS, 45.0, before=5)
    running = ops[ops["relation"] == "running"]["name"].tolist()
    assert running == ["aten::linear", "aten::addmm"]  # outermost first; the step marker is excluded
    assert compute_ops_at(EVENTS, 135.0)["name"].tolist() == ["aten::relu", "aten::linear", "aten::addmm"]
    gaps = compute_ops_at(EVENTS, 135.0)["ends_before_us"].tolist()
    assert gaps == [5.0, 75.0, 85.0]
    assert compute_ops_at(EVENTS.iloc[0:0], 1.0).empty


def test_real_gpu_trace(shared_data: Path) -> None:
    from app.data.trace import load_trace

    trace = load_trace(shared_data / "traces" / "gpu_before_after" / "control.json.gz", use_cache=False)
    windows = compute_step_windows(trace.events)
    assert len(windows) == 6 and (windows["duration_us"] > 0).all()
    row = windows.iloc[1]
    tl = compute_timeline(trace.events, trace.threads, row["start_us"], row["end_us"], max_events=5000)
    assert tl.shapes <= 5000 < tl.total_events and tl.merged_events > 0  # sub-pixel slices merged
    assert tl.shown_events + tl.hidden_events == tl.total_events
    assert any(lane.startswith("GPU ") for lane in tl.lanes)
    assert np.isfinite(tl.events["start_ms"]).all()


def test_name_filter_prefix_and_combine() -> None:
    from app.analysis.trace.timeline import combine_timelines

    a = compute_timeline(EVENTS, THREADS, 0.0, 130.0, name_contains="ATEN::", lane_prefix="rank 0 · ")
    assert a.events["name"].tolist() == ["aten::linear", "aten::addmm", "aten::relu"]
    assert a.lanes == ["rank 0 · main thread (tid 11)"] and set(a.events["lane"]) == set(a.lanes)
    plain = EVENTS.assign(name=EVENTS["name"].astype(str))  # not categorical: same answer
    assert compute_timeline(plain, THREADS, 0.0, 130.0, name_contains="aten::").events["name"].tolist() == \
        a.events["name"].tolist()
    b = compute_timeline(EVENTS, THREADS, 100.0, 200.0, lane_prefix="rank 1 · ", max_events=2)
    both = combine_timelines([a, b])
    assert both.lanes == a.lanes + b.lanes
    assert both.total_events == a.total_events + b.total_events and both.hidden_events == b.hidden_events
    assert both.start_us == 0.0 and both.end_us == 130.0
    assert both.events["start_ms"].tolist()[:3] == a.events["start_ms"].tolist()  # each keeps its origin
    with pytest.raises(ValueError):
        combine_timelines([])


def test_timeline_chart_readable_categories_with_fixed_colours() -> None:
    full = timeline_chart(compute_timeline(EVENTS, THREADS, 0.0, 200.0))
    kernels_only = timeline_chart(compute_timeline(EVENTS, THREADS, 0.0, 200.0, name_contains="gemm"))
    colour = _layer(full, "rect")["encoding"]["color"]["scale"]
    names = set(colour["domain"])
    assert {"CPU op", "CUDA runtime", "kernel", "GPU memcpy", "annotation (record_function)"} <= names
    assert not names & {"cpu_op", "cuda_runtime", "gpu_memcpy", "user_annotation"}
    by_name = dict(zip(colour["domain"], colour["range"]))
    # the same category keeps its colour whatever else the window holds
    only = _layer(kernels_only, "rect")["encoding"]["color"]["scale"]
    assert dict(zip(only["domain"], only["range"])) == {"kernel": by_name["kernel"]}
    shapes = full["data"]["values"]
    assert "CPU op" in shapes["cat"].tolist() and all(d.endswith(" µs") for d in shapes["dur"])
    assert "'duration': datum.dur, 'category': datum.cat" in _layer(full, "rect")["mark"]["tooltip"]["signal"]
    assert _layer(full, "rect")["encoding"]["color"]["legend"]["orient"] == "top"
