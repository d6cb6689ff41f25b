"""`torchscope analyze`: JSON contract, text tables, rank filter, errors as one line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main

HERE = Path(__file__).resolve().parent
TINY = HERE.parent / "data" / "traces" / "cpu_torch213" / "tiny_mlp.pt.trace.json.gz"
SHARED = HERE.parents[1] / ".." / "shared" / "data" / "traces"


pytestmark = pytest.mark.usefixtures("module_trace_cache")  # one trace cache per module (conftest)


def test_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(TINY), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["steps"]) == 3 and doc["ops"] and doc["traces"][0]["warnings"] == []


def test_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(TINY)]) == 0
    out = capsys.readouterr().out
    assert "Top" in out and "aten::addmm" in out and "CPU EXEC" in out and "Memory peaks" in out


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present")
def test_rank_filter(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(SHARED / "two_ranks"), "--rank", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {s["rank"] for s in doc["steps"]} == {1}
    assert main(["analyze", str(SHARED / "two_ranks"), "--rank", "5"]) == 2
    assert "ranks [0, 1]" in capsys.readouterr().err


def test_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["analyze", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "traceEvents" in err and str(bad) in err
    assert main(["analyze", str(tmp_path / "missing.json"), "--root", str(tmp_path)]) == 2
    assert "no such file" in capsys.readouterr().err


def _tb_log_folder(root: Path, runs: list[str]) -> Path:
    """torch-tb-profiler's layout: one sub-folder per run, one trace file per worker."""
    for run in runs:
        (root / run).mkdir(parents=True)
        for worker in ("host_1", "host_2"):
            (root / run / f"{worker}.1700000000000.pt.trace.json.gz").write_bytes(TINY.read_bytes())
    return root


def test_tb_log_folder_with_several_runs_needs_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = _tb_log_folder(tmp_path / "logs", ["run_b", "run_a"])
    assert main(["analyze", str(logs), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "2 torch-tb-profiler runs (run_a, run_b)" in err and "--run NAME" in err
    assert main(["analyze", str(logs), "--run", "run_b", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["traces"]) == 2 and all(Path(t["path"]).parent.name == "run_b" for t in doc["traces"])
    assert main(["analyze", str(logs), "--run", "run_c"]) == 2
    assert "no such run; its runs: run_a, run_b" in capsys.readouterr().err


def test_tb_log_folder_with_one_run_needs_no_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = _tb_log_folder(tmp_path / "logs", ["only"])
    assert main(["analyze", str(logs), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["traces"]) == 2 and all(Path(t["path"]).parent.name == "only" for t in doc["traces"])
    assert main(["analyze", str(logs), "--run", "only", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["traces"] == doc["traces"]


def test_run_outside_a_tb_log_folder_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(TINY), "--run", "x"]) == 2
    assert "not a torch-tb-profiler log folder" in capsys.readouterr().err


def test_bad_input_errors_and_warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    invalid = tmp_path / "invalid.json"
    invalid.write_bytes(b'{"traceEvents": [ {"name": "x", "ph": "X", ts: 1} ]}')
    assert main(["analyze", str(invalid)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{invalid}: invalid JSON at byte 43 (line 1, column 44)" in err
    mem = tmp_path / "memory_timeline.raw.json"
    mem.write_text("[[-1, 1, 512, 7], [10, 2, 1024, 4]]")
    assert main(["analyze", str(mem)]) == 2
    assert f"{mem} is a memory timeline (export_memory_timeline), not a trace" in capsys.readouterr().err
    folder = tmp_path / "unranked"
    folder.mkdir()
    event = {"name": "ProfilerStep#1", "ph": "X", "ts": 100, "dur": 1000, "pid": 1, "tid": 1,
             "cat": "user_annotation"}
    text = json.dumps({"traceEvents": [event, 5]})
    for name in ("plain.json", "trainer_5.pt.trace.json"):
        (folder / name).write_text(text)
    assert main(["analyze", str(folder), "--json"]) == 0
    traces = json.loads(capsys.readouterr().out)["traces"]
    assert [t["rank"] for t in traces] == [0, 0]
    for t in traces:
        assert t["warnings"] == [
            f"{t['path']}: skipped 1 entry that is not an event object at byte {text.index(', 5]') + 2}",
            f"{t['path']}: 2 traces have no rank information and were all given rank 0: "
            "plain.json, trainer_5.pt.trace.json"]


def test_folder_scan_goes_by_content_like_import_and_ui(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A folder of traces is read by content (app.data.trace_files): a trace not named like
    tensorboard_trace_handler's output counts, a memory timeline or other JSON next to it does not."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "anything.json.gz").write_bytes(TINY.read_bytes())  # a trace under a plain name
    (folder / "config.json").write_text('{"lr": 0.1}')
    (folder / "w.memory_timeline.raw.json").write_text("[[1, 1, 128, 3]]")
    assert main(["analyze", str(folder), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [Path(t["path"]).name for t in doc["traces"]] == ["anything.json.gz"]


def test_run_store_names_its_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from profiler_agent.runformat import create_run

    store = tmp_path / "store"
    run_dir, _ = create_run(store, "only-run")
    assert main(["analyze", str(store)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a run store holding 1 run(s)" in err and str(run_dir) in err
