"""`torchscope import`: trace files, folders of ranks, tb-profiler log folders; bad paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout


def test_import_trace_then_ls(shared_data, tmp_path, capsys):
    src = shared_data / "traces" / "gpu_before_after" / "test.json.gz"
    store = tmp_path / "store"
    assert main(["import", str(src), "--root", str(store), "--name", "after", "--json"]) == 0
    (created,) = json.loads(capsys.readouterr().out)["runs"]
    assert created["name"] == "after"
    assert layout.list_trace_files(created["path"])
    assert main(["ls", "--root", str(store), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["runs"]
    assert row["status"] == "finished" and "imported" in row["tags"] and "V100" in row["device"]


def test_import_tb_folder(shared_data, tmp_path, capsys):
    tb = tmp_path / "tb"
    for run in ("a", "b"):
        (tb / run).mkdir(parents=True)
        for f in (shared_data / "traces" / "cpu_only").iterdir():
            (tb / run / f.name).write_bytes(f.read_bytes())
    assert main(["import", str(tb), "--root", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    assert out.count("imported /") == 2
    assert f"2 run(s) imported into {tmp_path / 's'}" in out  # not "2 run(s) in": the store may hold more
    assert sorted(m.name for _, m in rf.list_runs(tmp_path / "s").runs) == ["a", "b"]


def test_import_bad_path_exits_2(tmp_path, capsys):
    assert main(["import", str(tmp_path / "nothing"), "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no such file or folder" in err and "Traceback" not in err


def test_import_reports_when_the_trace_started(shared_data, tmp_path, capsys):
    src = shared_data / "traces" / "cpu_only"
    assert main(["import", str(src), "--root", str(tmp_path / "s"), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["runs"]
    assert abs(row["started_at"] - 1_721_065_959.5) < 1  # from the trace's clock, not the file's mtime
    assert main(["import", str(src), "--root", str(tmp_path / "s")]) == 0
    assert "(started 2024-07-15 17:52:39 UTC)" in capsys.readouterr().out


def _tb_like_shared(shared_data, tmp_path):
    """A log folder like ../shared/data/traces: trace files named freely (not as
    tensorboard_trace_handler names them), plus folders that hold no trace."""
    tb = tmp_path / "logs"
    for run, src in (("two", "two_ranks"), ("cpu", "cpu_only")):
        (tb / run).mkdir(parents=True)
        for f in (shared_data / "traces" / src).iterdir():
            (tb / run / f.name).write_bytes(f.read_bytes())
    (tb / "two" / "memory.json").write_text("[[-1, 1, 4096, 0], [5, 2, 64, 3]]")
    (tb / "notes").mkdir()
    (tb / "notes" / "config.json").write_text('{"lr": 0.1}')
    return tb


def test_import_log_folder_by_content_reports_what_it_skipped(shared_data, tmp_path, capsys):
    tb = _tb_like_shared(shared_data, tmp_path)
    store = tmp_path / "s"
    assert main(["import", str(tb), "--root", str(store), "--no-summary"]) == 0
    out, err = capsys.readouterr()
    assert out.count("imported /") == 2 and "2 file(s) or folder(s) skipped" in out
    assert f"skipped {tb / 'notes'}: none of its 1 *.json[.gz] file(s) is a profiler trace (config.json:" in err
    assert f"skipped {tb / 'two' / 'memory.json'}: a memory timeline" in err
    runs = {m.name: p for p, m in rf.list_runs(store).runs}
    assert sorted(runs) == ["cpu", "two"]
    assert len(layout.list_trace_files(runs["two"])) == 2  # both ranks, not the memory timeline


def test_import_json_lists_skipped(shared_data, tmp_path, capsys):
    tb = _tb_like_shared(shared_data, tmp_path)
    assert main(["import", str(tb), "--root", str(tmp_path / "s"), "--json", "--no-summary"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(r["name"] for r in doc["runs"]) == ["cpu", "two"]
    assert {Path(s["path"]).name for s in doc["skipped"]} == {"notes", "memory.json"}
    assert all(s["reason"] for s in doc["skipped"])


@pytest.mark.parametrize(
    ("content", "expected"),
    [(b'{"foo": 1}', 'without a "traceEvents" list'),
     (b'{"traceEvents": [ {"name": "x", "ph": "X", ts: 1} ]}', "invalid JSON"),
     (b"", "the file is empty"),
     (b"[[-1, 1, 4096, 0]]", "memory timeline")],
)
def test_import_refuses_a_file_that_is_not_a_trace(tmp_path, capsys, content, expected):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    store = tmp_path / "s"
    assert main(["import", str(bad), "--root", str(store)]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and str(bad) in err and expected in err and "Traceback" not in err
    assert out == "" and (not store.exists() or not rf.list_runs(store).runs)  # nothing imported


def test_import_folder_without_traces_names_the_files(tmp_path, capsys):
    folder = tmp_path / "junk"
    folder.mkdir()
    (folder / "a.json").write_text('{"foo": 1}')
    (folder / "b.json").write_text("not json")
    assert main(["import", str(folder), "--root", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert "no trace files found" in err and "a.json:" in err and "b.json: not JSON" in err


def test_folder_with_its_own_traces_is_one_run_like_analyze(shared_data, tmp_path, capsys):
    folder = tmp_path / "job"
    (folder / "sub").mkdir(parents=True)
    for f in (shared_data / "traces" / "two_ranks").iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    src = shared_data / "traces" / "cpu_only" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
    (folder / "sub" / src.name).write_bytes(src.read_bytes())
    assert main(["import", str(folder), "--root", str(tmp_path / "s")]) == 0
    out, err = capsys.readouterr()
    assert out.count("imported /") == 1
    assert f"skipped {folder / 'sub'}: a sub-folder of traces" in err


def test_import_the_shared_log_folder_gives_every_run(shared_data, tmp_path, capsys):
    import shutil

    tb = tmp_path / "traces"
    shutil.copytree(shared_data / "traces", tb)
    # --no-summary: this test is about which runs are made; analysing 7 traces at import is tested below
    assert main(["import", str(tb), "--root", str(tmp_path / "s"), "--json", "--no-summary"]) == 0
    doc = json.loads(capsys.readouterr().out)
    expected = sorted(p.name for p in (shared_data / "traces").iterdir() if p.is_dir())
    assert len(expected) == 7 and sorted(r["name"] for r in doc["runs"]) == expected and doc["skipped"] == []
