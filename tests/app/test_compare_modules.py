"""The Compare page's operators matched by module, with AppTest, on two runs whose traces were
recorded here with module scopes (and a pair without, which gets a note)."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from profiler_agent.runformat import layout
from tests.app.helpers import assert_clean, texts
from tests.app.test_compare_page import _tab, open_compare
from tests.module_scopes import record_module_trace

pytest.importorskip("torch")


def _run(root: Path, name: str, *, width: int, agent_ranges: bool = True) -> Path:
    from tests.conftest import write_run

    run_dir = write_run(root, name, steps=10)
    (run_dir / layout.TRACES_DIR).mkdir(exist_ok=True)
    trace = run_dir / layout.TRACES_DIR / layout.trace_file_name("host_1_rank0", time.time_ns(), gzip=False)
    record_module_trace(trace, agent_ranges=agent_ranges, width=width)
    return run_dir


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("compare_modules")
    _run(root, "narrow", width=32)
    _run(root, "wide", width=512)
    _run(root, "plain", width=32, agent_ranges=False)
    return root


def test_compare_ops_by_module(monkeypatch: pytest.MonkeyPatch, store: Path) -> None:
    at = open_compare(monkeypatch, store, "narrow,wide")
    assert_clean(at)
    assert "module" in at.radio(key="compare_by").options
    at.radio(key="compare_by").set_value("module").run()
    assert_clean(at)
    ops = _tab(at, "Operators").dataframe[0].value
    assert "module" in ops.columns
    assert {("0.0", "aten::addmm"), ("1", "AddmmBackward0")} <= set(zip(ops["module"], ops["name"]))
    spec = _tab(at, "Operators").get("plotly_chart")[0].proto.spec
    assert " · aten::" in spec or " · Addmm" in spec  # bars are labelled module · op
    assert not _tab(at, "Operators").info


def test_compare_by_module_without_scopes_says_so(monkeypatch: pytest.MonkeyPatch, store: Path) -> None:
    at = open_compare(monkeypatch, store, "plain,narrow")
    at.radio(key="compare_by").set_value("module").run()
    assert_clean(at)
    assert "module scopes" not in texts(_tab(at, "Operators").info)  # one side has them
    at = open_compare(monkeypatch, store, "plain,plain")
    at.radio(key="compare_by").set_value("module").run()
    assert_clean(at)
    assert "Neither side's traces have module scopes" in texts(_tab(at, "Operators").info)
