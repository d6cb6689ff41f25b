"""The run format's promises: atomic files, tolerant JSONL, kept unknown fields, versions, crashed runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profiler_agent import runformat as rf
from profiler_agent.runformat import layout

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def test_atomic_write_replaces_whole_files_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "file.json"
    rf.atomic_write_json(target, {"a": 1})
    rf.atomic_write_json(target, {"b": [1, 2]})
    assert json.loads(target.read_text()) == {"b": [1, 2]}
    assert [p.name for p in target.parent.iterdir()] == ["file.json"]


def test_atomic_write_interrupted_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "run.json"
    rf.atomic_write_text(target, "old")

    def fail(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        rf.atomic_write_text(target, "new contents")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_truncated_last_jsonl_line_is_skipped_silently(tmp_path: Path) -> None:
    path = tmp_path / layout.METRICS
    with rf.JsonlWriter(path) as w:
        w.write({"step": 0, "loss": 1.0})
        w.write({"step": 1, "loss": 0.5})
    with open(path, "ab") as f:
        f.write(b'{"step": 2, "lo')  # the writer was killed mid-line
    read = rf.read_jsonl(path)
    assert [r["step"] for r in read.records] == [0, 1]
    assert read.truncated_tail and not read.skipped


def test_bad_middle_line_is_reported_with_its_number(tmp_path: Path) -> None:
    path = tmp_path / layout.METRICS
    path.write_bytes(b'{"step": 0}\nnot json\n[1, 2]\n{"step": 3}\n')
    read = rf.read_jsonl(path)
    assert [r["step"] for r in read.records] == [0, 3]
    assert len(read.skipped) == 2 and "line 2" in read.skipped[0] and "line 3" in read.skipped[1]
    assert not read.truncated_tail


def test_unknown_fields_survive_a_manifest_update(tmp_path: Path) -> None:
    run_dir, _ = rf.create_run(tmp_path, "x", config={"lr": 1})
    raw = json.loads((run_dir / layout.MANIFEST).read_text())
    raw["from_the_future"] = {"k": [1, 2]}
    (run_dir / layout.MANIFEST).write_text(json.dumps(raw))
    rf.update_manifest(run_dir, status=rf.RunStatus.FINISHED, config={"batch_size": 2})
    m = rf.read_manifest(run_dir)
    assert m.extra["from_the_future"] == {"k": [1, 2]}
    assert m.config == {"lr": 1, "batch_size": 2} and m.status is rf.RunStatus.FINISHED
    assert json.loads((run_dir / layout.MANIFEST).read_text())["from_the_future"] == {"k": [1, 2]}


def test_newer_schema_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    (tmp_path / layout.MANIFEST).write_text(json.dumps({"schema_version": rf.SCHEMA_VERSION + 1,
                                                         "id": "a", "name": "a"}))
    with pytest.raises(rf.SchemaVersionError, match=r"run\.json: schema_version 2 is newer .* upgrade Torchscope"):
        rf.read_manifest(tmp_path)


def test_schema_0_is_migrated_on_read(tmp_path: Path) -> None:
    (tmp_path / layout.MANIFEST).write_text(json.dumps({"id": "old", "name": "old", "status": "finished",
                                                         "start_time": 10.0, "end_time": 25.0}))
    m = rf.read_manifest(tmp_path)
    assert m.schema_version == rf.SCHEMA_VERSION
    assert (m.started_at, m.ended_at, m.duration_s) == (10.0, 25.0, 15.0)
    assert "start_time" not in m.extra


@pytest.mark.parametrize(("content", "message"), [
    (b"", "file is empty"),
    (b"{not json", "invalid JSON at line 1"),
    (b'{"id": "a", "name": "a", "status": "paused"}', "expected one of running, finished"),
    (b'{"id": "a", "name": "a", "config": [1]}', "field 'config' should be dict"),
])
def test_corrupt_manifests_name_the_file_and_problem(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / layout.MANIFEST).write_bytes(content)
    with pytest.raises(rf.CorruptFileError, match=message) as err:
        rf.read_manifest(tmp_path)
    assert str(tmp_path / layout.MANIFEST) in str(err.value)


def test_effective_status_crashed_only_when_stale_and_dead(tmp_path: Path) -> None:
    _run_dir, m = rf.create_run(tmp_path, "live")
    now = time.time()
    assert rf.effective_status(m, now=now) is rf.RunStatus.RUNNING
    stale = now + rf.HEARTBEAT_STALE_S + 1
    assert rf.effective_status(m, now=stale) is rf.RunStatus.RUNNING  # our own pid is alive
    dead = m.replace(pid=2**22 + 12345)
    assert rf.effective_status(dead, now=stale) is rf.RunStatus.CRASHED
    assert rf.effective_status(dead.replace(status=rf.RunStatus.FINISHED), now=stale) is rf.RunStatus.FINISHED
    elsewhere = m.replace(host="another-host")
    assert rf.effective_status(elsewhere, now=stale) is rf.RunStatus.CRASHED


def test_list_and_find_runs(tmp_path: Path) -> None:
    a, _ = rf.create_run(tmp_path, "alpha")
    b, _ = rf.create_run(tmp_path, "beta")
    (tmp_path / "junk").mkdir()
    listing = rf.list_runs(tmp_path)
    assert {p for p, _ in listing.runs} == {a, b}
    assert any("junk" in p for p in listing.problems)
    assert listing.not_runs == [tmp_path / "junk"]
    assert rf.find_run("alpha", tmp_path) == a and rf.find_run(b.name, tmp_path) == b
    with pytest.raises(rf.RunNotFoundError, match="no run"):
        rf.find_run("gamma", tmp_path)
    with pytest.raises(rf.RunStoreNotFoundError):
        rf.list_runs(tmp_path / "missing")


def test_find_run_by_id_of_an_unreadable_run_says_why(tmp_path: Path) -> None:
    future, _ = rf.create_run(tmp_path, "future")
    raw = json.loads((future / layout.MANIFEST).read_text())
    (future / layout.MANIFEST).write_text(json.dumps({**raw, "schema_version": 99}))
    with pytest.raises(rf.SchemaVersionError, match="schema_version 99"):
        rf.find_run(future.name, tmp_path)
    (tmp_path / "not-a-run").mkdir()
    with pytest.raises(rf.NotARunError, match="not a run folder"):
        rf.find_run("not-a-run", tmp_path)


def test_names_live_in_layout() -> None:
    worker = layout.worker_name("node-1.example", 4242, 3)
    name = layout.trace_file_name(worker, 123)
    match = layout.TRACE_FILE_RE.match(name)
    assert match and match["worker"] == worker and match["time_ns"] == "123"
    assert layout.rank_from_worker(worker) == 3 and layout.rank_from_worker("host_12") is None
    assert layout.SNAPSHOT_FILE_RE.match(layout.snapshot_file_name(worker, 5))


def test_concurrent_jsonl_appends_do_not_interleave(tmp_path: Path) -> None:
    path = tmp_path / layout.METRICS
    code = ("import sys; from profiler_agent.runformat import JsonlWriter\n"
            "w = JsonlWriter(sys.argv[1])\n"
            "for i in range(300): w.write({'rank': int(sys.argv[2]), 'i': i, 'pad': 'x' * 500})\n")
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), str(r)], env=env) for r in range(3)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0]
    read = rf.read_jsonl(path)
    assert len(read.records) == 900 and not read.skipped


def test_runformat_imports_no_heavy_libraries() -> None:
    code = ("import sys, profiler_agent.runformat, profiler_agent\n"
            "heavy = [m for m in ('torch', 'pandas', 'streamlit', 'plotly', 'numpy') if m in sys.modules]\n"
            "print(heavy)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}, cwd=PROJECT_ROOT)
    assert out.stdout.strip() == "[]"


def test_bootstrap_and_launcher_do_not_import_torch() -> None:
    code = ("import sys, profiler_agent.autoinstrument, profiler_agent.launcher, profiler_agent.cli\n"
            "print([m for m in ('torch', 'app', 'pandas') if m in sys.modules])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}, cwd=PROJECT_ROOT)
    assert out.stdout.strip() == "[]"
