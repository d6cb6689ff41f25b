"""Fuzzed bytes: every byte-level mutation (truncate, flip, insert, splice) of a small valid input
gives a result or a project error (TorchscopeError), never another exception, a hang (a deadline
per example) or runaway memory (the process's peak RSS, checked after each reader's examples).

Derandomized (``derandomize=True``): CI runs the same examples every time; max_examples is kept
moderate so that the whole file takes seconds.
"""
from __future__ import annotations

import gzip
import json
import os
import pickle
import resource
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.data.snapshot import load_memory_timeline_raw, load_snapshot
from app.data.trace import load_trace
from app.data.trace_memory import load_memory_timeline_raw as load_trace_memory_timeline
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout
from profiler_agent.runformat.errors import TorchscopeError
from profiler_agent.runformat.reader import read_jsonl, read_manifest

FUZZ = pytest.mark.fault("fuzzed bytes")
# FUZZ_EXAMPLES=2000 hunts with that many random (not derandomized) examples per reader.
_HUNT = os.environ.get("FUZZ_EXAMPLES")
SETTINGS = settings(max_examples=int(_HUNT or 100), deadline=3000, derandomize=not _HUNT, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
RSS_GROWTH_MIB = 400  # inputs are a few KiB: a reader that needs more than this amplifies something

TRACE = {
    "schemaVersion": 1,
    "distributedInfo": {"rank": 0, "world_size": 1},
    "deviceProperties": [{"id": 0, "name": "GPU", "totalGlobalMem": 1 << 30}],
    "traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 10.0, "dur": 100.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 20.0, "dur": 30.0,
         "args": {"External id": 5, "Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"],
                  "Sequence number": 1, "Fwd thread id": 0}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 30.0, "dur": 10.0,
         "args": {"correlation": 9, "device": 0, "stream": 7, "External id": 5}},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 25.0,
         "args": {"Device Type": 1, "Device Id": 0, "Addr": 1234, "Bytes": 512, "Total Allocated": 512,
                  "Total Reserved": 2048}},
        {"ph": "s", "id": 9, "cat": "ac2g", "name": "launch", "pid": 1, "tid": 1, "ts": 21.0},
        {"ph": "f", "id": 9, "cat": "ac2g", "name": "launch", "pid": 0, "tid": 7, "ts": 30.0, "bp": "e"},
        {"ph": "C", "name": "mem", "pid": 1, "ts": 40.0, "args": {"allocated": 7}},
    ],
    "traceName": "t",
    "baseTimeNanoseconds": 1_700_000_000_000_000_000,
}


@st.composite
def mutated(draw: st.DrawFn, base: bytes) -> bytes:
    """``base`` with one to three byte-level mutations."""
    data = bytearray(base)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["truncate", "flip", "insert", "splice", "delete"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "truncate":
            del data[at:]
        elif kind == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16) | st.sampled_from(
                [b"{", b"}", b"[", b"]", b",", b'"', b"\\", b"-1e999", b"null", b"NaN", b"\xff", b"[" * 200]))
        elif kind == "splice" and data:
            start = draw(st.integers(0, len(base) - 1))
            data[at:at] = base[start:start + draw(st.integers(1, 64))]
        elif kind == "delete":
            del data[at:at + draw(st.integers(1, 32))]
    return bytes(data)


@contextmanager
def bounded_rss() -> Iterator[None]:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    yield
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024
    assert grown < RSS_GROWTH_MIB, f"peak RSS grew by {grown} MiB while reading fuzzed inputs of a few KiB"


def _result_or_project_error(read: Callable[[], object]) -> None:
    try:
        read()
    except TorchscopeError as e:
        assert str(e)  # a message, naming the file (checked by the readers' own tests)


PLAIN_TRACE = json.dumps(TRACE).encode()
GZIP_TRACE = gzip.compress(PLAIN_TRACE)


def _read_trace(tmp: Path, data: bytes, name: str) -> None:
    p = tmp / name
    p.write_bytes(data)

    def read() -> None:
        t = load_trace(p, cache_dir=tmp / "cache", use_cache=False)
        for table in (t.events, t.memory, t.flows, t.counters, t.threads):
            assert table is not None

    _result_or_project_error(read)


@FUZZ
def test_the_trace_reader_on_fuzzed_json(tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("fuzz-trace")

    @SETTINGS
    @given(mutated(PLAIN_TRACE))
    def check(data: bytes) -> None:
        _read_trace(tmp, data, "t.pt.trace.json")

    with bounded_rss():
        check()


@FUZZ
def test_the_trace_reader_on_fuzzed_gzip(tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("fuzz-trace-gz")

    @SETTINGS
    @given(mutated(GZIP_TRACE) | mutated(PLAIN_TRACE).map(gzip.compress))
    def check(data: bytes) -> None:
        _read_trace(tmp, data, "t.pt.trace.json.gz")

    with bounded_rss():
        check()


METRICS = b"".join(json.dumps(r).encode() + b"\n" for r in (
    {"step": 0, "time": 0.1, "rank": 0, "loss": 2.5, "lr": 0.01, "step_time_s": 0.05},
    {"step": 1, "time": 0.2, "rank": 0, "loss": 2.1, "lr": 0.01, "step_time_s": 0.04},
    {"step": 2, "time": 0.3, "rank": 0, "loss": 1.9, "lr": 0.01, "step_time_s": 0.05, "grad_norm": 1.5},
))


@FUZZ
def test_the_metrics_reader_on_fuzzed_lines(tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("fuzz-metrics")
    p = tmp / layout.METRICS

    @SETTINGS
    @given(mutated(METRICS))
    def check(data: bytes) -> None:
        p.write_bytes(data)
        read = read_jsonl(p)
        assert all(isinstance(r, dict) for r in read.records)

    with bounded_rss():
        check()


@FUZZ
def test_the_manifest_reader_on_fuzzed_run_json(tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("fuzz-manifest")
    run_dir, _ = rf.create_run(tmp, "fuzz", command=("python", "train.py"), config={"lr": 0.01, "bs": [1, 2]},
                               tags=("a",))
    manifest = run_dir / layout.MANIFEST
    base = manifest.read_bytes()

    @SETTINGS
    @given(mutated(base))
    def check(data: bytes) -> None:
        manifest.write_bytes(data)
        _result_or_project_error(lambda: read_manifest(run_dir))

    with bounded_rss():
        check()


SNAPSHOT = pickle.dumps({
    "segments": [{"device": 0, "address": 1 << 20, "total_size": 2 << 20, "segment_type": "large",
                  "blocks": [{"size": 1 << 20, "state": "active_allocated", "frames": [
                      {"filename": "train.py", "line": 3, "name": "forward"}]}]}],
    "device_traces": [[{"action": "alloc", "addr": 1 << 20, "size": 1 << 20, "stream": 0, "time_us": 5,
                        "frames": []}]],
}, protocol=4)


@FUZZ
def test_the_snapshot_reader_on_fuzzed_pickles(tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("fuzz-snapshot")
    p = tmp / "s.snapshot.pickle"

    @SETTINGS
    @given(mutated(SNAPSHOT))
    def check(data: bytes) -> None:
        p.write_bytes(data)
        _result_or_project_error(lambda: load_snapshot(p))

    with bounded_rss():
        check()


TIMELINE = json.dumps([[-1, 1, 4096, 0], [1_000, 2, 512, 4], [2_000, 3, 0, 6], [3_000, 4, -512, 4],
                       [4_000, 2, 64, None]]).encode()


@FUZZ
@pytest.mark.parametrize("gz", [False, True], ids=["json", "gzip"])
def test_the_memory_timeline_readers_on_fuzzed_records(tmp_path_factory: pytest.TempPathFactory, gz: bool) -> None:
    tmp = tmp_path_factory.mktemp("fuzz-timeline")
    p = tmp / "w.1.memory_timeline.raw.json.gz"
    base = gzip.compress(TIMELINE) if gz else TIMELINE

    @SETTINGS
    @given(mutated(base))
    def check(data: bytes) -> None:
        p.write_bytes(data)
        _result_or_project_error(lambda: load_memory_timeline_raw(p))
        _result_or_project_error(lambda: load_trace_memory_timeline(p))

    with bounded_rss():
        check()


@FUZZ
def test_fuzz_regressions_of_the_snapshot_reader(tmp_path: Path) -> None:
    """What fuzzing found: a FRAME longer than memory (OverflowError), and a LONG_BINPUT naming
    memo index 778 million (the C unpickler allocated and cleared 6 GB, for 30 s)."""
    from app.data.snapshot import CorruptFileError

    frame = SNAPSHOT[:2] + b"\x95" + b"\x00" * 7 + b"\x80" + SNAPSHOT[11:]
    memo = pickle.PROTO + b"\x04" + b"]" + b"r" + (778_000_000).to_bytes(4, "little") + b"."
    for name, data in (("frame", frame), ("memo", memo)):
        p = tmp_path / f"{name}.pickle"
        p.write_bytes(data)
        with bounded_rss():
            try:
                load_snapshot(p)
            except CorruptFileError as e:
                assert p.name in str(e)
