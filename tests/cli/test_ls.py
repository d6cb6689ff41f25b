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


def _set_started(run_dir, started_at):  # noqa: ANN001, ANN202
    from profiler_agent.runformat import layout

    path = run_dir / layout.MANIFEST
    data = json.loads(path.read_text())
    data["started_at"] = started_at
    path.write_text(json.dumps(data))


def test_ls_lists_newest_start_first_not_by_folder_name(make_run, capsys):
    # Folder names sort a-, b-, c- ...; start times say c is oldest, a newest.
    a, b, c = make_run("a"), make_run("b"), make_run("c")
    _set_started(a, 1_700_000_300.0)
    _set_started(b, 1_700_000_200.0)
    _set_started(c, 1_700_000_100.0)
    assert main(["ls", "--root", str(a.parent), "--json"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)["runs"]] == ["a", "b", "c"]
    assert main(["ls", "--root", str(a.parent)]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    assert [line.split()[0] for line in lines] == ["a", "b", "c"]


def test_ls_imported_run_steps_come_from_the_trace_analysis_cache(
    shared_data, tmp_path, monkeypatch, capsys
):
    from app.data.tbprofiler import import_traces

    monkeypatch.setenv("TORCHSCOPE_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "runs"
    run_dir = import_traces(shared_data / "traces" / "gpu_before_after" / "control.json.gz", root, name="gpu")[0]
    assert main(["ls", "--root", str(root)]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[1].count("in trace") == 2  # steps, step time: no trace is parsed
    assert "torchscope analyze" in captured.err
    assert main(["ls", "--root", str(root), "--json"]) == 0
    (rec,) = json.loads(capsys.readouterr().out)["runs"]
    assert rec["steps"] is None and rec["mean_step_time_s"] is None

    assert main(["analyze", str(run_dir), "--json"]) == 0
    steps = json.loads(capsys.readouterr().out)["steps"]
    assert main(["ls", "--root", str(root), "--json"]) == 0
    (rec,) = json.loads(capsys.readouterr().out)["runs"]
    assert list(rec) == STORE_COLUMNS
    assert rec["steps"] == len(steps) == 6
    expected = sum(s["duration_us"] for s in steps) / len(steps) / 1e6
    assert abs(rec["mean_step_time_s"] - expected) < 1e-6
    assert main(["ls", "--root", str(root)]) == 0
    captured = capsys.readouterr()
    assert "6*" in captured.out and "ms*" in captured.out
    assert "profiled steps" in captured.err


def test_ls_lists_a_tb_profiler_folder_like_the_ui(shared_data, tmp_path, monkeypatch, capsys):
    tb = tmp_path / "tb"
    for exp in ("exp1", "exp2"):
        (tb / exp).mkdir(parents=True)
    for i, src in enumerate(sorted((shared_data / "traces" / "two_ranks").iterdir())):
        (tb / f"exp{i + 1}" / f"worker{i}.1700000000{i}.pt.trace.json.gz").write_bytes(src.read_bytes())
    monkeypatch.setenv("TORCHSCOPE_CACHE", str(tmp_path / "cache"))
    assert main(["ls", "--root", str(tb), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(r["name"] for r in doc["runs"]) == ["exp1", "exp2"]
    assert doc["problems"] == []  # the tb sub-folders are not "not a run" problems
    assert main(["ls", "--root", str(tb)]) == 0
    captured = capsys.readouterr()
    assert "exp1" in captured.out and "read-only" in captured.err
    assert sorted(p.name for p in (tb / "exp1").iterdir()) == ["worker0.17000000000.pt.trace.json.gz"]
