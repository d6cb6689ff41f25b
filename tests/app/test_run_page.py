"""The Run page with AppTest: picker and URL, rank selector, and the Overview, Operators, Kernels,
System, Logs and Config tabs on hand-made runs, real GPU/multi-rank traces and agent runs."""

from __future__ import annotations

import importlib.util
import json

import pytest

from app.ui.tabs.overview import STEP_TIME_LABEL
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout
from tests.app.helpers import assert_clean, open_app, show_tab, texts, vega_rows, vega_specs

HAS_TRACE_ENGINE = importlib.util.find_spec("app.analysis.trace.summary") is not None
needs_trace_engine = pytest.mark.skipif(not HAS_TRACE_ENGINE, reason="trace engine not installed")


def _tab(at, title):  # noqa: ANN001, ANN202
    return show_tab(at, title)  # only the open tab is built


def test_picker_follows_url_and_writes_it(monkeypatch, fixture_store):
    root, runs = fixture_store
    at = open_app(monkeypatch, root, run=runs["optimized"].name)
    assert_clean(at)
    assert at.title[0].value == "optimized"
    at.selectbox(key="run_picker").set_value(runs["baseline"].name).run()
    assert at.title[0].value == "baseline"
    assert runs["baseline"].name in str(at.query_params["run"])


def test_run_by_name_in_url(monkeypatch, fixture_store):
    root, runs = fixture_store
    at = open_app(monkeypatch, root, run="ddp")
    assert_clean(at)
    assert at.selectbox(key="run_picker").value == runs["ddp"].name


def test_unknown_run_in_url_warns_and_shows_newest(monkeypatch, fixture_store):
    at = open_app(monkeypatch, fixture_store[0], run="no-such-run")
    assert not at.exception
    assert "no-such-run" in texts(at.warning)
    assert at.title  # the newest run is shown instead


def test_tabs_in_contract_order(monkeypatch, fixture_store):
    from app.ui.run_view import RUN_TABS

    at = open_app(monkeypatch, fixture_store[0], run="baseline")
    labels = [t.label for t in at.tabs]
    expected = [m.TITLE for m in RUN_TABS]
    assert labels[: len(expected)] == expected
    for mine in ("Overview", "Operators", "Kernels", "System", "Logs", "Config"):
        assert mine in labels


def test_overview_headline_numbers(monkeypatch, fixture_store):
    at = open_app(monkeypatch, fixture_store[0], run="baseline")
    assert not at.exception
    tab = _tab(at, "Overview")
    metrics = {m.label: m.value for m in tab.metric}
    assert metrics[STEP_TIME_LABEL].endswith("ms") and metrics[STEP_TIME_LABEL].startswith("5")
    assert metrics["Peak memory (host RSS)"] == "290.0 MiB"  # the label names the quantity
    assert metrics["Final loss (median of last 2)"] == f"{(2 / 19 + 2 / 20) / 2:.4g}"  # app.analysis.run.final_value
    assert metrics["Samples/s"] != "–"
    assert "No profiler trace" in texts(tab.info)  # hand-made run: no traces, says how to get one


def test_rank_selector_for_two_ranks(monkeypatch, fixture_store):
    at = open_app(monkeypatch, fixture_store[0], run="ddp")
    assert at.selectbox(key="run_rank").options == ["all", "0", "1"]
    at.selectbox(key="run_rank").set_value(1).run()
    assert_clean(at)
    assert "rank 1" in texts(_tab(at, "Overview").caption)
    # another run with other ranks: the stale choice is dropped, not an error
    _root, runs = fixture_store
    at.selectbox(key="run_picker").set_value(runs["baseline"].name).run()
    assert_clean(at)
    at.selectbox(key="run_picker").set_value(runs["ddp"].name).run()
    assert_clean(at)
    assert at.selectbox(key="run_rank").value == "all"


def test_system_tab_charts_samples(monkeypatch, fixture_store):
    at = open_app(monkeypatch, fixture_store[0], run="baseline")
    tab = _tab(at, "System")
    assert not tab.info
    assert "10 samples" in texts(tab.caption)
    # Vega-Lite charts (no plotly.js in the browser), each line named by what it measures
    assert not tab.get("plotly_chart")
    specs = {s["title"]["text"]: s for s in vega_specs(tab)}
    assert list(specs) == ["CPU of the training process (100% = one core busy)",
                           "Memory of the training process (resident set)",
                           "Whole machine: CPU (100% = every core busy)", "Whole machine: memory"]
    memory = specs["Memory of the training process (resident set)"]
    assert memory["layer"][0]["encoding"]["y"]["title"] == "MiB"
    rows = vega_rows(tab.get("vega_lite_chart")[1])  # Streamlit sends the rows apart, as Arrow
    resident = [r["value"] for r in rows if r["series"] == "training process"]
    assert resident == [200.0 + 10 * i for i in range(10)]  # rss_bytes in MiB
    assert {r["series"] for r in rows} == {"training process", "its child processes"}


def test_system_tab_without_samples_explains(monkeypatch, make_run):
    run_dir = make_run("nosys", system=False)
    at = open_app(monkeypatch, run_dir.parent, run="nosys")
    assert_clean(at)
    assert "No system samples" in texts(_tab(at, "System").info)


def test_logs_tab_of_failed_run(monkeypatch, fixture_store):
    at = open_app(monkeypatch, fixture_store[0], run="failed")
    assert not at.exception
    tab = _tab(at, "Logs")
    assert "failed with exit code 1" in texts(tab.error)
    code = texts(tab.code)
    assert "CUDA out of memory" in code and "<b>not html</b>" in code
    assert "RuntimeError: boom" in tab.dataframe[0].value.to_string()


def test_logs_and_config_of_crashed_run(monkeypatch, fixture_store):
    at = open_app(monkeypatch, fixture_store[0], run="crashed")
    assert "crashed" in texts(at.warning)
    assert "The job crashed" in texts(_tab(at, "Logs").error)
    config = _tab(at, "Config")
    table = config.dataframe[0].value
    assert dict(zip(table["Key"], table["Value"]))["lr"] == "0.01"
    assert "python train.py --lr 0.01" in texts(config.code)


def test_config_device_table_is_readable():
    from app.ui.tabs.config import device_table

    table = device_table([{"type": "cpu", "name": "x86_64", "count": 8, "threads": 4},
                          {"type": "cuda", "index": 0, "name": "A100", "total_memory_bytes": 40 * 2**30,
                           "capability": "8.0", "multi_processor_count": 108, "uuid": "GPU-1"}])
    assert list(table.columns)[:4] == ["Type", "Index", "Name", "Cores"]
    assert table["Memory (GiB)"].tolist()[1] == 40.0 and "total_memory_bytes" not in table.columns
    assert "uuid" in table.columns  # a field the table does not know keeps its name


def test_live_run_has_auto_refresh(monkeypatch, fixture_store):
    at = open_app(monkeypatch, fixture_store[0], run="live")
    assert_clean(at)
    assert at.toggle(key="run_autorefresh").value is True
    at.toggle(key="run_autorefresh").set_value(False).run()
    assert_clean(at)
    assert at.title[0].value == "live"


def test_garbage_metrics_still_render(monkeypatch, make_run):
    run_dir = make_run("messy")
    with open(run_dir / layout.METRICS, "ab") as f:
        f.write(b'not json\n{"step": 50, "loss": "nan?", "step_time_s": null}\n{"step": 51')
    at = open_app(monkeypatch, run_dir.parent, run="messy")
    assert not at.exception
    assert "metrics.jsonl line" in texts(at.warning)


def test_newer_schema_run_in_url_is_a_clear_message(monkeypatch, make_run):
    import json

    run_dir = make_run("future")
    make_run("present")
    data = json.loads((run_dir / layout.MANIFEST).read_text())
    data["schema_version"] = 42
    (run_dir / layout.MANIFEST).write_text(json.dumps(data))
    at = open_app(monkeypatch, run_dir.parent, run=str(run_dir))
    assert not at.exception
    assert "schema_version 42" in texts(at.warning) + texts(at.error)


@needs_trace_engine
def test_gpu_trace_tabs(monkeypatch, imported_store):
    root, _ = imported_store
    at = open_app(monkeypatch, root, run="gpu-control", timeout=240)
    assert_clean(at)
    overview = _tab(at, "Overview")
    assert not [i for i in overview.info if "No profiler trace" in i.value]
    ops = _tab(at, "Operators")
    table = ops.dataframe[0].value
    assert len(table) > 10 and (table["self_ms"].diff().dropna() <= 1e-9).all()
    kernels = _tab(at, "Kernels")
    assert len(kernels.dataframe[0].value) > 0
    assert not kernels.info
    assert not kernels.get("plotly_chart")  # Vega-Lite since wave 11: the tab needs no plotly.js
    busy, share = (json.loads(c.proto.spec) for c in kernels.get("vega_lite_chart"))
    assert busy["encoding"]["y"]["title"] == "% of step"
    assert share["layer"][0]["mark"]["type"] == "arc"
    config = _tab(at, "Config")
    assert "a profiler trace records no hyperparameters" in texts(config.info)
    env = dict(zip(config.dataframe[0].value["Key"], config.dataframe[0].value["Value"]))
    assert "host" not in env and "cwd" not in env and env["world_size"] == "8"  # not the importer's machine
    overview = _tab(at, "Overview")  # the other tabs were built one at a time; Overview again
    headline = {m.label: m.value for m in overview.metric}
    # no metrics in an imported trace: step time comes from its 6 profiled steps (~76 ms each)
    assert headline[STEP_TIME_LABEL].endswith(" ms") and 70 < float(headline[STEP_TIME_LABEL][:-3]) < 90
    assert "From the profiled steps" in texts(overview.caption)
    assert len(overview.get("vega_lite_chart")) >= 2  # time per step and the breakdown of the profiled steps
    at.radio(key="run_overview_breakdown_view").set_value("Training-loop phases").run()
    assert_clean(at)
    _tab(at, "Operators")
    at.text_input(key="run_ops_search").input("aten::").run()
    assert all("aten::" in n for n in _tab(at, "Operators").dataframe[0].value["name"])
    at.radio(key="run_ops_group").set_value("shape").run()
    assert_clean(at)
    by_shape = _tab(at, "Operators").dataframe[1].value
    assert "input_shapes" in by_shape.columns and len(by_shape) >= len(
        _tab(at, "Operators").dataframe[0].value
    )


@needs_trace_engine
def test_two_rank_trace_rank_selector(monkeypatch, imported_store):
    root, _ = imported_store
    at = open_app(monkeypatch, root, run="two-ranks", timeout=240)
    assert_clean(at)
    both = _tab(at, "Operators").dataframe[0].value
    at.selectbox(key="run_rank").set_value(1).run()
    assert_clean(at)
    one = _tab(at, "Operators").dataframe[0].value
    assert 0 < one["calls"].sum() < both["calls"].sum()  # rank 1 alone has fewer calls than both ranks


def test_agent_runs_render_every_tab(monkeypatch, sample_store):
    from profiler_agent import runformat as rf

    listing = rf.list_runs(sample_store)
    assert listing.runs, "sample_models.record recorded no runs"
    for run_dir, manifest in listing.runs:
        at = open_app(monkeypatch, sample_store, run=run_dir.name, timeout=240)
        assert_clean(at)
        overview = _tab(at, "Overview")
        assert {m.label: m.value for m in overview.metric}[STEP_TIME_LABEL] != "–", manifest.name


def test_system_columns_grouped_by_unit():
    import pandas as pd

    from app.ui.tabs.system import group_system_columns

    system = pd.DataFrame(
        {
            "time": [0.0, 1.0],
            "rank": [0, 0],
            "pid": [1, 1],
            "cpu_percent": [50.0, 60.0],
            "children_cpu_percent": [10.0, 5.0],
            "rss_bytes": [1, 2],
            "gpu_util_percent": [80.0, 90.0],
            "gpu_allocated_bytes": [5, 6],
            "gpu_total_bytes": [9, 9],
            "system_cpu_percent": [20.0, 30.0],
            "system_memory_used_bytes": [7, 8],
            "note": ["a", "b"],
        }
    )
    groups = {title: cols for title, _, cols in group_system_columns(system)}
    assert groups["CPU of the training process (100% = one core busy)"] == ["cpu_percent", "children_cpu_percent"]
    assert groups["Memory of the training process (resident set)"] == ["rss_bytes"]
    assert groups["GPU utilisation"] == ["gpu_util_percent"]
    assert groups["GPU memory"] == ["gpu_allocated_bytes"]  # the device's total is not a curve
    assert groups["Whole machine: CPU (100% = every core busy)"] == ["system_cpu_percent"]
    assert all("note" not in names for names in groups.values())


def test_system_lines_have_readable_labels():
    from app.ui.tabs.system import system_label

    assert system_label("children_cpu_percent").startswith("its child processes")
    assert system_label("system_memory_used_bytes") == "used"
    assert system_label("nvme_read_bytes") == "nvme read"  # a column the agent adds later


def test_overview_spread_needs_two_steps(monkeypatch, make_run):
    make_run("short", steps=1)  # one step (never dropped as warm-up): no spread to speak of
    at = open_app(monkeypatch, make_run("other").parent, run="short")
    assert_clean(at)
    headline = {m.label: m.value for m in _tab(at, "Overview").metric}
    assert headline[STEP_TIME_LABEL] != "–"
    assert headline["Spread (p90 / p10)"] == "–"


def test_world_size_caption_says_which_ranks_the_run_holds():
    from app.ui.tabs.overview import world_size_caption

    assert world_size_caption(1, (0,), None) == ""
    assert "pool every rank" in world_size_caption(2, (0, 1), None)
    partial = world_size_caption(128, (0, 1), None)
    assert "2 of them" in partial and "ranks 0, 1" in partial and "every rank" not in partial
    assert "rank 3" in world_size_caption(8, (3,), None)
    assert "rank 1's" in world_size_caption(128, (0, 1), 1)


@needs_trace_engine
def test_imported_trace_without_devices_is_not_called_cpu(monkeypatch, imported_store):
    root, _ = imported_store
    at = open_app(monkeypatch, root, run="two-ranks", timeout=240)  # no deviceProperties, GPU kernels
    assert_clean(at)
    overview = _tab(at, "Overview")
    assert {m.label: m.value for m in overview.metric}["Device"] == "–"
    assert "2 of them" in texts(overview.caption)  # world size 128, two ranks' traces


def test_unreadable_run_by_id_or_folder_in_url_says_what_is_wrong(monkeypatch, make_run):
    import json

    run_dir = make_run("future")
    make_run("present")
    data = json.loads((run_dir / layout.MANIFEST).read_text())
    data["schema_version"] = 42
    (run_dir / layout.MANIFEST).write_text(json.dumps(data))
    at = open_app(monkeypatch, run_dir.parent, run=run_dir.name)  # the id, as a link would give it
    assert not at.exception
    assert "schema_version 42" in texts(at.warning)
    junk = run_dir.parent / "junk"
    junk.mkdir()
    at = open_app(monkeypatch, run_dir.parent, run=str(junk))
    assert not at.exception
    assert "no run.json" in texts(at.warning) and "no run with that id" not in texts(at.warning)


def test_run_name_and_tags_are_not_markdown(monkeypatch, make_run):
    from app.ui.layout import md_escape

    name = "[click](https://evil.example) **big** :red[x]"
    make_run(name, tags=("`odd`", "_it_"))
    at = open_app(monkeypatch, make_run("other").parent, run=name)
    assert_clean(at)
    assert at.title[0].value == md_escape(name)
    header = texts(at.markdown)
    assert "\\`odd\\`" in header and "\\_it\\_" in header


def test_device_name_is_shown_in_full_under_a_short_tile(monkeypatch, make_run):
    from app.ui.tabs.overview import device_labels

    run_dir = make_run("a100")
    name = "NVIDIA A100-PG509-200"
    rf.update_manifest(run_dir, devices=({"type": "cuda", "name": name}, {"type": "cuda", "name": name}))
    at = open_app(monkeypatch, run_dir.parent, run="a100")
    assert_clean(at)
    overview = _tab(at, "Overview")
    tile = {m.label: m.value for m in overview.metric}["Device"]
    assert tile == "2 × A100-PG509-…" and len(tile) <= 16
    assert f"2 × {name}" in texts(overview.caption)  # the full name, not truncated
    assert device_labels([{"name": "NVIDIA H100"}]) == ("NVIDIA H100", "H100")
    assert device_labels([{"type": "cpu"}]) == ("cpu", "cpu")
    assert device_labels([]) == ("", "")
