"""The app entry and the Runs page with AppTest: catalog, filters, selection actions, bad stores."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pandas as pd
import pytest

from app.data import change_journal
from app.data import runs as runs_data
from app.ui import store as ui_store
from app.workspace import catalog, printed_listing
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout
from tests.app.helpers import assert_clean, open_app, texts

TINY = Path(__file__).resolve().parents[1] / "data" / "traces" / "cpu_torch213" / "tiny_mlp.pt.trace.json.gz"


def test_app_lists_every_run(monkeypatch, fixture_store):
    root, runs = fixture_store
    at = open_app(monkeypatch, root)
    assert_clean(at)
    assert at.title[0].value == "Runs"
    df = at.dataframe[0].value
    assert set(df["name"]) == set(runs)
    statuses = dict(zip(df["name"], df["status"]))
    assert statuses["crashed"] == "✗ crashed" and statuses["live"] == "● running"
    assert f"{len(runs)} of {len(runs)} runs" in texts(at.caption)
    assert at.sidebar.text_input(key="root").value == str(root)


def test_filter_narrows_the_table(monkeypatch, fixture_store):
    root, _ = fixture_store
    at = open_app(monkeypatch, root)
    at.text_input(key="runs_filter").input("adam").run()
    assert_clean(at)
    assert list(at.dataframe[0].value["name"]) == ["optimized"]
    at.text_input(key="runs_filter").input("").run()
    at.multiselect(key="runs_status_filter").select("crashed").run()
    assert list(at.dataframe[0].value["name"]) == ["crashed"]


def _select(at, names):  # noqa: ANN001, ANN202
    df = at.dataframe[0].value
    rows = [int(i) for i in df.index[df["name"].isin(names)]]
    at.session_state["runs_table"] = {"selection": {"rows": rows, "columns": [], "cells": []}}
    return at.run()


def test_open_selected_run_goes_to_run_page(monkeypatch, fixture_store):
    root, runs = fixture_store
    at = _select(open_app(monkeypatch, root), ["baseline"])
    at.button(key="runs_open").click().run()
    assert_clean(at)
    assert (
        at.query_params["run"] == [runs["baseline"].name] or at.query_params["run"] == runs["baseline"].name
    )
    assert at.title[0].value == "baseline"


def test_edit_tags_and_notes_saved_in_manifest(monkeypatch, make_run):
    run_dir = make_run("tagme", tags=("old",))
    other = make_run("other", tags=("x",))
    at = _select(open_app(monkeypatch, run_dir.parent), ["other"])
    assert at.text_input(key=f"runs_edit_tags_{other.name}").value == "x"
    at = _select(at, ["tagme"])
    assert at.text_input(key=f"runs_edit_tags_{run_dir.name}").value == "old"  # not the other run's
    at.text_input(key=f"runs_edit_tags_{run_dir.name}").input("amp, fast ,amp")
    at.text_area(key=f"runs_edit_notes_{run_dir.name}").input("tried <script>alert(1)</script> amp")
    at.button[[b.label for b in at.button].index("Save")].click().run()
    assert_clean(at)
    m = rf.read_manifest(run_dir)
    assert m.tags == ("amp", "fast")
    assert m.notes.startswith("tried <script>")
    assert "amp, fast" in list(at.dataframe[0].value["tags"])
    assert rf.read_manifest(other).tags == ("x",)


def _confirm(at):  # noqa: ANN001, ANN202
    (box,) = [c for c in at.checkbox if c.label.startswith("Yes, ")]
    return box


def test_confirmation_does_not_carry_over_to_another_selection(monkeypatch, make_run):
    a, b = make_run("a"), make_run("b")
    at = _select(open_app(monkeypatch, a.parent), ["a"])
    _confirm(at).check().run()
    assert not at.button(key="runs_remove").disabled
    at = _select(at, ["b"])
    assert at.button(key="runs_remove").disabled
    assert a.exists() and b.exists()


def test_archive_needs_confirmation(monkeypatch, make_run):
    keep, gone = make_run("keep"), make_run("gone")
    root = keep.parent
    at = _select(open_app(monkeypatch, root), ["gone"])
    assert at.button(key="runs_remove").disabled
    _confirm(at).check().run()
    at.button(key="runs_remove").click().run()
    assert_clean(at)
    assert not gone.exists() and (root / runs_data.ARCHIVE_DIR / gone.name).is_dir()
    assert list(at.dataframe[0].value["name"]) == ["keep"]


def test_delete_removes_run(monkeypatch, make_run):
    keep, gone = make_run("keep"), make_run("gone")
    at = _select(open_app(monkeypatch, keep.parent), ["gone"])
    at.radio(key="runs_remove_action").set_value("Delete").run()
    _confirm(at).check().run()
    at.button(key="runs_remove").click().run()
    assert_clean(at)
    assert not gone.exists() and not (keep.parent / runs_data.ARCHIVE_DIR).exists()


def test_missing_store_explains_how_to_record(monkeypatch, tmp_path):
    at = open_app(monkeypatch, tmp_path / "nope")
    assert_clean(at)
    info = texts(at.info)
    assert "No run store" in info and "torchscope run" in info


def test_empty_store_explains_how_to_record(monkeypatch, tmp_path):
    at = open_app(monkeypatch, tmp_path)
    assert_clean(at)
    assert "has no runs yet" in texts(at.info) and "sample_models.record" in texts(at.info)


def test_bad_folders_are_listed_as_problems(monkeypatch, make_run):
    good = make_run("good")
    root = good.parent
    (root / "not-a-run").mkdir()
    newer = make_run("newer")
    data = json.loads((newer / layout.MANIFEST).read_text())
    data["schema_version"] = 99
    (newer / layout.MANIFEST).write_text(json.dumps(data))
    (make_run("garbage") / layout.METRICS).write_bytes(b"garbage\n\x00\x01\n")
    at = open_app(monkeypatch, root)
    assert not at.exception
    assert set(at.dataframe[0].value["name"]) == {"good", "garbage"}
    warning = texts(at.warning)
    assert "not-a-run" in warning and "schema_version 99" in warning and "metrics.jsonl line 1" in warning


def test_tb_profiler_folder_is_listed_read_only(monkeypatch, shared_data, tmp_path):
    tb = tmp_path / "tb"
    (tb / "exp1").mkdir(parents=True)
    src = next((shared_data / "traces" / "cpu_only").iterdir())
    (tb / "exp1" / src.name).write_bytes(src.read_bytes())
    monkeypatch.setenv("TORCHSCOPE_CACHE", str(tmp_path / "cache"))
    at = open_app(monkeypatch, tb)
    assert_clean(at)
    assert list(at.dataframe[0].value["name"]) == ["exp1"]
    assert "read-only" in texts(at.caption)
    assert not at.warning  # the tb sub-folder is not reported as "not a run"
    at = _select(at, ["exp1"])
    assert "read-only" in texts(at.caption)
    assert not [b for b in at.button if b.key == "runs_remove"]
    at.button(key="runs_open").click().run()  # the mirrored run opens like any other
    assert_clean(at)
    assert at.title[0].value == "exp1"
    assert not [i for i in at.info if "No profiler trace" in i.value]
    assert sorted(p.name for p in (tb / "exp1").iterdir()) == [src.name]  # the original folder is untouched


def test_compare_selected_runs(monkeypatch, fixture_store):
    root, runs = fixture_store
    at = _select(open_app(monkeypatch, root), ["baseline", "optimized"])
    at.button(key="runs_compare").click().run()
    assert not at.exception
    url = str(at.query_params["runs"])
    assert url.index(runs["baseline"].name) < url.index(
        runs["optimized"].name
    )  # the older one is the baseline


def test_auto_refresh_picks_up_new_runs(monkeypatch, make_run):
    import time

    first = make_run("first")
    at = open_app(monkeypatch, first.parent)
    at.toggle(key="runs_autorefresh").set_value(True).run()
    assert_clean(at)
    assert list(at.dataframe[0].value["name"]) == ["first"]
    make_run("second")
    time.sleep(2.1)  # older than the store view's reuse window
    at.run()
    assert_clean(at)
    assert set(at.dataframe[0].value["name"]) == {"first", "second"}
    at = _select(at, ["first"])
    at.button(key="runs_open").click().run()
    assert_clean(at)
    assert at.title[0].value == "first"


def test_step_time_column_is_the_headline_median():
    # The catalog's number is the headline step time (ls --json: step_time_s), the same as the
    # Overview's: its label and help say median, steady state, and what is dropped.
    from app.ui.runs_view import _COLUMN_CONFIG
    from app.ui.tabs.overview import STEP_TIME_LABEL

    config = _COLUMN_CONFIG["step_time_ms"]
    assert config["label"].startswith(STEP_TIME_LABEL)
    for word in ("median", "warm-up", "profiler", "evaluation", "Overview", "Compare"):
        assert word in config["help"], word


def test_runs_listed_newest_start_first(monkeypatch, make_run):
    import time

    new = make_run("a-recorded-today")
    make_run("z-imported-old-trace", started_at=time.time() - 400 * 86400)  # created now, started long ago
    at = open_app(monkeypatch, new.parent)
    assert_clean(at)
    # folder order (same second: by name, newest first) would put the old trace first
    assert list(at.dataframe[0].value["name"]) == ["a-recorded-today", "z-imported-old-trace"]


def test_runs_grid_is_as_tall_as_its_runs(monkeypatch, make_run):
    import streamlit as st

    from app.ui.runs_view import table_height

    heights = []
    real = st.dataframe

    def spy(data, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if kwargs.get("key") == "runs_table":
            heights.append(kwargs.get("height"))
        return real(data, *args, **kwargs)

    monkeypatch.setattr(st, "dataframe", spy)
    for i in range(12):
        root = make_run(f"r{i}").parent
    at = open_app(monkeypatch, root)
    assert_clean(at)
    assert len(at.dataframe[0].value) == 12
    # 12 rows + header, no empty band and no scrolling; a long store scrolls past 25 rows.
    assert heights[-1] == table_height(12) == 13 * 35 + 3
    assert table_height(0) == table_height(1) < table_height(2)
    assert table_height(1000) == table_height(25) == 26 * 35 + 3


def test_imported_run_steps_in_trace_until_analysed(monkeypatch, shared_data, tmp_path):
    from app.data.tbprofiler import import_traces
    from app.data.trace import load_traces
    from app.ui.store import clear_store_caches
    from app.workspace.traces import analyze_trace_set as analyze_traces

    monkeypatch.setenv("TORCHSCOPE_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "runs"
    run_dir = import_traces(shared_data / "traces" / "gpu_before_after" / "control.json.gz", root, name="gpu")[0]
    clear_store_caches()
    at = open_app(monkeypatch, root)
    assert_clean(at)
    row = at.dataframe[0].value.iloc[0]
    assert row["steps_source"] == "in trace" and row["steps"] is pd.NA
    steps = analyze_traces(load_traces(run_dir)).steps  # what opening the run does
    clear_store_caches()
    at = open_app(monkeypatch, root)
    row = at.dataframe[0].value.iloc[0]
    assert row["steps_source"] == "trace" and row["steps"] == len(steps) == 6
    # the median of the profiled steps (slowest rank per step), as the Overview and Compare
    per_step = steps.groupby("step")["duration_us"].max()
    assert abs(row["step_time_ms"] - per_step.median() / 1e3) < 1e-9


def test_tb_folder_with_freely_named_traces_lists_every_run(monkeypatch, shared_data, tmp_path):
    """As ../shared/data/traces: files not named like tensorboard_trace_handler's output are
    recognised by content; folders without traces say why they were skipped."""
    tb = tmp_path / "tb"
    for run, src in (("two", "two_ranks"), ("cpu", "cpu_only")):
        (tb / run).mkdir(parents=True)
        for f in (shared_data / "traces" / src).iterdir():
            (tb / run / f.name).write_bytes(f.read_bytes())
    (tb / "notes").mkdir()
    (tb / "notes" / "config.json").write_text('{"lr": 0.1}')
    (tb / "empty").mkdir()
    monkeypatch.setenv("TORCHSCOPE_CACHE", str(tmp_path / "cache"))
    at = open_app(monkeypatch, tb)
    assert not at.exception
    assert sorted(at.dataframe[0].value["name"]) == ["cpu", "two"]
    assert "2 of 2 runs" in texts(at.caption)
    warning = texts(at.warning)
    assert (f"{tb / 'notes'}: not a run folder (no run.json) and none of its 1 *.json[.gz] file(s) is a "
            "profiler trace (config.json: a JSON object without" in warning)
    assert f"{tb / 'empty'}: not a run folder (no run.json) and no trace files" in warning
    assert f"{tb / 'two'}:" not in warning and f"{tb / 'cpu'}:" not in warning


def _settle(root: Path) -> None:
    """Wait until the store folder's last change is old enough for a listing to keep its stamp."""
    st = os.stat(root)
    left = max(st.st_mtime_ns, st.st_ctime_ns) + printed_listing.STAMP_AGE_NS - time.time_ns()
    if left > 0:
        time.sleep(left / 1e9 + 0.01)


@pytest.fixture
def settled_store(make_run, monkeypatch, tmp_path):
    """Two finished runs, indexed by a listing that kept the store folder's stamp, every journal
    line settled at once (GRACE_NS = 0): the index vouches for the store (unchanged_token)."""
    monkeypatch.setenv("TORCHSCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(change_journal, "GRACE_NS", 0)
    make_run("first")
    root = make_run("second", tags=("old",)).parent
    catalog.load_catalog(root)
    _settle(root)
    catalog.load_catalog(root)
    assert printed_listing.unchanged_token(str(root)) is not None
    ui_store.clear_store_caches()
    yield root
    ui_store.clear_store_caches()


def _view(root: Path) -> ui_store.StoreView:
    return ui_store.cached_store_view(root, max_age_s=0)  # every call past the view's age


def _reused(root: Path) -> ui_store.StoreView:
    view = _view(root)
    assert _view(root) is view  # past its age, reused: nothing changed
    return view


@pytest.mark.parametrize("change", ["added", "removed", "retagged", "replaced"])
def test_store_view_past_its_age_is_reused_until_something_changed(settled_store, make_run, tmp_path, change):
    root = settled_store
    view = _reused(root)
    second = next(p for p in root.iterdir() if "-second-" in p.name)
    if change == "added":
        make_run("third")
    elif change == "removed":
        runs_data.delete_run(second)  # the Runs page's Delete
    elif change == "retagged":  # the Runs page's own edit goes through the same writer
        rf.update_manifest(second, tags=("new",))
    elif change == "replaced":  # another folder put in its place under its name (made first: another inode)
        shutil.copytree(second, tmp_path / "keep")
        doc = json.loads((tmp_path / "keep" / layout.MANIFEST).read_text())
        (tmp_path / "keep" / layout.MANIFEST).write_text(json.dumps({**doc, "name": "swapped"}))
        shutil.rmtree(second)
        (tmp_path / "keep").rename(second)
    table = _view(root).store.table
    assert _view(root) is not view
    names = sorted(table["name"])
    tags = dict(zip(table["name"], table["tags"]))
    expected = {"added": ["first", "second", "third"], "removed": ["first"], "retagged": ["first", "second"],
                "replaced": ["first", "swapped"]}[change]
    assert names == expected
    if change == "retagged":
        assert tags["second"] == "new"
    _settle(root)
    _view(root)  # a listing that keeps the stamp again
    assert _reused(root).store.table["name"].tolist() == table["name"].tolist()


def test_store_view_of_a_running_run_is_listed_again_until_it_finished(settled_store):
    root = settled_store
    run = next(p for p in root.iterdir() if "-second-" in p.name)
    rf.update_manifest(run, status=rf.RunStatus.RUNNING, heartbeat=time.time(), pid=os.getpid(), ended_at=None)
    view = _view(root)
    assert dict(zip(view.store.table["name"], view.store.table["status"]))["second"] == "running"
    _view(root)  # the journal's lines of that change consumed
    assert _view(root) is not _view(root)  # its status follows the clock (crashed once stale): never vouched for
    rf.update_manifest(run, status=rf.RunStatus.FINISHED, ended_at=time.time())
    finished = _view(root)
    assert dict(zip(finished.store.table["name"], finished.store.table["status"]))["second"] == "finished"
    assert _reused(root) is not None


def test_store_view_with_steps_in_trace_shows_them_once_analysed(settled_store, monkeypatch):
    from app.data.tbprofiler import import_traces
    from app.data.trace import load_traces
    from app.workspace.traces import analyze_trace_set

    root = settled_store
    run_dir = import_traces(TINY, root, name="imported")[0]
    _settle(root)
    _view(root)
    row = _view(root).store.table.set_index("name").loc["imported"]
    assert row["steps_source"] == "in trace"
    analyze_trace_set(load_traces(run_dir))  # what opening the run does: no run file changes
    row = _view(root).store.table.set_index("name").loc["imported"]
    assert row["steps_source"] == "trace" and row["steps"] > 0


def test_runs_page_rerun_past_the_age_lists_again_only_after_a_change(settled_store, monkeypatch):
    root = settled_store
    listings = []
    compute = ui_store._compute_store_view
    monkeypatch.setattr(ui_store, "_compute_store_view", lambda r: listings.append(r) or compute(r))
    at = open_app(monkeypatch, root)
    assert_clean(at)
    assert len(listings) == 1
    time.sleep(ui_store.VIEW_MAX_AGE_S + 0.1)
    at.run()
    assert_clean(at)
    assert len(listings) == 1  # past the view's age, nothing changed: not listed again
    second = next(p for p in root.iterdir() if "-second-" in p.name)
    rf.update_manifest(second, tags=("new",))
    time.sleep(ui_store.VIEW_MAX_AGE_S + 0.1)
    at.run()
    assert_clean(at)
    assert len(listings) == 2
    df = at.dataframe[0].value
    assert dict(zip(df["name"], df["tags"]))["second"] == "new"
