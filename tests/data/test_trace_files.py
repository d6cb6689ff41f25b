"""app.data.trace_files: which files are traces (by content) and which folders hold runs of them."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from app.data import tbprofiler, trace_files
from profiler_agent import runformat as rf

CPU_TRACE = Path("traces") / "cpu_only" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
RANK0 = Path("traces") / "two_ranks" / "sampled_rank-0.json.gz"


def _copy(shared_data: Path, rel: Path, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shared_data / rel, dest)
    return dest


def test_real_traces_are_traces_whatever_their_names(shared_data, tmp_path):
    assert trace_files.trace_file_problem(_copy(shared_data, CPU_TRACE, tmp_path / "worker.json.gz")) is None
    text = gzip.decompress((shared_data / RANK0).read_bytes())
    assert len(text) > trace_files.FULL_CHECK_BYTES  # judged by its head only
    plain = tmp_path / "plain.json"
    plain.write_bytes(text)
    assert trace_files.is_trace_file(plain)
    named_gz = tmp_path / "not-compressed.json.gz"  # gzip is recognised by its magic, as the parser does
    named_gz.write_bytes(b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2}]}')
    assert trace_files.is_trace_file(named_gz)


def test_a_trace_cut_short_is_still_a_trace(shared_data, tmp_path):
    text = gzip.decompress((shared_data / RANK0).read_bytes())
    cut = tmp_path / "killed.json.gz"
    cut.write_bytes(gzip.compress(text[:400_000]))  # under FULL_CHECK_BYTES: decoded whole, ends early
    assert trace_files.trace_file_problem(cut) is None
    half = tmp_path / "half.json.gz"
    half.write_bytes(gzip.compress(text)[:30_000])  # the gzip stream itself is cut
    assert trace_files.trace_file_problem(half) is None


def test_chrome_array_form_is_a_trace(tmp_path):
    f = tmp_path / "chrome.json"
    f.write_text(json.dumps([{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]))
    assert trace_files.is_trace_file(f)


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("foo.json", b'{"foo": 1}', 'without a "traceEvents" list (keys: foo)'),
        ("bad.json", b'{"traceEvents": [{"name": "x", "ph": "X", ts: 1}]}', "invalid JSON"),
        ("empty.json", b"", "the file is empty"),
        ("empty.json.gz", gzip.compress(b"", mtime=0), "the file is empty"),
        ("spaces.json", b"  \n ", "the file is empty"),
        ("mem.json", b"[[-1, 1, 4096, 0], [10, 2, 512, 3]]", "memory timeline"),
        ("list.json", b"[1, 2, 3]", "not a list of trace events"),
        ("none.json", b"[]", "empty JSON array"),
        ("text.json", b"hello world", "not JSON"),
        ("broken.json.gz", b"\x1f\x8b\x08\x00garbage-that-is-not-deflate", "corrupt gzip"),
    ],
)
def test_what_is_not_a_trace_and_why(tmp_path, name, content, expected):
    f = tmp_path / name
    f.write_bytes(content)
    problem = trace_files.trace_file_problem(f)
    assert problem is not None and expected in problem
    assert not trace_files.is_trace_file(f)


def test_memory_timeline_by_name_and_other_suffixes(shared_data, tmp_path):
    mt = tmp_path / "w.123.memory_timeline.raw.json.gz"
    shutil.copyfile(shared_data / "memory" / "memory_timeline.raw.gz", mt)
    assert "memory timeline" in trace_files.trace_file_problem(mt)
    txt = tmp_path / "notes.txt"
    txt.write_text('{"traceEvents": []}')
    assert "expected *.json or *.json.gz" in trace_files.trace_file_problem(txt)


def test_a_large_file_is_judged_by_its_head(tmp_path):
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"rows": ["x" * 100] * 20_000}))  # 2 MB of JSON that is not a trace
    assert "first" in trace_files.trace_file_problem(big)
    header_first = tmp_path / "kineto.json"  # Kineto's header, events further than the sniffed head
    header_first.write_text(json.dumps({"schemaVersion": 1, "pad": "x" * 2_000_000, "traceEvents": []}))
    assert trace_files.is_trace_file(header_first)


def test_verdict_follows_the_file_when_it_changes(tmp_path):
    f = tmp_path / "t.json"
    f.write_text('{"foo": 1}')
    assert not trace_files.is_trace_file(f)
    f.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2}], "x": 12345}')
    assert trace_files.is_trace_file(f)


def _log_folder(shared_data: Path, tmp_path: Path, make_run) -> Path:
    """Runs named as the shared data names them (not tensorboard_trace_handler's pattern), plus
    folders that are not runs of traces."""
    tb = tmp_path / "logs"
    _copy(shared_data, RANK0, tb / "two" / "sampled_rank-0.json.gz")
    _copy(shared_data, CPU_TRACE, tb / "cpu" / CPU_TRACE.name)
    (tb / "notes").mkdir()
    (tb / "notes" / "config.json").write_text('{"lr": 0.1}')
    (tb / "memory").mkdir()
    (tb / "memory" / "mt.json").write_text("[[-1, 1, 4096, 0]]")
    (tb / "empty").mkdir()
    _copy(shared_data, CPU_TRACE, tb / ".hidden" / "t.json.gz")
    run = make_run("native")
    shutil.move(str(run), tb / "native")
    return tb


def test_find_trace_run_folders_by_content(shared_data, tmp_path, make_run):
    tb = _log_folder(shared_data, tmp_path, make_run)
    assert [p.name for p in trace_files.find_trace_run_folders(tb)] == ["cpu", "two"]
    assert tbprofiler.find_tb_runs(tb) == trace_files.find_trace_run_folders(tb)
    assert trace_files.find_trace_run_folders(tb / "native") == []  # a run is not a log folder
    assert trace_files.find_trace_run_folders(tb / "missing") == []
    scan = trace_files.scan_trace_folder(tb / "memory")
    assert scan.traces == () and "memory timeline" in scan.skipped[0].reason


def test_store_problems_say_why_a_folder_was_skipped(shared_data, tmp_path, make_run):
    tb = _log_folder(shared_data, tmp_path, make_run)
    listing = rf.list_runs(tb)
    problems = tbprofiler.explain_store_problems(listing.problems, listing.not_runs, tbprofiler.find_tb_runs(tb))
    by_folder = {p.split(": ", 1)[0]: p for p in problems}
    assert set(by_folder) == {str(tb / n) for n in ("empty", "memory", "notes")}  # cpu, two: mirrored runs
    assert "no trace files" in by_folder[str(tb / "empty")]
    assert "is a profiler trace" in by_folder[str(tb / "notes")] and "config.json" in by_folder[str(tb / "notes")]
    assert "memory timeline" in by_folder[str(tb / "memory")]
    assert all("not a run folder" in p and p.endswith("skipped") for p in problems)
