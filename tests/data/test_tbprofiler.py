"""Tests of app.data.trace_head: when an imported trace's profiling started, and its metadata."""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from app.data.tbprofiler import import_traces
from app.data.trace_head import TraceMeta, read_trace_meta, read_trace_start
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout

BASE_NS = 1_711_964_646_000_000_000  # Kineto's base: the wall clock floored to a 3-month boundary


def _write(path: Path, doc: dict, *, gz: bool) -> Path:
    text = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(text) if gz else text)
    return path


def _kineto(ts: list[float], **top: object) -> dict:
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": t, "dur": 5}
              for i, t in enumerate(ts)]
    # As Kineto writes it: metadata, traceEvents, then traceName/displayTimeUnit/baseTimeNanoseconds.
    return {"schemaVersion": 1, "deviceProperties": [], "traceEvents": events, "traceName": "x", **top}


@pytest.mark.parametrize("gz", [False, True])
def test_base_time_at_the_end_plus_earliest_ts(tmp_path: Path, gz: bool) -> None:
    doc = _kineto([4_458_676_522_709.0, 4_458_676_522_690.5, 4_458_676_600_000.0], baseTimeNanoseconds=BASE_NS)
    f = _write(tmp_path / ("t.json.gz" if gz else "t.json"), doc, gz=gz)
    assert read_trace_start(f) == pytest.approx(BASE_NS / 1e9 + 4_458_676.5226905, abs=1e-6)


def test_plain_file_larger_than_head_and_tail_windows(tmp_path: Path) -> None:
    doc = _kineto([1_000.0 + i for i in range(20_000)], baseTimeNanoseconds=BASE_NS)  # ~2 MB of events
    f = _write(tmp_path / "t.json", doc, gz=False)
    assert f.stat().st_size > (1 << 20)
    assert read_trace_start(f) == pytest.approx(BASE_NS / 1e9 + 0.001)


def test_old_trace_with_epoch_microseconds(tmp_path: Path) -> None:
    f = _write(tmp_path / "t.json.gz", _kineto([1_682_725_898_236_567.0, 1_682_725_898_079_484.0]), gz=True)
    assert read_trace_start(f) == pytest.approx(1_682_725_898.079484)


def test_relative_ts_without_base_or_no_events_is_unknown(tmp_path: Path) -> None:
    assert read_trace_start(_write(tmp_path / "a.json", _kineto([1_000.0, 2_000.0]), gz=False)) is None
    assert read_trace_start(_write(tmp_path / "b.json", _kineto([]), gz=False)) is None
    (tmp_path / "c.json.gz").write_bytes(b"not gzip at all")
    assert read_trace_start(tmp_path / "c.json.gz") is None
    (tmp_path / "d.json").write_text('[{"ph": "X"')  # no traceEvents key
    assert read_trace_start(tmp_path / "d.json") is None


def test_shared_kineto_trace(shared_data: Path) -> None:
    # tensorboard_trace_handler named the file after its local save time (Jul 15 10:52:41, UTC-7);
    # the earliest event (the profiler's metadata, 10:52:39 local) is two seconds before.
    f = shared_data / "traces" / "cpu_only" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
    assert read_trace_start(f) == pytest.approx(1_719_853_884 + 1_212_075.525586016, abs=1e-3)


def test_import_takes_started_from_the_trace_else_mtime(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    dated = _write(src / "w0.json.gz", _kineto([2_000.0, 1_000.0], baseTimeNanoseconds=BASE_NS), gz=True)
    os.utime(dated, (1_800_000_000, 1_800_000_000))  # a later copy: its mtime says nothing
    (run,) = import_traces(dated, tmp_path / "store")
    manifest = rf.read_manifest(run)
    assert manifest.started_at == pytest.approx(BASE_NS / 1e9 + 0.001)
    # where the import ran is not where the job ran
    assert manifest.host is None and manifest.cwd is None and manifest.exit_code is None
    assert manifest.status is rf.RunStatus.FINISHED
    # renamed as tensorboard_trace_handler names it, with the trace's own start
    assert [p.name for p in layout.list_trace_files(run)] == [f"w0.{BASE_NS + 1_000_000}.pt.trace.json.gz"]
    undated = _write(src / "w1.json", _kineto([1_000.0]), gz=False)
    os.utime(undated, (1_700_000_000, 1_700_000_000))
    (run,) = import_traces(undated, tmp_path / "store")
    assert rf.read_manifest(run).started_at == pytest.approx(1_700_000_000)


def test_mirror_redoes_runs_of_an_older_import(tmp_path: Path) -> None:
    from app.data.tbprofiler import mirror_tb_folder

    sub = tmp_path / "tb" / "run1"
    sub.mkdir(parents=True)
    _write(sub / "w0.123.pt.trace.json", _kineto([1_000.0], baseTimeNanoseconds=BASE_NS), gz=False)
    store = mirror_tb_folder(tmp_path / "tb", tmp_path / "cache")
    ((run, manifest),) = rf.list_runs(store).runs
    assert manifest.started_at == pytest.approx(BASE_NS / 1e9 + 0.001)
    mirror_tb_folder(tmp_path / "tb", tmp_path / "cache")
    assert [p for p, _ in rf.list_runs(store).runs] == [run]  # unchanged: kept
    extra = {k: v for k, v in manifest.extra.items() if k != "import_version"}
    rf.update_manifest(run, extra=extra, started_at=1.0)  # as an import before version 2 left it
    mirror_tb_folder(tmp_path / "tb", tmp_path / "cache")
    ((again, manifest),) = rf.list_runs(store).runs
    assert again != run and manifest.started_at == pytest.approx(BASE_NS / 1e9 + 0.001)


def test_read_trace_meta_of_garbage_is_empty(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"deviceProperties": [oops], "traceEvents": []}')
    assert read_trace_meta(bad) == TraceMeta()
