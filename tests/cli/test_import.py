"""`torchscope import`: trace files, folders of ranks, tb-profiler log folders; bad paths."""

from __future__ import annotations

import json

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
