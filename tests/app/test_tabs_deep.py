"""The Run page's deep tabs (Metrics, Timeline, Memory, Graph) driven one at a time with AppTest,
on hand-made runs, a real CPU profile recorded here, real GPU traces and a hand-made snapshot."""
from __future__ import annotations

import json
import pickle
import shutil
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from profiler_agent.runformat import layout, update_manifest
from tests.app.helpers import chart_labels, texts, vega_rows

SNAPSHOT = Path(__file__).parents[1] / "data" / "snapshots" / "small.snapshot.pickle"


def _tab_script(run_dir: str, tab: str, rank: int | None) -> None:
    import importlib
    from pathlib import Path

    from app.ui.cache import cached_run
    from app.ui.tabs import RunContext

    module = importlib.import_module(f"app.ui.tabs.{tab}")
    module.render(RunContext(run_dir=Path(run_dir), run=cached_run(run_dir), rank=rank, key_prefix="t_"))


def open_tab(run_dir: Path, tab: str, rank: int | None = None) -> AppTest:
    at = AppTest.from_function(_tab_script, args=(str(run_dir), tab, rank), default_timeout=60)
    return at.run()


def charts(at: AppTest) -> list:
    """The tab's charts: plotly figures, then Vega-Lite charts, in page order within a kind (most
    tabs draw one kind)."""
    return list(at.get("plotly_chart")) + list(at.get("vega_lite_chart"))


def chart_text(chart: Any) -> str:
    """A chart's spec as text (not ASCII-escaped) and its rows, sent apart as Arrow: what it shows."""
    return json.dumps(json.loads(chart.proto.spec), ensure_ascii=False) + json.dumps(vega_rows(chart),
                                                                                   ensure_ascii=False, default=str)


def assert_ok(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cpu_profiled_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run whose traces/ holds a real CPU trace with memory events, recorded by torch.profiler."""
    import torch

    from tests.conftest import write_run

    root = tmp_path_factory.mktemp("deep_store")
    run_dir = write_run(root, "cpu-profiled", steps=6)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    (run_dir / layout.TRACES_DIR).mkdir(exist_ok=True)
    trace = run_dir / layout.TRACES_DIR / layout.trace_file_name("host_1_rank0", time.time_ns(), gzip=False)
    with warnings.catch_warnings():  # "Profiler clears events at the end of each cycle": intended here
        warnings.simplefilter("ignore", UserWarning)
        _profile(model, opt, trace)
    return run_dir


def _profile(model, opt, trace: Path) -> None:  # noqa: ANN001
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=2),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(trace))) as prof:
        for _ in range(3):
            loss = model(torch.randn(32, 64)).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()


@pytest.fixture
def graph_run(make_run) -> Path:  # noqa: ANN001
    import torch

    from profiler_agent.graph import make_backward_dot, write_backward_graph, write_module_tree

    run_dir = make_run("graphed")
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 6 * 6, 10))
    loss = model(torch.randn(2, 3, 8, 8)).sum()
    write_module_tree(run_dir, model)
    write_backward_graph(run_dir, make_backward_dot(loss, dict(model.named_parameters())))
    return run_dir


# -- Metrics --------------------------------------------------------------------------------


def test_metrics_draws_every_curve_and_ranks(make_run) -> None:  # noqa: ANN001
    run_dir = make_run("two", ranks=2, steps=30)
    at = open_tab(run_dir, "metrics")
    assert_ok(at)
    chosen = at.multiselect(key="t_metrics_keys").value
    assert chosen[:2] == ["loss", "lr"] and "step_time_s" in chosen
    assert len(charts(at)) == len(chosen)
    # One rank by default; overlaying both draws each chart's points of both.
    assert {r["rank"] for r in vega_rows(charts(at)[0])} == {"rank 0"}
    at.multiselect(key="t_metrics_ranks").set_value([0, 1]).run()
    assert_ok(at)
    assert {r["rank"] for r in vega_rows(charts(at)[0])} == {"rank 0", "rank 1"}
    at.radio(key="t_metrics_x").set_value("relative_time").run()
    at.slider(key="t_metrics_smoothing").set_value(0.0).run()
    assert_ok(at)
    assert "time since first sample" in charts(at)[0].proto.spec
    at.radio(key="t_metrics_x").set_value("wall_time").run()
    assert_ok(at)
    wall = json.loads(charts(at)[0].proto.spec)["layer"][0]["encoding"]["x"]
    assert wall["type"] == "temporal" and all(r["x"] > 1e12 for r in vega_rows(charts(at)[0]))  # ms since 1970
    # the agent's keys are titled in words; the options still say which key was logged
    assert "training loss" in charts(at)[0].proto.spec
    assert "learning rate" in at.multiselect(key="t_metrics_keys").options


def test_metrics_without_metrics_explains(make_run) -> None:  # noqa: ANN001
    run_dir = make_run("empty", steps=0)
    at = open_tab(run_dir, "metrics")
    assert_ok(at)
    assert "no logged metrics" in texts(at.info)
    assert not charts(at)


# -- Timeline -------------------------------------------------------------------------------


def test_timeline_of_real_gpu_trace_with_level_of_detail(imported_store) -> None:  # noqa: ANN001
    _, runs = imported_store
    at = open_tab(runs["gpu-control"], "timeline")
    assert_ok(at)
    assert len(charts(at)) == 1
    steps = at.select_slider(key="t_timeline_steps")
    assert len(steps.options) == 6 and steps.value == (1009, 1009)
    caption = texts(at.caption)
    assert "shapes (at most 5,000)" in caption and "merged into paler slices" in caption
    at.select_slider(key="t_timeline_steps").set_value((1009, 1011)).run()  # three steps at once
    assert_ok(at)
    assert "steps 1009–1011" in chart_text(charts(at)[0])
    at.select_slider(key="t_timeline_levels").set_value("1").run()
    assert_ok(at)
    assert "nested events are folded" in texts(at.caption)
    at.toggle(key="t_timeline_flows").set_value(True).run()
    assert_ok(at)
    assert "launch → kernel" in chart_text(charts(at)[0])
    at.text_input(key="t_timeline_lane_filter").set_value("GPU").run()
    assert_ok(at)
    assert "main thread" not in chart_text(charts(at)[0]) and "GPU" in chart_text(charts(at)[0])
    buttons = {b.proto.label for b in at.get("download_button")}
    assert {"Download this range (Chrome trace JSON)", "Download raw trace"} <= buttons
    assert "ui.perfetto.dev" in texts(at.caption)


def test_timeline_cpu_trace_and_two_ranks(cpu_profiled_run, imported_store) -> None:  # noqa: ANN001
    at = open_tab(cpu_profiled_run, "timeline")
    assert_ok(at)
    assert len(charts(at)) == 1 and "events in" in texts(at.caption)
    at = open_tab(imported_store[1]["two-ranks"], "timeline", rank=1)
    assert_ok(at)
    picker = at.selectbox(key="t_timeline_trace")
    assert picker.value == 1 and picker.options[1].startswith("rank 1 · ")
    at.toggle(key="t_timeline_all_ranks").set_value(True).run()
    assert_ok(at)
    spec = chart_text(charts(at)[0])
    assert "rank 0 · " in spec and "rank 1 · " in spec and "all ranks" in spec


def test_timeline_name_filter(imported_store) -> None:  # noqa: ANN001
    at = open_tab(imported_store[1]["gpu-control"], "timeline")
    at.text_input(key="t_timeline_filter").set_value("NCCL").run()
    assert_ok(at)
    caption = texts(at.caption)
    shown = int(caption.split(" of ")[0].replace(",", "").split()[-1])  # "N of M events in K lanes"
    assert 0 < shown < 1000
    at.text_input(key="t_timeline_filter").set_value("no-such-op-xyz").run()
    assert_ok(at)
    assert "no-such-op-xyz" in texts(at.info) and not charts(at)


def test_timeline_without_trace_explains(make_run) -> None:  # noqa: ANN001
    at = open_tab(make_run("plain"), "timeline")
    assert_ok(at)
    assert "No profiler trace" in texts(at.info)
    assert not charts(at)


# -- Memory ---------------------------------------------------------------------------------


def test_memory_from_cpu_trace_marks_peak_and_lists_ops(cpu_profiled_run) -> None:  # noqa: ANN001
    at = open_tab(cpu_profiled_run, "memory")
    assert_ok(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Peak allocated"].endswith(("KiB", "MiB"))
    # a Vega-Lite chart (no plotly.js for the tab's first chart), its rows sent as Arrow
    assert not at.get("plotly_chart")
    chart = at.get("vega_lite_chart")[0]
    spec, rows = json.loads(chart.proto.spec), vega_rows(chart)
    peak = max(r["allocated"] for r in rows if r["allocated"] is not None)
    unit = spec["layer"][0]["encoding"]["y"]["title"]
    assert unit in ("KiB", "MiB") and metrics["Peak allocated"].endswith(unit)
    assert chart_labels(spec) == [f"peak {peak:,.2f} {unit}"]
    assert all(r["reserved"] is None for r in rows)  # CPU: no reserved memory drawn
    ops = at.dataframe[0].value
    assert len(ops) > 0 and set(ops["relation"]) <= {"running", "ended before"}
    assert ops["name"].str.startswith("aten::").any()
    allocs = at.dataframe[1].value
    assert 0 < len(allocs) <= 20 and allocs["op"].str.startswith("aten::").all()
    assert not allocs["op"].isin(["aten::empty", "aten::empty_strided"]).any()
    # shapes for people (32×3×32×32), as in the Operators tab, never the recorded lists
    shapes = [str(v) for v in [*ops["input_shapes"], *allocs["input_shapes"]] if v]
    assert shapes and not any("[" in v for v in shapes) and any("×" in v for v in shapes)
    info = texts(at.info)
    assert "No CUDA allocator snapshot" in info and "export_memory_timeline" in info


def test_memory_snapshot_views(make_run) -> None:  # noqa: ANN001
    run_dir = make_run("cuda-ish")
    (run_dir / layout.MEMORY_DIR).mkdir()
    shutil.copy(SNAPSHOT, run_dir / layout.MEMORY_DIR / layout.snapshot_file_name("host_1_rank0", 1))
    at = open_tab(run_dir, "memory")
    assert_ok(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Allocated at snapshot"] == "15.0 MiB" and metrics["Reserved"] == "24.0 MiB"
    spec = json.loads(at.get("vega_lite_chart")[0].proto.spec)
    assert spec["title"]["text"].startswith("active memory")
    whole = vega_rows(at.get("vega_lite_chart")[0])
    zoom = at.slider[0]  # the snapshot's timeline zooms like the trace's
    lo, hi = zoom.value
    cut = round(lo + (hi - lo) / 2, 2)
    zoom.set_value((cut, hi)).run()
    assert_ok(at)
    part = vega_rows(at.get("vega_lite_chart")[0])
    assert part[0]["x"] <= cut < part[1]["x"] and part[-1]["x"] == whole[-1]["x"] and len(part) < len(whole)
    largest = at.dataframe[0].value
    assert largest["top_frame"].iloc[0] == "train.py:42:build_model"
    assert "No profiler trace" in texts(at.info)


@pytest.mark.fault("hostile pickle")
def test_memory_refuses_hostile_snapshot_without_crashing(make_run, tmp_path) -> None:  # noqa: ANN001
    class Boom:
        def __reduce__(self):  # noqa: ANN204
            return (shutil.rmtree, (str(tmp_path / "victim"),))

    (tmp_path / "victim").mkdir()
    run_dir = make_run("hostile")
    (run_dir / layout.MEMORY_DIR).mkdir()
    path = run_dir / layout.MEMORY_DIR / layout.snapshot_file_name("evil", 2)
    path.write_bytes(pickle.dumps({"segments": [Boom()], "device_traces": []}))
    at = open_tab(run_dir, "memory")
    assert not at.exception
    assert "refused" in texts(at.error) and path.name in texts(at.error)
    assert (tmp_path / "victim").is_dir()


# -- Graph ----------------------------------------------------------------------------------


def test_graph_svg_and_module_tree(graph_run) -> None:  # noqa: ANN001
    import base64

    from app.analysis.model.tree import ROOT_LABEL

    at = open_tab(graph_run, "graph")
    assert_ok(at)
    assert not at.get("plotly_chart"), "the Graph tab needs no plotly.js"
    graph, icicle = (json.loads(c.proto.spec) for c in at.get("vega_lite_chart"))
    uri = graph["mark"]["url"]
    assert graph["mark"]["type"] == "image" and uri.startswith("data:image/svg+xml;base64,")
    assert base64.b64decode(uri.split(",", 1)[1]) == (graph_run / layout.GRAPH_SVG).read_bytes()
    assert graph["params"][0]["bind"] == "scales"
    assert "Scroll over the graph to zoom" in texts(at.caption)
    # the icicle: the model, then its four layers side by side by their parameters
    rows = {r["path"]: r for r in vega_rows(at.get("vega_lite_chart")[1])}
    params = {"0": 4 * 3 * 9 + 4, "3": 144 * 10 + 10}
    assert set(rows) == {ROOT_LABEL, "0", "3"}  # ReLU and Flatten hold no parameters: no cell
    for path, n in params.items():
        assert rows[path]["x1"] - rows[path]["x0"] == pytest.approx(n / sum(params.values()))
    assert icicle["encoding"]["tooltip"][-1]["title"] == "share of the model's parameters"
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Parameters"] == f"{4 * 3 * 9 + 4 + 144 * 10 + 10:,}"
    assert metrics["Modules"] == "5"
    table = at.dataframe[0].value
    assert table["type"].tolist() == ["Sequential", "Conv2d", "ReLU", "Flatten", "Linear"]
    # FLOPs in millions (a ten-digit count is unreadable), every column with a readable header
    assert "flops" not in table.columns and table["mflops"].iloc[0] * 1e6 >= table["mflops"].iloc[1:].sum() * 1e6
    labels = {k: v.get("label") for k, v in json.loads(at.dataframe[0].proto.columns).items() if k != "_index"}
    assert set(labels) == set(table.columns) and all(labels.values())
    assert labels["mflops"] == "Forward MFLOPs" and labels["trainable_params"] == "Trainable"
    assert len(at.get("download_button")) == 2


def test_graph_height_follows_its_shape() -> None:
    from app.ui.tabs.graph import graph_height_px

    assert graph_height_px(500, 1500) == 1400  # tall backward graph: as tall as allowed
    assert graph_height_px(1000, 800) == 800
    assert graph_height_px(2000, 100) == 500 and graph_height_px(0, 100) == 700


def test_graph_icicle_by_flops_and_depth(graph_run) -> None:  # noqa: ANN001
    import torch

    from profiler_agent.graph import write_module_tree

    block = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    model = torch.nn.Sequential(block, torch.nn.Linear(8, 4))
    write_module_tree(graph_run, model, {id(block[0]): (2, 8), id(model[1]): (2, 4)})
    at = open_tab(graph_run, "graph")
    assert_ok(at)
    assert {r["depth"] for r in vega_rows(at.get("vega_lite_chart")[1])} == {0, 1, 2}
    at.toggle(key="t_graph_by_flops").set_value(True).run()
    assert_ok(at)
    icicle = at.get("vega_lite_chart")[1]
    assert json.loads(icicle.proto.spec)["encoding"]["tooltip"][-1]["title"] == \
        "share of the model's FLOPs"
    rows = {r["path"]: r for r in vega_rows(icicle)}
    flops = {"0": 2 * 2 * 8 * 8, "1": 2 * 2 * 8 * 4}  # 2 × outputs (2×8, 2×4) × inputs (8): block, head
    assert rows["0"]["x1"] - rows["0"]["x0"] == pytest.approx(flops["0"] / sum(flops.values()))
    assert "FLOPs" in texts(at.caption)
    at.slider(key="t_graph_depth").set_value(1).run()
    assert_ok(at)
    assert {r["depth"] for r in vega_rows(at.get("vega_lite_chart")[1])} == {0, 1}


def test_graph_hostile_svg_is_drawn_only_as_an_image(graph_run) -> None:  # noqa: ANN001
    import base64

    hostile = ('<svg xmlns="http://www.w3.org/2000/svg" width="200pt" height="600pt" onload="window.__pwned=6">'
               '<script>window.__pwned=7</script><text x="5" y="20">MulBackward0</text></svg>')
    (graph_run / layout.GRAPH_SVG).write_text(hostile)
    at = open_tab(graph_run, "graph")
    assert_ok(at)
    graph = json.loads(at.get("vega_lite_chart")[0].proto.spec)
    assert base64.b64decode(graph["mark"]["url"].split(",", 1)[1]).decode() == hostile
    assert graph["mark"]["type"] == "image" and graph["height"] == 1400  # tall: as tall as allowed
    # its markup is nowhere in the page: not in a chart's spec or rows, nor in any text or HTML element
    page = [chart_text(c) for c in at.get("vega_lite_chart")] + [str(e.proto) for e in at.get("markdown")]
    page += [str(e.proto) for e in at.get("html")]
    assert not [p for p in page if "__pwned" in p or "<script" in p or "onload" in p]


def test_graph_too_big_offers_download_only(graph_run) -> None:  # noqa: ANN001
    nodes = "\n".join(f"\t{i} [label=Op{i}]\n\t{i} -> {i + 1}" for i in range(600))
    (graph_run / layout.GRAPH_DOT).write_text(f"digraph {{\n{nodes}\n}}\n")
    (graph_run / layout.GRAPH_SVG).unlink()
    at = open_tab(graph_run, "graph")
    assert_ok(at)
    assert "600 nodes" in texts(at.info) and "more than" in texts(at.info)
    assert not [c for c in charts(at) if "svg+xml" in c.proto.spec] and not at.get("graphviz_chart")
    assert len(at.get("download_button")) == 1
    at.toggle(key="t_graph_force").set_value(True).run()
    assert_ok(at)
    assert at.get("graphviz_chart")


def test_graph_dot_only_uses_graphviz_chart(graph_run) -> None:  # noqa: ANN001
    (graph_run / layout.GRAPH_SVG).unlink()
    at = open_tab(graph_run, "graph")
    assert_ok(at)
    assert at.get("graphviz_chart")
    assert "No SVG picture" not in texts(at.caption)  # the manifest gives no reason: nothing claimed


def test_graph_says_why_the_svg_is_missing(graph_run) -> None:  # noqa: ANN001
    (graph_run / layout.GRAPH_SVG).unlink(missing_ok=True)
    reason = "graphviz's `dot` was not found on PATH: the graph is kept as DOT only"
    update_manifest(graph_run, lambda m: m.replace(extra={**m.extra, layout.GRAPH_SVG_SKIPPED: reason}))
    at = open_tab(graph_run, "graph")
    assert_ok(at)
    assert f"No SVG picture: {reason}" in texts(at.caption)


def test_graph_without_artifacts_explains(make_run) -> None:  # noqa: ANN001
    at = open_tab(make_run("nograph"), "graph")
    assert_ok(at)
    info = texts(at.info)
    assert "No computation graph" in info and "No module tree" in info
    assert not charts(at)


def test_metrics_many_ranks_default_to_a_band(make_run) -> None:  # noqa: ANN001
    run_dir = make_run("wide", ranks=12, steps=10)
    at = open_tab(run_dir, "metrics")
    assert_ok(at)
    assert at.radio(key="t_metrics_rank_mode").value == "band"
    band = json.loads(charts(at)[0].proto.spec)
    assert band["title"]["text"].endswith("· all ranks") and "min–max over ranks" in json.dumps(band, ensure_ascii=False)
    assert {r["max_rank"] for r in vega_rows(charts(at)[0])} <= set(range(12))
    at.radio(key="t_metrics_rank_mode").set_value("pick").run()
    assert_ok(at)
    assert at.multiselect(key="t_metrics_ranks").value == [0]


def test_memory_snapshot_reports_oom(make_run) -> None:  # noqa: ANN001
    from app.data.snapshot import load_snapshot

    snap = load_snapshot(SNAPSHOT)
    snap["device_traces"][0].append({"action": "oom", "size": 40 * 2**20, "device_free": 3 * 2**20, "stream": 0,
                                     "frames": [{"filename": "/home/me/train.py", "line": 99, "name": "step"}]})
    run_dir = make_run("oom")
    (run_dir / layout.MEMORY_DIR).mkdir()
    (run_dir / layout.MEMORY_DIR / layout.snapshot_file_name("host_1_rank0", 3)).write_bytes(pickle.dumps(snap))
    at = open_tab(run_dir, "memory")
    assert_ok(at)
    assert "Out of memory at allocator event 11: 40.0 MiB requested while CUDA reported 3.0 MiB free, " \
           "from train.py:99:step" in texts(at.warning)


def test_memory_categories_upload(make_run, shared_data) -> None:  # noqa: ANN001
    at = open_tab(make_run("cats"), "memory")
    uploader = at.get("file_uploader")[0]
    raw = (shared_data / "memory" / "memory_timeline.raw.gz").read_bytes()
    uploader.set_value(("memory_timeline.raw.json.gz", raw, "application/gzip"))
    at.run()
    assert_ok(at)
    assert not at.get("plotly_chart"), "the Memory tab needs no plotly.js"
    spec = json.loads(at.get("vega_lite_chart")[-1].proto.spec)  # the categories, below the timelines
    assert "activation" in {a["encoding"].get("color", {}).get("datum") for a in spec["layer"]}
    assert spec["layer"][1]["encoding"]["y2"]["field"] == "top_0"  # stacked on the layer below
    peak = at.dataframe[-1].value
    assert peak["category"].iloc[0] == "activation"
    assert "At the peak" in texts(at.caption)
    at.get("file_uploader")[0].set_value(("bad.json", b"[[1, 2, 3]]", "application/json"))
    at.run()
    assert not at.exception
    assert "bad.json" in texts(at.error) and "4 integers" in texts(at.error)


def test_operators_of_cpu_trace_offer_no_device_time(cpu_profiled_run, imported_store) -> None:  # noqa: ANN001
    at = open_tab(cpu_profiled_run, "operators")
    assert_ok(at)
    assert at.radio(key="t_ops_value").options == ["Self time", "Total time"]
    assert "device_self_ms" not in at.dataframe[0].value.columns
    at = open_tab(imported_store[1]["gpu-control"], "operators")
    assert_ok(at)
    assert "Device self time" in at.radio(key="t_ops_value").options


def test_timeline_counts_lanes_in_words(cpu_profiled_run) -> None:  # noqa: ANN001
    at = open_tab(cpu_profiled_run, "timeline")
    caption = texts(at.caption)
    assert "events in" in caption and " 1 lanes" not in caption


def test_truncated_trace_is_flagged_in_overview_and_operators(cpu_profiled_run, tmp_path) -> None:  # noqa: ANN001
    import gzip
    import shutil

    from profiler_agent.runformat import layout

    run_dir = tmp_path / cpu_profiled_run.name
    shutil.copytree(cpu_profiled_run, run_dir, ignore=shutil.ignore_patterns(".cache"))
    for trace in layout.list_trace_files(run_dir):
        opener = gzip.open if trace.name.endswith(".gz") else open
        with opener(trace, "rb") as f:
            raw = f.read()
        with opener(trace, "wb") as f:
            f.write(raw[: len(raw) * 2 // 3])  # the job died while the trace was written
    for tab in ("overview", "operators"):
        at = open_tab(run_dir, tab)
        assert not at.exception, [e.value for e in at.exception]
        assert "ends mid-event" in texts(at.warning) and "incomplete" in texts(at.warning), tab


def test_flops_read_in_si_units() -> None:
    from app.ui.tabs.graph import format_flops

    assert format_flops(1_102_094_336) == "1.10 GFLOP"
    assert format_flops(512) == "512 FLOP"
    assert format_flops(2.5e12) == "2.50 TFLOP"


def test_config_shows_every_hyperparameter_without_scrolling(make_run) -> None:  # noqa: ANN001
    from app.ui.tabs.config import table_height

    assert table_height(14) >= 35 * 15 and table_height(500) == table_height(40)
    run_dir = make_run("wide", config={f"hp_{i:02d}": i for i in range(14)})
    at = open_tab(run_dir, "config")
    assert_ok(at)
    assert len(at.dataframe[0].value) == 14


def test_memory_categories_from_the_recorded_timeline(make_run, shared_data) -> None:  # noqa: ANN001
    run_dir = make_run("recorded-cats")
    (run_dir / layout.MEMORY_DIR).mkdir(exist_ok=True)
    name = layout.memory_timeline_file_name("host_1_rank0", 1)
    shutil.copy(shared_data / "memory" / "memory_timeline.raw.gz", run_dir / layout.MEMORY_DIR / name)
    at = open_tab(run_dir, "memory")
    assert_ok(at)
    assert not at.get("file_uploader"), "a recorded timeline needs no upload"
    assert not at.get("plotly_chart"), "the Memory tab needs no plotly.js"
    spec = json.loads(at.get("vega_lite_chart")[-1].proto.spec)  # the categories, below the timelines
    assert "activation" in {a["encoding"].get("color", {}).get("datum") for a in spec["layer"]}
    assert spec["layer"][1]["encoding"]["y2"]["field"] == "top_0"  # stacked on the layer below
    assert at.dataframe[-1].value["category"].iloc[0] == "activation"


def test_memory_zoom_redraws_the_chosen_range_at_full_detail(cpu_profiled_run, make_run, shared_data) -> None:  # noqa: ANN001
    # The whole range shows at most MAX_POINTS events (by min/max); the slider under the chart
    # redraws a part of it with up to as many again, and back at the whole range the first spec.
    from app.ui.memory_views import CATEGORY_POINTS, MAX_POINTS

    at = open_tab(cpu_profiled_run, "memory")
    assert_ok(at)
    whole = vega_rows(at.get("vega_lite_chart")[0])
    zoom = at.slider[0]
    lo, hi = zoom.value
    assert (lo, hi) == (zoom.min, zoom.max) and hi > lo and len(whole) <= MAX_POINTS
    a, b = round(lo + (hi - lo) * 0.30, 2), round(lo + (hi - lo) * 0.32, 2)
    zoom.set_value((a, b)).run()
    assert_ok(at)
    part = vega_rows(at.get("vega_lite_chart")[0])
    inside = [r for r in part if a <= r["x"] <= b]
    assert part[0]["x"] <= a and all(r["x"] <= b for r in part)
    assert len(inside) >= len([r for r in whole if a <= r["x"] <= b])
    at.slider[0].set_value((lo, hi)).run()
    assert vega_rows(at.get("vega_lite_chart")[0]) == whole

    run_dir = make_run("zoomed-cats")
    (run_dir / layout.MEMORY_DIR).mkdir(exist_ok=True)
    name = layout.memory_timeline_file_name("host_1_rank0", 1)
    shutil.copy(shared_data / "memory" / "memory_timeline.raw.gz", run_dir / layout.MEMORY_DIR / name)
    at = open_tab(run_dir, "memory")
    cats = at.slider[-1]
    lo, hi = cats.value
    whole = vega_rows(at.get("vega_lite_chart")[-1])
    assert len(whole) <= CATEGORY_POINTS
    a, b = round(lo + (hi - lo) * 0.40, 2), round(lo + (hi - lo) * 0.45, 2)
    cats.set_value((a, b)).run()
    assert_ok(at)
    part = vega_rows(at.get("vega_lite_chart")[-1])
    assert len([r for r in part if a <= r["time_ms"] <= b]) > 3 * len([r for r in whole if a <= r["time_ms"] <= b])
    assert at.dataframe[-1].value["category"].iloc[0] == "activation"  # the peak table is the whole run's
