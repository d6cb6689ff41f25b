"""The Operators tab's "Group by" control with AppTest: by module (module view, chart, ops per
module) on a CPU trace recorded with module scopes, and the hint when a trace has none."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from profiler_agent.runformat import layout
from tests.app.helpers import texts
from tests.app.test_tabs_deep import assert_ok, charts, open_tab
from tests.module_scopes import record_module_trace

pytest.importorskip("torch")


def _run_with_trace(root: Path, name: str, *, agent_ranges: bool) -> Path:
    from tests.conftest import write_run

    run_dir = write_run(root, name, steps=6)
    (run_dir / layout.TRACES_DIR).mkdir(exist_ok=True)
    trace = run_dir / layout.TRACES_DIR / layout.trace_file_name("host_1_rank0", time.time_ns(), gzip=False)
    record_module_trace(trace, agent_ranges=agent_ranges)
    return run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ops_store")
    return {"modules": _run_with_trace(root, "with-modules", agent_ranges=True),
            "plain": _run_with_trace(root, "plain", agent_ranges=False)}


def test_group_by_module_shows_the_module_view(runs: dict[str, Path]) -> None:
    at = open_tab(runs["modules"], "operators")
    assert_ok(at)
    by_name = at.dataframe[0].value
    assert not by_name["name"].str.startswith("nn.Module: ").any()  # ranges are parents, not operators
    assert at.radio(key="t_ops_group").options == ["None", "Input shape", "Module"]
    at.radio(key="t_ops_group").set_value("module").run()
    assert_ok(at)
    modules = at.dataframe[1].value
    assert set(modules["module"]) == {"(model)", "0", "0.0", "0.1", "1", "CrossEntropyLoss"}
    row = modules.set_index("module").loc["0.0"]
    assert row["parent"] == "0" and row["calls"] == 2 and row["backward_ms"] > 0
    assert list(modules["self_ms"]) == sorted(modules["self_ms"], reverse=True)
    assert len(charts(at)) == 2  # top operators, top modules
    assert "forward" in charts(at)[1].proto.spec and "backward" in charts(at)[1].proto.spec
    ops = at.dataframe[2].value
    assert {("0.0", "aten::addmm"), ("1", "AddmmBackward0"), ("0.1", "ReluBackward0")} <= set(
        zip(ops["module"], ops["name"]))
    assert "outside every module" in texts(at.caption)
    at.radio(key="t_ops_module_value").set_value("total_us").run()
    assert_ok(at)
    totals = at.dataframe[1].value["total_ms"]
    assert list(totals) == sorted(totals, reverse=True)
    at.text_input(key="t_ops_search").input("0.1").run()  # the search also matches module names
    assert_ok(at)
    assert "No operator matches" in texts(at.info)  # no operator is named like that...
    assert set(at.dataframe[-1].value["module"]) == {"0.1"}  # ...but module 0.1's operators are listed


def test_group_by_module_without_module_scopes_says_how_to_get_them(runs: dict[str, Path]) -> None:
    at = open_tab(runs["plain"], "operators")
    at.radio(key="t_ops_group").set_value("module").run()
    assert_ok(at)
    info = texts(at.info)
    assert "no module scopes" in info and "torchscope run" in info and "with_stack=True" in info
    at.radio(key="t_ops_group").set_value("shape").run()
    assert_ok(at)
    assert "input_shapes" in at.dataframe[1].value.columns


def test_annotations_are_a_separate_table_on_request(runs: dict[str, Path]) -> None:
    at = open_tab(runs["modules"], "operators")
    assert_ok(at)
    ops = at.dataframe[0].value
    assert not ops["name"].str.startswith(("Optimizer.", "nn.Module: ")).any()  # ranges are not operators
    n = len(at.dataframe)
    at.toggle(key="t_ops_annotations").set_value(True).run()
    assert_ok(at)
    assert len(at.dataframe) == n + 1
    ranges = at.dataframe[1].value
    assert "Optimizer.step#SGD.step" in set(ranges["name"])
    assert not set(ranges["name"]) & set(ops["name"])
    assert (ranges["pct_of_step"] > 0).all()
