"""app.data.runs and app.data.tbprofiler: store tables, bad input, archive/delete, trace import."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app.data import runs as runs_data
from app.data import tbprofiler
from app.errors import UsageError
from app.presentation import units
from app.workspace.catalog import load_catalog
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout


def _by_name(store: runs_data.StoreTable) -> dict[str, dict]:
    return {r["name"]: r for r in store.table.to_dict(orient="records")}


def test_store_table_summarises_every_run(fixture_store):
    root, runs = fixture_store
    store = load_catalog(root)
    assert list(store.table.columns[: len(runs_data.STORE_COLUMNS)]) == runs_data.STORE_COLUMNS
    rows = _by_name(store)
    assert set(rows) == set(runs)
    assert rows["baseline"]["status"] == "finished"
    assert rows["crashed"]["status"] == "crashed"  # stale heartbeat, dead pid
    assert rows["live"]["status"] == "running"
    assert rows["failed"]["status"] == "failed"
    assert rows["baseline"]["steps"] == 20
    assert rows["baseline"]["final_loss"] == pytest.approx((2.0 / 19 + 2.0 / 20) / 2)  # median of the last 2 (app.analysis.run.final_value)
    # steady-state median: 0.05 * jitter in [1.0, 1.08]; the 3x first step (warm-up) does not move it
    assert 0.05 <= rows["baseline"]["step_time_s"] <= 0.055
    assert 0.05 <= rows["baseline"]["mean_step_time_s"] <= 0.055  # mean of the same steps
    assert rows["baseline"]["step_time_steps"] == 18  # 20 steps, auto warm-up min(5, 20 // 10) = 2
    assert rows["optimized"]["step_time_s"] < rows["baseline"]["step_time_s"]
    # throughput as Compare: median over the kept steps of 32 samples / step time
    assert rows["baseline"]["samples_per_s"] == pytest.approx(32 / rows["baseline"]["step_time_s"])
    assert rows["baseline"]["peak_memory_bytes"] == 290 * 2**20
    assert rows["baseline"]["tags"] == "base"
    assert rows["baseline"]["git_commit"] == "0123456789"
    assert store.problems == []


def test_store_records_are_json_ready(fixture_store):
    records = runs_data.store_records(load_catalog(fixture_store[0]))
    text = json.dumps(records, allow_nan=False)  # no NaN, no Timestamp
    assert set(records[0]) == set(runs_data.STORE_COLUMNS)
    base = next(r for r in records if r["name"] == "baseline")
    assert base["tags"] == ["base"]
    assert base["started_at"].endswith("+00:00")
    assert "NaN" not in text


def test_bad_runs_are_problems_and_others_still_listed(make_run, tmp_path):
    good = make_run("good")
    root = good.parent
    (root / "not-a-run").mkdir()
    newer = make_run("newer")
    data = json.loads((newer / layout.MANIFEST).read_text())
    data["schema_version"] = rf.SCHEMA_VERSION + 1
    (newer / layout.MANIFEST).write_text(json.dumps(data))
    garbage = make_run("garbage")
    with open(garbage / layout.METRICS, "ab") as f:
        f.write(b'\x00\xffnot json\n{"step": 99, "loss": "oops"}\n[1, 2]\n')
    store = load_catalog(root)
    names = set(store.table["name"])
    assert names == {"good", "garbage"}
    text = "\n".join(store.problems)
    assert "not-a-run" in text and "not a run folder" in text
    assert "schema_version" in text and "newer" in text
    assert f"{garbage.name}: {layout.METRICS} line" in text
    row = _by_name(store)["garbage"]
    assert row["steps"] == 100  # the line with step 99 is kept; its bad loss does not break the row


def test_missing_store_raises_clear_error(tmp_path):
    with pytest.raises(rf.RunStoreNotFoundError, match="run store not found"):
        load_catalog(tmp_path / "nope")


def test_empty_store_has_no_rows(tmp_path):
    store = load_catalog(tmp_path)
    assert store.table.empty and store.problems == []
    assert runs_data.store_records(store) == []


def test_filter_store_matches_name_tags_config_and_status(fixture_store):
    table = load_catalog(fixture_store[0]).table
    assert set(runs_data.filter_store(table, "adam")["name"]) == {"optimized"}
    assert set(runs_data.filter_store(table, "AMP")["name"]) == {"optimized"}
    assert set(runs_data.filter_store(table, "lr=0.01 base")["name"]) == {"baseline"}
    assert set(runs_data.filter_store(table, "", ["crashed", "failed"])["name"]) == {"crashed", "failed"}
    assert runs_data.filter_store(table, "no-such-word").empty


def test_archive_and_delete(make_run):
    a, b = make_run("a"), make_run("b")
    root = a.parent
    moved = runs_data.archive_run(a, root)
    assert moved.parent == root / runs_data.ARCHIVE_DIR and (moved / layout.MANIFEST).is_file()
    runs_data.delete_run(b)
    assert not b.exists()
    assert load_catalog(root).table.empty  # .archive is not listed
    with pytest.raises(rf.NotARunError):
        runs_data.delete_run(root / runs_data.ARCHIVE_DIR)


def test_run_ranks_and_formatting(fixture_store):
    _root, runs = fixture_store
    assert runs_data.run_ranks(runs_data.load_run(runs["ddp"])) == [0, 1]
    assert runs_data.run_ranks(runs_data.load_run(runs["baseline"])) == [0]
    assert units.format_bytes(1536) == "1.5 KiB"
    assert units.format_bytes(None) == "–"
    assert units.format_seconds(0.0123) == "12.3 ms"
    assert units.format_seconds(75) == "1m 15s"


def test_import_gpu_trace_keeps_original_and_reads_meta(shared_data, tmp_path):
    src = shared_data / "traces" / "gpu_before_after" / "control.json.gz"
    before = src.stat().st_mtime_ns, src.stat().st_size
    (run_dir,) = tbprofiler.import_traces(src, tmp_path, name="control")
    m = rf.read_manifest(run_dir)
    assert m.name == "control" and m.status is rf.RunStatus.FINISHED
    assert m.world_size == 8 and m.devices and m.devices[0]["name"].startswith("NVIDIA A100")
    (trace,) = layout.list_trace_files(run_dir)
    assert trace.read_bytes() == src.read_bytes()
    assert os.access(trace, os.W_OK)
    assert (src.stat().st_mtime_ns, src.stat().st_size) == before
    assert m.artifacts[0].rank == 3


def test_import_folder_of_ranks_is_one_run(shared_data, tmp_path):
    (run_dir,) = tbprofiler.import_traces(shared_data / "traces" / "two_ranks", tmp_path)
    assert len(layout.list_trace_files(run_dir)) == 2
    assert runs_data.run_ranks(runs_data.load_run(run_dir)) == [0, 1]
    # the traces carry no deviceProperties (but GPU kernels): the device is unknown, not "cpu"
    (row,) = runs_data.store_records(load_catalog(tmp_path))
    assert row["device"] == ""


def test_import_plain_json_trace_keeps_rank_from_distributed_info(tmp_path):
    src = tmp_path / "worker_a.json"
    src.write_text(
        json.dumps(
            {
                "schemaVersion": 1,
                "distributedInfo": {"rank": 5, "world_size": 8},
                "traceEvents": [
                    {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "ts": 1, "dur": 2, "pid": 1, "tid": 1}
                ],
            }
        )
    )
    (run_dir,) = tbprofiler.import_traces(src, tmp_path / "store")
    (trace,) = layout.list_trace_files(run_dir)
    assert trace.name.startswith("worker_a.") and trace.name.endswith(".pt.trace.json")
    assert json.loads(trace.read_text())["distributedInfo"]["rank"] == 5
    run = runs_data.load_run(run_dir)
    assert run.manifest.world_size == 8
    assert runs_data.run_ranks(run) == [5]  # from the manifest's trace artifact, not the file name


def _tb_folder(shared_data: Path, tmp_path: Path) -> Path:
    tb = tmp_path / "tb_logs"
    for run in ("resnet", "bert"):
        (tb / run).mkdir(parents=True)
        src = shared_data / "traces" / "cpu_only" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
        (tb / run / src.name).write_bytes(src.read_bytes())
    return tb


def test_import_tb_profiler_folder_one_run_per_subfolder(shared_data, tmp_path):
    tb = _tb_folder(shared_data, tmp_path)
    assert [p.name for p in tbprofiler.find_tb_runs(tb)] == ["bert", "resnet"]
    created = tbprofiler.import_traces(tb, tmp_path / "store", name="exp")
    assert sorted(rf.read_manifest(p).name for p in created) == ["exp-bert", "exp-resnet"]
    assert rf.read_manifest(created[0]).world_size == 300


def test_mirror_follows_the_tb_folder(shared_data, tmp_path):
    tb = _tb_folder(shared_data, tmp_path)
    cache = tmp_path / "cache"
    store = tbprofiler.mirror_tb_folder(tb, cache)
    assert store == cache
    names = sorted(m.name for _, m in rf.list_runs(store).runs)
    assert names == ["bert", "resnet"]
    trace = layout.list_trace_files(rf.list_runs(store).runs[0][0])[0]
    assert trace.is_symlink()
    first_ids = {p.name for p, _ in rf.list_runs(store).runs}
    tbprofiler.mirror_tb_folder(tb, cache)  # unchanged: nothing re-imported
    assert {p.name for p, _ in rf.list_runs(store).runs} == first_ids
    import shutil

    shutil.rmtree(tb / "bert")
    tbprofiler.mirror_tb_folder(tb, cache)
    assert [m.name for _, m in rf.list_runs(store).runs] == ["resnet"]
    assert tbprofiler.mirror_tb_folder(tmp_path / "store-that-is-empty", cache) is None


def test_import_rejects_what_is_not_a_trace(tmp_path, make_run):
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(UsageError, match="not a trace file"):
        tbprofiler.import_traces(tmp_path / "notes.txt", tmp_path / "s")
    with pytest.raises(UsageError, match="no such file"):
        tbprofiler.import_traces(tmp_path / "missing", tmp_path / "s")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no trace files"):
        tbprofiler.import_traces(tmp_path / "empty", tmp_path / "s")
    with pytest.raises(UsageError, match="already a Torchscope run"):
        tbprofiler.import_traces(make_run("x"), tmp_path / "s")


def test_steps_count_training_steps_not_a_final_evaluation_line(make_run):
    run_dir = make_run("evaluated", steps=12)
    # The agent logs an evaluation that ran after the last optimizer step at the next step number.
    with open(run_dir / layout.METRICS, "a", encoding="utf-8") as f:
        f.write(json.dumps({"step": 12, "time": 1.0, "rank": 0, "val_loss": 0.5}) + "\n")
    [row] = load_catalog(run_dir.parent).table.to_dict(orient="records")
    assert row["steps"] == 12
