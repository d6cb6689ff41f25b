"""Queries across runs (DuckDB over the catalog index) equal pandas; selectors; diff against history; the Runs page's pages."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from app.cli import main
from app.errors import UsageError
from app.workspace.catalog import load_catalog
from app.workspace.catalog_query import (
    load_runs_table,
    parse_selector,
    query_runs,
    select_run_paths,
    sweep_table,
)
from profiler_agent import runformat as rf
from tests.conftest import write_run


@pytest.fixture(scope="module")
def sweep_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sweep") / "runs"
    i = 0
    for bs in (16, 32):
        for nw in (0, 2, 4):
            for seed in range(2):
                write_run(root, f"s{i}", steps=12, logs=False, tags=("main",) if i % 3 else ("dev",),
                          config={"batch_size": bs, "num_workers": nw, "seed": seed},
                          step_time_s=0.01 * (1 + bs / 32) / (1 + nw / 4) * (1 + 0.1 * seed),
                          started_at=1_700_000_000.0 + 60 * i)
                i += 1
    write_run(root, "no-config", steps=12, logs=False, config={"lr": 0.1}, started_at=1_600_000_000.0)
    return root


def test_grouped_query_equals_pandas_over_the_same_runs(sweep_store: Path) -> None:
    table = load_runs_table(sweep_store)
    got = query_runs(table, by=["batch_size", "num_workers"])
    # pandas over the catalog rows (load_catalog, the Runs page's table) and each run's manifest config
    rows = load_catalog(sweep_store).table
    cfg = pd.DataFrame([rf.read_manifest(p).config for p in rows["path"]], index=rows.index)
    frame = pd.concat([rows, cfg[["batch_size", "num_workers"]]], axis=1)
    # runs without the keys form their own group (NULL keys, last), as pandas' dropna=False
    want = frame.groupby(["batch_size", "num_workers"], dropna=False).agg(
        runs=("id", "size"), step_time_s=("step_time_s", "median"), samples_per_s=("samples_per_s", "median"),
        final_loss=("final_loss", "median")).reset_index()
    assert len(got) == len(want) == 7
    assert list(got["runs"]) == list(want["runs"]) == [2] * 6 + [1]
    for col in ("batch_size", "num_workers", "step_time_s", "samples_per_s", "final_loss"):
        assert [float(x) for x in got[col]] == pytest.approx([float(x) for x in want[col]], rel=1e-12,
                                                             nan_ok=True), col
    assert got["peak_memory_bytes"].notna().all()
    # the same numbers through the CLI, as JSON
    mean = query_runs(table, by=["batch_size"], stat="mean", metrics=["step_time_s"])
    assert list(mean["step_time_s"]) == pytest.approx(
        list(frame.groupby("batch_size", dropna=False)["step_time_s"].mean()), rel=1e-12)


def test_query_cli_json_and_sql(sweep_store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["query", "--root", str(sweep_store), "--by", "batch_size", "--where", "tag=main", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["columns"][:2] == ["batch_size", "runs"] and sum(r["runs"] for r in doc["rows"]) == 8
    sql = "SELECT name FROM runs WHERE \"config.num_workers\" = 4 ORDER BY step_time_s LIMIT 1"
    assert main(["query", "--root", str(sweep_store), "--sql", sql, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == [{"name": "s4"}]
    assert main(["query", "--root", str(sweep_store), "--by", "nope"]) == 2
    assert "no run has this config key" in capsys.readouterr().err
    assert main(["query", "--root", str(sweep_store), "--sql", "SELEC nothing"]) == 2
    assert "query failed" in capsys.readouterr().err


def test_selectors(sweep_store: Path) -> None:
    last3 = select_run_paths(parse_selector("tag=main,last=3"), sweep_store)
    names = [rf.read_manifest(p).name for p in last3]
    assert names == ["s11", "s10", "s8"]  # newest start first, only tagged main
    picked = select_run_paths(parse_selector("config.batch_size=32,config.num_workers=0|2,status=finished"),
                              sweep_store, exclude=[last3[0]])
    assert sorted(rf.read_manifest(p).name for p in picked) == ["s6", "s7", "s8", "s9"]
    assert [rf.read_manifest(p).name for p in select_run_paths(parse_selector("name=s1*"), sweep_store)] == \
        ["s11", "s10", "s1"]
    for bad in ("tag", "last=0", "colour=red", "last=x"):
        with pytest.raises(UsageError, match="--baseline-query"):
            parse_selector(bad)


def test_sweep_table_from_the_index(sweep_store: Path) -> None:
    table, varying = sweep_table(load_runs_table(sweep_store))
    assert {"config.batch_size", "config.num_workers", "config.seed"} <= set(varying)
    assert table["median_step_time_s"].notna().sum() == 13 and math.isnan(table["best_loss"].iloc[0])


def test_diff_gates_a_candidate_against_recent_history(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    for i in range(4):
        write_run(root, f"main{i}", steps=30, logs=False, tags=("main",), step_time_s=0.05)
    write_run(root, "old-slow", steps=30, logs=False, tags=("main",), step_time_s=0.2, started_at=1_600_000_000.0)
    slow = write_run(root, "cand", steps=30, logs=False, tags=("main",), step_time_s=0.08)
    argv = ["diff", "--baseline-query", "tag=main,status=finished,last=4", str(slow), "--root", str(root),
            "--no-advice", "--json", "--fail-if-slower", "5"]
    assert main(argv) == 1  # 60 % slower than the last 4 main runs (itself and the old slow run left out)
    doc = json.loads(capsys.readouterr().out)
    assert doc["gates"]["failures"] and "history(tag=main" in json.dumps(doc)
    assert main(["diff", "--baseline-query", "tag=nothing", str(slow), "--root", str(root)]) == 2
    assert "no run of the store matches" in capsys.readouterr().err
    assert main(["diff", "--baseline-query", "tag=main", "a", "b", "--root", str(root)]) == 2
    assert "exactly one CANDIDATE" in capsys.readouterr().err


@pytest.mark.slow
def test_runs_page_pages_and_filters(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tests.app.helpers import assert_clean, open_app, texts

    root = tmp_path / "runs"
    for i in range(30):
        write_run(root, f"p{i:02d}", steps=3, system=False, logs=False, tags=("odd",) if i % 2 else ("even",),
                  started_at=1_700_000_000.0 + i)
    at = open_app(monkeypatch, root)
    assert_clean(at)
    at.selectbox(key="runs_page_size").select(25).run()
    assert len(at.dataframe[0].value) == 25 and at.dataframe[0].value["name"].iloc[0] == "p29"
    at.number_input(key="runs_page").set_value(2).run()
    assert list(at.dataframe[0].value["name"]) == [f"p{i:02d}" for i in range(4, -1, -1)]
    assert "rows 26–30" in texts(at.caption)
    at.multiselect(key="runs_tag_filter").select("odd").run()  # 15 runs: one page, back to the first
    assert_clean(at)
    assert len(at.dataframe[0].value) == 15 and set(at.dataframe[0].value["tags"]) == {"odd"}


@pytest.mark.slow
def test_compare_sweep_of_every_run_uses_the_index_query(monkeypatch: pytest.MonkeyPatch, sweep_store: Path) -> None:
    from streamlit.testing.v1 import AppTest

    from tests.app.helpers import APP, assert_clean, show_tab

    monkeypatch.setenv("TORCHSCOPE_RUNS", str(sweep_store))
    names = sorted(p.name for p in sweep_store.iterdir() if "-s0-" in p.name or "-s1-" in p.name)
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["runs"] = ",".join(names)
    at.switch_page("app_pages/compare.py")
    at.run()
    show_tab(at, "Sweep", key="compare_tab")  # only the open tab is built
    at.radio(key="compare_sweep_scope").set_value("every run in the store").run()
    at.multiselect(key="compare_sweep_by").select("batch_size").run()
    assert_clean(at)
    grouped = next(d.value for d in at.dataframe if {"batch_size", "runs"} <= set(d.value.columns))
    want = query_runs(load_runs_table(sweep_store), by=["batch_size"])
    assert list(grouped["runs"]) == list(want["runs"]) == [6, 6, 1]
    assert list(grouped["step_time_s"]) == pytest.approx(list(want["step_time_s"]), nan_ok=True)
