"""`torchscope import` of TensorBoard log folders: scalars as metrics, traces and scalars of one
folder in one run, bad event files reported on one line."""

from __future__ import annotations

import json
from pathlib import Path

from app.cli import main
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout


def _log(folder: Path, steps: int = 5) -> None:
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(folder)) as w:
        for i in range(steps):
            w.add_scalar("Loss/train", 1.0 / (i + 1), 10 * i)


def test_traces_and_scalars_of_one_folder_make_one_run(shared_data, tmp_path, capsys):
    logs = tmp_path / "logs"
    (logs / "profiled").mkdir(parents=True)
    for f in (shared_data / "traces" / "cpu_only").iterdir():  # tensorboard_trace_handler's files...
        (logs / "profiled" / f.name).write_bytes(f.read_bytes())
    _log(logs / "profiled")  # ...and SummaryWriter's, in the same log dir
    _log(logs / "plain", steps=3)
    store = tmp_path / "s"
    assert main(["import", str(logs), "--root", str(store), "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""  # nothing skipped: the scalar-only folder is not "a folder without traces"
    runs = {r["name"]: Path(r["path"]) for r in json.loads(out)["runs"]}
    assert sorted(runs) == ["plain", "profiled"]
    both = runs["profiled"]
    assert layout.list_trace_files(both)
    lines = rf.read_jsonl(both / layout.METRICS).records
    assert [(r["step"], r["tb_step"]) for r in lines] == [(10 * i, 10 * i) for i in range(5)]
    assert all(abs(r["Loss/train"] - 1 / (i + 1)) < 1e-6 for i, r in enumerate(lines))  # float32 in tfevents
    manifest = rf.read_manifest(both)
    kinds = {a.kind for a in manifest.artifacts}
    assert {rf.ArtifactKind.TRACE, rf.ArtifactKind.METRICS} <= kinds
    assert manifest.started_at is not None and manifest.started_at <= 1_721_065_960  # the trace's (2024)
    # Its scalars have no step times: the catalog still takes its steps from the traces.
    from app.workspace.catalog_rows import load_run_row

    assert load_run_row(both)[0]["steps_source"] == "in trace"
    assert load_run_row(runs["plain"])[0]["steps_source"] == "metrics"
    plain = rf.read_manifest(runs["plain"])
    assert plain.status is rf.RunStatus.FINISHED and "imported" in plain.tags
    assert plain.host is None and plain.pid is None  # not the importer's
    assert plain.ended_at is not None and plain.started_at is not None and plain.ended_at >= plain.started_at
    # Wall time kept: each line's time is seconds since the run's start.
    times = [r["time"] for r in rf.read_jsonl(runs["plain"] / layout.METRICS).records]
    assert times == sorted(times) and 0 <= times[0] < 60


def test_a_corrupt_event_file_is_one_line_not_a_traceback(tmp_path, capsys):
    bad = tmp_path / "events.out.tfevents.1700000000.host"
    bad.write_bytes(b"\x00" * 7 + b"definitely not a record" * 3)
    assert main(["import", str(bad), "--root", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "not a TensorBoard event file" in err and "Traceback" not in err
    assert not (tmp_path / "s").exists() or not rf.list_runs(tmp_path / "s").runs


def test_a_bad_file_beside_good_runs_is_skipped_with_its_reason(tmp_path, capsys):
    logs = tmp_path / "logs"
    _log(logs / "good")
    (logs / "broken").mkdir()
    (logs / "broken" / "events.out.tfevents.1.host").write_bytes(b"")
    assert main(["import", str(logs), "--root", str(tmp_path / "s")]) == 0
    out, err = capsys.readouterr()
    assert "1 run(s) imported" in out and "1 file(s) or folder(s) skipped" in out
    assert f"skipped {logs / 'broken' / 'events.out.tfevents.1.host'}: the file is empty" in err


def test_empty_folder_exits_2_with_a_clear_message(tmp_path, capsys):
    (tmp_path / "logs").mkdir()
    assert main(["import", str(tmp_path / "logs"), "--root", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert "no trace files found" in err and "no TensorBoard event files" in err and "Traceback" not in err
