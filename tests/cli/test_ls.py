"""`torchscope ls`: table, --json document, empty and missing stores."""

from __future__ import annotations

import json

from app.cli import main
from app.data.runs import STORE_COLUMNS


def test_ls_json_lists_runs_with_documented_fields(fixture_store, capsys):
    root, runs = fixture_store
    assert main(["ls", "--root", str(root), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"root", "runs", "problems"}
    assert {r["name"] for r in doc["runs"]} == set(runs)
    for r in doc["runs"]:
        assert list(r) == STORE_COLUMNS
    statuses = {r["name"]: r["status"] for r in doc["runs"]}
    assert statuses["crashed"] == "crashed" and statuses["live"] == "running"


def test_ls_table_marks_crashed_and_running(fixture_store, capsys):
    assert main(["ls", "--root", str(fixture_store[0])]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["NAME", "STATUS"]
    assert len(lines) == 1 + len(fixture_store[1])
    assert any("✗ crashed" in line for line in lines)
    assert any("● running" in line for line in lines)
    assert "ms" in out and "MiB" in out


def test_ls_empty_store(tmp_path, capsys):
    assert main(["ls", "--root", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == []
    assert main(["ls", "--root", str(tmp_path)]) == 0
    assert "no runs" in capsys.readouterr().out


def test_ls_missing_store_is_a_clear_error(tmp_path, capsys):
    assert main(["ls", "--root", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "run store not found" in err and "Traceback" not in err


def test_ls_reports_problems_but_lists_good_runs(make_run, capsys):
    good = make_run("good")
    (good.parent / "junk").mkdir()
    assert main(["ls", "--root", str(good.parent), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in doc["runs"]] == ["good"]
    assert any("junk" in p for p in doc["problems"])
