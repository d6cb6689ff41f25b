"""Trace ingest leaves the process as it found it: garbage collector and Arrow's default memory
pool are restored after a parse, also when the parse fails; pieces are cut without copies."""
from __future__ import annotations

import gc
import json
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from app.data import trace, trace_cache, trace_envelope, trace_parse
from app.data.event_scan import PURE_PYTHON_ENV, ScannedEvents
from app.data.trace import load_trace, system_memory_pool
from app.errors import TraceError


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(trace_cache.CACHE_ENV, str(tmp_path / "cache"))


def _trace(path: Path, n: int = 50) -> Path:
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i % 7}", "pid": 1, "tid": 2, "ts": float(i), "dur": 1.0}
              for i in range(n)]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


@pytest.mark.parametrize("enabled", [True, False])
def test_gc_state_is_restored_after_a_parse(tmp_path: Path, enabled: bool) -> None:
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        seen = []
        trace_parse.parse_trace_file(_trace(tmp_path / "t.json"), progress=lambda d, t: seen.append(gc.isenabled()))
        assert seen and not any(seen)  # paused during the pass
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


@pytest.mark.parametrize("enabled", [True, False])
def test_gc_state_is_restored_when_the_parse_fails(tmp_path: Path, enabled: bool) -> None:
    was = gc.isenabled()
    bad = tmp_path / "bad.json"
    bad.write_text("hello world")
    try:
        (gc.enable if enabled else gc.disable)()
        with pytest.raises(TraceError):
            trace_parse.parse_trace_file(bad)
        assert gc.isenabled() is enabled

        def boom(done: int, total: int) -> None:
            raise KeyboardInterrupt  # an interruption in the middle of the pass

        with pytest.raises(KeyboardInterrupt):
            trace_parse.parse_trace_file(_trace(tmp_path / "t.json"), progress=boom)
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


@pytest.mark.parametrize("path", ["_ingest_into", "_ingest_whole_into"])  # streamed (trace_spill), whole
def test_memory_pool_is_switched_during_ingest_and_restored(path: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    before = pa.default_memory_pool().backend_name
    inside = []
    real = getattr(trace, path)

    def spy(*a, **k):  # type: ignore[no-untyped-def]
        inside.append(pa.default_memory_pool().backend_name)
        return real(*a, **k)

    monkeypatch.setattr(trace, path, spy)
    monkeypatch.setattr(trace, "IN_MEMORY_BYTES", -1 if path == "_ingest_into" else 1 << 30)
    t = load_trace(_trace(tmp_path / "t.json"))
    assert inside == ["system"] and pa.default_memory_pool().backend_name == before
    assert len(t.events) == 50
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": 5}')
    with pytest.raises(TraceError):
        load_trace(bad)
    assert pa.default_memory_pool().backend_name == before


def test_memory_pool_is_restored_by_the_last_of_several_threads() -> None:
    before = pa.default_memory_pool().backend_name
    entered, release = threading.Barrier(3), threading.Event()

    def work() -> None:
        with system_memory_pool():
            entered.wait()
            release.wait()

    threads = [threading.Thread(target=work) for _ in range(2)]
    for th in threads:
        th.start()
    entered.wait()
    assert pa.default_memory_pool().backend_name == "system"
    release.set()
    for th in threads:
        th.join()
    assert pa.default_memory_pool().backend_name == before
    with pytest.raises(RuntimeError), system_memory_pool():
        raise RuntimeError("inside")
    assert pa.default_memory_pool().backend_name == before


def _starts(evs: Any) -> list[float]:
    """The ts of decoded events, or of the complete events the accelerator read into tables."""
    if isinstance(evs, ScannedEvents):
        return evs.tables["events"]["ts_us"].to_pylist()
    return [e.ts for e in evs]


@pytest.mark.parametrize("pure_python", ["1", "0"])
def test_cut_writes_the_closing_bracket_in_place_and_puts_the_byte_back(
        pure_python: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PURE_PYTHON_ENV, pure_python)
    buf = bytearray(b'[{"ph": "X", "ts": 1}, {"ph": "X", "ts": 2}, {"ph"')
    end = buf.index(b"}") + 1
    evs = trace_parse._try(buf, end, [], Path("x"))
    assert _starts(evs) == [1.0]
    assert bytes(buf) == b'[{"ph": "X", "ts": 1}, {"ph": "X", "ts": 2}, {"ph"'
    cut, evs = trace_parse._cut(buf, [], Path("x"))
    assert _starts(evs) == [1.0, 2.0] and buf[cut - 1:cut] == b"}"
    assert trace_parse._try(buf, len(buf), [], Path("x")) is None  # the end of the buffer: copied, not written


@pytest.mark.parametrize("tail", [
    b"", b"  \n", b"}", b" } \n", b"}}", b"} x", b', "a": 1}', b',\n  "traceName": "x"\n}\n', b", }", b", [1]]",
    b"]", b", 5}", b',"a":', b", {}", b'  , "deviceProperties": [{"id": 0}]}',
])
@pytest.mark.parametrize("is_object", [True, False])
def test_tail_check_without_copy_agrees_with_the_full_check(tail: bytes, is_object: bool) -> None:
    buf = bytearray(b'[{"ph": "X"}]' + tail)
    pos = len(buf) - len(tail)
    assert trace_envelope.tail_meta_at(buf, pos, is_object) == trace_envelope.tail_meta(tail, is_object)


def test_a_damaged_cache_file_is_read_again_from_the_trace(tmp_path: Path) -> None:
    f = _trace(tmp_path / "t.json")
    first = load_trace(f)
    assert first.cache_entry is not None
    events_file = first.cache_entry / f"events{trace_cache.SUFFIX}"
    events_file.write_bytes(events_file.read_bytes()[:100])  # a torn write / a damaged disk
    again = load_trace(f)
    assert again.from_cache  # the metadata is intact: the tables are read lazily ...
    assert again.events.equals(first.events)  # ... and the damaged one is parsed again, not trusted


def test_trace_run_folders(tmp_path: Path) -> None:
    from app.data.trace import list_trace_paths, trace_run_folders

    logs = tmp_path / "logs"
    for run in ("b", "a"):
        (logs / run).mkdir(parents=True)
        _trace(logs / run / "w0.pt.trace.json")
    (logs / ".hidden").mkdir()
    _trace(logs / ".hidden" / "x.json")
    (logs / "empty").mkdir()
    assert trace_run_folders(logs) == [logs / "a", logs / "b"]
    assert list_trace_paths(logs) == [logs / "a" / "w0.pt.trace.json", logs / "b" / "w0.pt.trace.json"]
    assert trace_run_folders(logs / "a") == []  # a folder of trace files is one run
    assert trace_run_folders(logs / "a" / "w0.pt.trace.json") == []
    assert trace_run_folders(tmp_path / "missing") == []
    _trace(logs / "top.json")
    assert trace_run_folders(logs) == []  # traces at the top: the sub-folders are not read
