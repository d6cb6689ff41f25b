"""Tests of app.analysis.memory.snapshot: allocator snapshot timelines, largest allocations, memory categories."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from app.analysis.memory.snapshot import (
    ALLOCATION_COLUMNS,
    SNAPSHOT_TIMELINE_COLUMNS,
    compute_category_peak,
    compute_category_timeline,
    compute_largest_allocations,
    compute_segment_summary,
    compute_snapshot_timeline,
    format_frames,
    snapshot_devices,
)
from app.data.snapshot import MEMORY_CATEGORIES, load_memory_timeline_raw, load_snapshot

MiB = 2**20
FIXTURE = Path(__file__).parents[2] / "data" / "snapshots" / "small.snapshot.pickle"


@pytest.fixture(scope="module")
def snap() -> dict:
    return load_snapshot(FIXTURE)


def test_segment_summary(snap: dict) -> None:
    s = compute_segment_summary(snap).set_index("device").loc[0]
    assert s["segments"] == 3
    assert s["reserved_bytes"] == 24 * MiB
    assert s["allocated_bytes"] == s["active_bytes"] == 15 * MiB
    assert s["cached_free_bytes"] == 9 * MiB
    assert s["largest_free_block_bytes"] == 6 * MiB
    assert snapshot_devices(snap) == [0]


def test_snapshot_timeline_ends_at_segment_state_and_peaks_at_temporary(snap: dict) -> None:
    t = compute_snapshot_timeline(snap, 0)
    assert list(t.columns) == SNAPSHOT_TIMELINE_COLUMNS
    assert len(t) == 11
    # 1 MiB existed before the trace (only in segments), so the baseline is 1 MiB.
    assert t["allocated_bytes"].iloc[0] == 1 * MiB
    assert t["allocated_bytes"].iloc[-1] == 15 * MiB
    assert t["allocated_bytes"].max() == 19 * MiB + 512
    assert t.loc[t["allocated_bytes"].idxmax(), "action"] == "alloc"
    # free_requested does not release memory; free_completed does.
    assert t["allocated_bytes"].iloc[6] == t["allocated_bytes"].iloc[5]
    assert t["allocated_bytes"].iloc[7] == t["allocated_bytes"].iloc[5] - 6 * MiB
    assert t["reserved_bytes"].iloc[0] == 22 * MiB and t["reserved_bytes"].iloc[-1] == 24 * MiB
    assert (t["reserved_bytes"] >= t["allocated_bytes"]).all()
    assert t["time_us"].is_monotonic_increasing


def test_snapshot_timeline_without_history(snap: dict) -> None:
    assert compute_snapshot_timeline({"segments": snap["segments"], "device_traces": []}, 0).empty
    assert compute_snapshot_timeline(snap, 3).empty


def test_largest_allocations_with_user_frames(snap: dict) -> None:
    a = compute_largest_allocations(snap, 0, top=10)
    assert list(a.columns) == ALLOCATION_COLUMNS
    assert a["size_bytes"].tolist() == [8 * MiB, 6 * MiB, 4 * MiB, 2 * MiB, 1 * MiB, 512]
    assert a["top_frame"].tolist()[:2] == ["train.py:42:build_model", "model.py:23:forward"]
    temp = a.iloc[1]
    assert not temp["alive_at_end"] and temp["alloc_event"] == 5 and temp["free_event"] == 7
    old = a.iloc[4]  # only in the segments: allocated before the trace started
    assert old["alive_at_end"] and old["alloc_event"] == -1 and old["top_frame"] == "data.py:9:to_device"
    assert "unwind" not in a.iloc[0]["stack"] and "linear.py:106:__init__" in a.iloc[0]["stack"]
    assert len(compute_largest_allocations(snap, 0, top=2)) == 2
    assert compute_largest_allocations({"segments": [], "device_traces": []}, 0).empty


def test_format_frames_edge_cases() -> None:
    assert format_frames([]) == ("", "")
    top, stack = format_frames([{"filename": "/x/site-packages/torch/a.py", "line": 1, "name": "f"}])
    assert top == "a.py:1:f" and stack == "a.py:1:f"


def test_category_timeline_real_file(shared_data: Path) -> None:
    raw = load_memory_timeline_raw(shared_data / "memory" / "memory_timeline.raw.gz")
    cats = compute_category_timeline(raw, max_points=2000)
    assert len(cats) <= 2000
    cols = [c for c in cats.columns if c.endswith("_bytes") and c != "total_bytes"]
    assert {c.removesuffix("_bytes") for c in cols} <= set(MEMORY_CATEGORIES)
    assert (cats[cols].sum(axis=1) == cats["total_bytes"]).all()
    assert cats["time_ms"].iloc[0] == 0.0 and cats["time_ms"].is_monotonic_increasing
    # The downsampled series keeps the true peak of the full one.
    full = compute_category_timeline(raw, max_points=10**9)
    assert cats["total_bytes"].max() == full["total_bytes"].max()
    peak = compute_category_peak(cats)
    assert peak["bytes"].sum() == cats["total_bytes"].max()
    assert peak.iloc[0]["category"] == "activation"
    assert peak["share"].sum() == pytest.approx(1.0)


def test_category_timeline_hand_made() -> None:
    raw = pd.DataFrame({
        "ts_ns": np.array([-1, 100, 200, 300, 300], dtype=np.int64),
        "action": ["preexisting", "create", "create", "destroy", "create"],
        "bytes": np.array([10, 5, 7, -5, 1], dtype=np.int64),
        "category": pd.Categorical(["parameter", "activation", "gradient", "activation", "temporary"],
                                   categories=list(MEMORY_CATEGORIES)),
    })
    cats = compute_category_timeline(raw)
    assert cats["ts_ns"].tolist() == [100, 200, 300]
    assert cats["total_bytes"].tolist() == [15, 22, 18]
    assert cats["parameter_bytes"].tolist() == [10, 10, 10]
    assert "input_bytes" not in cats.columns
    peak = compute_category_peak(cats)
    assert peak.set_index("category")["bytes"].to_dict() == {"parameter": 10, "gradient": 7, "activation": 5,
                                                            "temporary": 0}
    assert compute_category_timeline(raw.iloc[0:0]).empty and compute_category_peak(cats.iloc[0:0]).empty


def _drawn(spec: dict) -> list[tuple[str, str, str]]:
    """(legend entry, mark, y field) of each layer but the peak's two (the hover layer has none)."""
    return [(layer["encoding"].get("color", {}).get("datum", ""), layer["mark"]["type"],
             layer["encoding"]["y"]["field"]) for layer in spec["layer"]
            if layer["mark"].get("shape") != "cross" and layer["mark"]["type"] != "text"]


def test_memory_figures(snap: dict) -> None:
    from app.charts.memory import byte_unit, category_chart, memory_timeline_chart

    assert byte_unit(3 * 2**30) == (2.0**30, "GiB") and byte_unit(10) == (1.0, "B")
    t = compute_snapshot_timeline(snap, 0)
    peak = int(t["allocated_bytes"].idxmax())
    spec = memory_timeline_chart(t, x="event", x_title="event", peak_index=peak, title="<b>cuda:0</b>")
    assert _drawn(spec) == [("reserved", "line", "reserved"), ("allocated", "area", "allocated"),
                            ("allocated", "line", "allocated"), ("", "point", "allocated")]
    rows = spec["data"]["values"]
    assert len(rows) == len(t) and rows[peak]["allocated"] == pytest.approx(t.at[peak, "allocated_bytes"] / MiB, rel=1e-6)
    assert rows[0]["reserved"] == pytest.approx(t["reserved_bytes"].iloc[0] / MiB, rel=1e-6)
    assert not any("transform" in layer for layer in spec["layer"])  # no expression per row in the browser
    mark, label = spec["layer"][-2:]
    assert mark["mark"]["shape"] == "cross" and mark["data"]["values"][0]["y"] == pytest.approx(19 + 512 / MiB)
    assert label["data"]["values"][0]["label"] == f"peak {19 + 512 / MiB:,.2f} MiB"
    assert spec["layer"][0]["encoding"]["y"]["title"] == "MiB"
    assert spec["title"]["text"] == "<b>cuda:0</b>"  # SVG text: shown as written, never markup
    tooltip = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "point")["encoding"]["tooltip"]
    assert [x["title"] for x in tooltip] == ["event", "allocated (MiB)", "reserved (MiB)"]
    no_reserved = memory_timeline_chart(t.assign(reserved_bytes=np.nan), x="event", x_title="event")
    assert [d[0] for d in _drawn(no_reserved)] == ["allocated", "allocated", ""]
    assert no_reserved["layer"][0]["encoding"]["color"]["scale"]["domain"] == ["allocated"]
    assert "title" not in no_reserved
    raw = pd.DataFrame({"ts_ns": np.array([1, 2], dtype=np.int64), "action": ["create", "create"],
                        "bytes": np.array([2**20, 2**21], dtype=np.int64),
                        "category": pd.Categorical(["parameter", "activation"], categories=list(MEMORY_CATEGORIES))})
    cats = compute_category_timeline(raw)
    cat_spec = category_chart(cats, title="<i>rank 0</i>")
    *areas, hover = cat_spec["layer"]
    # stacked here: one area per category, parameters at the bottom, each from the top of the one below
    assert not any("transform" in layer for layer in cat_spec["layer"])  # no expression per row in the browser
    assert [(a["mark"]["type"], a["encoding"]["color"]["datum"], a["encoding"]["y"]["field"],
             a["encoding"].get("y2", {}).get("field")) for a in areas] == [
        ("area", "parameter", "top_0", None), ("area", "activation", "top_1", "top_0")]
    assert cat_spec["data"]["values"][-1] == {"time_ms": pytest.approx(1e-6), "top_0": 1.0, "top_1": 3.0}
    assert areas[0]["encoding"]["y"]["title"] == "MiB"
    assert areas[1]["encoding"]["color"]["scale"] == {"domain": ["parameter", "activation"],
                                                     "range": ["darkgreen", "red"]}
    assert hover["data"]["values"][-1] == {"time_ms": pytest.approx(1e-6), "parameter": 1.0, "activation": 2.0,
                                           "total": 3.0}
    assert [x["title"] for x in hover["encoding"]["tooltip"]] == ["ms", "parameter (MiB)", "activation (MiB)",
                                                                  "total (MiB)"]
    assert cat_spec["title"]["text"] == "<i>rank 0</i>"


def test_memory_hover_layers_are_bounded_and_keep_the_peaks() -> None:
    # The hover layer's Voronoi diagram over every row cost the browser as much as the areas: it
    # gets at most HOVER_POINTS rows, and the peak of a long series is among them.
    from app.charts.memory import HOVER_POINTS, category_chart, memory_timeline_chart

    n = 20_000
    allocated = np.abs(np.sin(np.arange(n) / 700.0)) * 2**30
    allocated[12_345] = 3 * 2**30
    frame = pd.DataFrame({"t": np.arange(n, dtype=np.float64), "allocated_bytes": allocated})
    spec = memory_timeline_chart(frame, x="t", x_title="t")
    hover = next(layer for layer in spec["layer"] if "params" in layer)
    assert len(spec["data"]["values"]) == n and len(hover["data"]["values"]) <= HOVER_POINTS
    assert max(r["allocated"] for r in hover["data"]["values"]) == pytest.approx(3.0)
    cats = pd.DataFrame({"time_ms": np.arange(n, dtype=np.float64), "parameter_bytes": allocated / 2,
                         "activation_bytes": allocated / 2, "total_bytes": allocated})
    cat_spec = category_chart(cats)
    cat_hover = cat_spec["layer"][-1]
    assert len(cat_spec["data"]["values"]) == n and len(cat_hover["data"]["values"]) <= HOVER_POINTS
    assert max(r["total"] for r in cat_hover["data"]["values"]) == pytest.approx(3.0)


def test_oom_events(snap: dict) -> None:
    from app.analysis.memory.snapshot import compute_oom_events

    assert compute_oom_events(snap, 0).empty
    oom = {"action": "oom", "size": 40 * MiB, "device_free": 3 * MiB, "stream": 0,
           "frames": [{"filename": "/home/me/train.py", "line": 99, "name": "step"}]}
    with_oom = {**snap, "device_traces": [[*snap["device_traces"][0], oom]]}
    got = compute_oom_events(with_oom, 0)
    assert got.to_dict("records") == [{"event": 11, "requested_bytes": 40 * MiB, "device_free_bytes": 3 * MiB,
                                       "top_frame": "train.py:99:step"}]
    # An OOM entry has no address: the timeline and the allocations ignore it.
    assert compute_snapshot_timeline(with_oom, 0)["allocated_bytes"].iloc[-1] == 15 * MiB
    assert len(compute_largest_allocations(with_oom, 0)) == 6


def test_trace_allocations_name_the_op_and_lifetime() -> None:
    from app.analysis.memory.snapshot import TRACE_ALLOCATION_COLUMNS, compute_trace_allocations

    def cat(values: list) -> pd.Series:
        return pd.Series(values, dtype="category")

    events = pd.DataFrame({
        "name": cat(["ProfilerStep#1", "aten::linear", "aten::addmm", "aten::empty", "aten::relu", "other::op"]),
        "cat": cat(["user_annotation", "cpu_op", "cpu_op", "cpu_op", "cpu_op", "cpu_op"]),
        "ts_us": [0.0, 10.0, 20.0, 24.0, 110.0, 20.0],
        "dur_us": [200.0, 50.0, 30.0, 2.0, 20.0, 30.0],
        "tid": cat(["11", "11", "11", "11", "11", "99"]),
        "input_shapes": cat(["", "[[4,8]]", "[[4,8],[8,8]]", "[[]]", "[[4,8]]", ""]),
    })
    memory = pd.DataFrame({
        "ts_us": [25.0, 75.0, 115.0, 116.0],
        "device_type": pd.array([1, 1, 1, 0], dtype="Int64"),
        "device_id": pd.array([0, 0, 0, -1], dtype="Int64"),
        "addr": pd.array([1, 1, 2, 3], dtype="Int64"),
        "bytes": pd.array([100, -100, 50, 10], dtype="Int64"),
        "tid": cat(["11", "11", "11", "11"]),
    })
    got = compute_trace_allocations(memory, events, top=3)
    assert list(got.columns) == TRACE_ALLOCATION_COLUMNS
    assert got["bytes"].tolist() == [100, 50, 10]
    first = got.iloc[0]
    # aten::empty only allocates: the op that asked is addmm; the other thread's op is ignored.
    assert first["op"] == "aten::addmm" and first["input_shapes"] == "[[4,8],[8,8]]"
    assert first["op_stack"] == "aten::linear > aten::addmm > aten::empty"
    assert first["device"] == "cuda:0" and first["lifetime_us"] == 50.0
    second = got.iloc[1]
    assert second["op"] == "aten::relu" and np.isnan(second["lifetime_us"])  # never freed in the trace
    assert got.iloc[2]["device"] == "cpu"
    assert compute_trace_allocations(memory.iloc[0:0], events).empty


def test_a_brief_category_stays_in_the_legend_when_the_kept_timestamps_miss_it() -> None:
    # min/max of the total keeps the peaks; a temporary held between two kept timestamps can be
    # absent from every kept row: the legend still names it (the chart does not say "none").
    from app.charts.memory import category_chart

    cats = pd.DataFrame({"time_ms": [0.0, 1.0, 2.0], "parameter_bytes": [2.0**20] * 3,
                         "temporary_bytes": [0.0, 0.0, 0.0], "total_bytes": [2.0**20] * 3})
    areas = [layer for layer in category_chart(cats)["layer"] if layer["mark"]["type"] == "area"]
    assert [a["encoding"]["color"]["datum"] for a in areas] == ["parameter", "temporary"]
    assert areas[0]["encoding"]["color"]["scale"]["domain"] == ["parameter", "temporary"]


def test_a_window_of_the_category_timeline_has_full_detail_and_opens_at_the_held_value(shared_data) -> None:
    # A zoom redraws the range with as many points again: more timestamps inside the window than
    # the whole timeline kept there, each the same as the full-resolution table, and the window
    # opens with what was held at its start (the last timestamp before it).
    raw = load_memory_timeline_raw(shared_data / "memory" / "memory_timeline.raw.gz")
    full = compute_category_timeline(raw, max_points=10**9).set_index("ts_ns")
    coarse = compute_category_timeline(raw, max_points=300)
    lo, hi = float(full["time_ms"].quantile(0.4)), float(full["time_ms"].quantile(0.45))
    zoomed = compute_category_timeline(raw, max_points=300, window_ms=(lo, hi))
    inside = zoomed[zoomed["time_ms"] >= lo]
    assert len(inside) > 3 * ((coarse["time_ms"] >= lo) & (coarse["time_ms"] <= hi)).sum()
    assert inside["time_ms"].max() <= hi and zoomed["time_ms"].iloc[0] < lo  # the held value at lo
    assert zoomed["time_ms"].iloc[0] == full.loc[full["time_ms"] < lo, "time_ms"].max()
    expected = full.loc[zoomed["ts_ns"]].reset_index()[zoomed.columns]
    pd.testing.assert_frame_equal(zoomed, expected, check_dtype=False)
    assert len(zoomed) <= 300
    # outside every timestamp: the last held value alone, never an empty chart
    late = compute_category_timeline(raw, max_points=300, window_ms=(1e12, 2e12))
    assert len(late) == 1 and late["ts_ns"].iloc[0] == full.index.max()


def test_window_positions_keep_the_step_before_the_window() -> None:
    from app.analysis.memory.snapshot import window_positions

    times = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    assert window_positions(times, (1.5, 3.0)).tolist() == [1, 2, 3]
    assert window_positions(times, (1.0, 1.0)).tolist() == [1]  # a timestamp at the start is its own step
    assert window_positions(times, (-5.0, 0.5)).tolist() == [0]
    assert window_positions(times, (9.0, 10.0)).tolist() == [4]
