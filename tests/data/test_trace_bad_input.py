"""Bad trace input never gives a traceback: a TraceError naming the file, or events plus warnings."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from app.data import trace_cache, trace_parse
from app.data.trace import load_trace
from app.errors import TraceError


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(trace_cache.CACHE_ENV, str(tmp_path / "cache"))


def _event(i: int, **kw: object) -> dict:
    e = {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 7}", "pid": 1, "tid": 1, "ts": 10.0 * i, "dur": 5.0,
         "args": {"External id": i, "Input Dims": [[2, 3]], "Input type": ["float"]}}
    e.update(kw)
    return e


def _doc(n: int = 200) -> dict:
    return {"schemaVersion": 1, "distributedInfo": {"rank": 2},
            "traceEvents": [_event(i) for i in range(n)], "traceName": "x"}


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_truncated_json_recovers_events_before_the_cut(tmp_path: Path) -> None:
    text = json.dumps(_doc(), indent=2).encode()
    cut = text.index(b'"aten::op3"', len(text) // 2)  # mid-event
    t = load_trace(_write(tmp_path / "t.json", text[:cut]))
    (msg,) = t.warnings
    n = len(t.events)
    assert 0 < n < 200 and t.rank == 2
    assert f"recovered {n:,} events before byte" in msg and "ends mid-event" in msg
    assert list(t.events["name"].astype(str)) == [f"aten::op{i % 7}" for i in range(n)]


def test_truncated_gzip_recovers_what_was_written(tmp_path: Path) -> None:
    data = gzip.compress(json.dumps(_doc(5000)).encode())
    t = load_trace(_write(tmp_path / "t.json.gz", data[: len(data) * 2 // 3]))
    assert 0 < len(t.events) < 5000
    assert any("gzip stream is truncated" in w for w in t.warnings)
    assert any("recovered" in w for w in t.warnings)


def test_corrupt_gzip_keeps_what_decompressed(tmp_path: Path) -> None:
    doc = _doc(20000)
    for i, e in enumerate(doc["traceEvents"]):
        e["name"] = f"op{(i * 2654435761) % 10**9:x}"  # hardly compressible, so the file has many blocks
    data = bytearray(gzip.compress(json.dumps(doc).encode()))
    data[len(data) // 2: len(data) // 2 + 64] = b"\x00" * 64
    t = load_trace(_write(tmp_path / "t.json.gz", bytes(data)))
    assert 0 < len(t.events) < 20000
    assert any("gzip data is corrupt" in w for w in t.warnings)


def test_small_pieces_cut_correctly_and_recover(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace_parse, "PIECE_BYTES", 4096)
    doc = _doc(3000)
    doc["traceEvents"][10]["name"] = 'tricky "}, {" name'
    text = json.dumps(doc).encode()
    t = load_trace(_write(tmp_path / "t.json", text), use_cache=False)
    assert len(t.events) == 3000 and t.warnings == []
    assert t.events["name"].astype(str).iloc[10] == 'tricky "}, {" name'
    t2 = load_trace(_write(tmp_path / "u.json", text[: len(text) // 2]), use_cache=False)
    assert 0 < len(t2.events) < 3000 and "recovered" in t2.warnings[-1]


@pytest.mark.parametrize("content, expected", [
    (b"", "is empty"),
    (b"hello world", "not a Chrome/Kineto trace"),
    (b'{"schemaVersion": 1, "foo": []}', "not a profiler trace: no traceEvents"),
    (b'"just a string"', "not a Chrome/Kineto trace"),
])
def test_unreadable_files_raise_trace_error_naming_the_file(tmp_path: Path, content: bytes, expected: str) -> None:
    f = _write(tmp_path / "bad.json", content)
    with pytest.raises(TraceError, match=expected) as info:
        load_trace(f)
    assert str(f) in str(info.value)


def test_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such trace file"):
        load_trace(tmp_path / "nope.json")


def test_odd_events_are_kept_or_skipped_with_warnings(tmp_path: Path) -> None:
    events = [
        _event(0),
        {"ph": "X", "name": "no ts", "dur": 3},  # missing ts: skipped
        {"ph": "X", "cat": "mystery_cat", "name": "no dur", "ts": 5},  # missing dur: 0
        _event(3, dur=-4.0),  # negative: 0
        _event(4, ts="40.5", dur="2"),  # strings: coerced
        _event(2),  # out of order
        {"ph": "X", "cat": "cpu_op", "name": "zero", "pid": 1, "tid": 1, "ts": 20.0, "dur": 0},
        42, None, "junk",  # not events
        {"ph": "Q", "name": "unknown phase"},
    ]
    t = load_trace(_write(tmp_path / "t.json", json.dumps({"traceEvents": events}).encode()))
    ev = t.events
    assert "no ts" not in set(ev["name"].astype(str))
    assert (ev["dur_us"] >= 0).all() and ev["ts_us"].is_monotonic_increasing
    assert ev.loc[ev["name"] == "no dur", "dur_us"].item() == 0
    assert ev.loc[ev["ts_us"] == 40.5, "dur_us"].item() == 2.0
    text = " ".join(t.warnings)
    assert "without a timestamp" in text and "counted as 0" in text and "read leniently" in text


def test_non_utf8_names_are_replaced(tmp_path: Path) -> None:
    text = json.dumps({"traceEvents": [_event(0), _event(1, name="XNAMEX")]}).encode()
    t = load_trace(_write(tmp_path / "t.json", text.replace(b"XNAMEX", b"bad\xff\xfename")))
    assert "bad\ufffd\ufffdname" in set(t.events["name"].astype(str))
    assert any("UTF-8" in w for w in t.warnings)


def test_top_level_array_and_empty_events(tmp_path: Path) -> None:
    t = load_trace(_write(tmp_path / "a.json", json.dumps([_event(0), _event(1)]).encode()))
    assert len(t.events) == 2 and t.warnings == []
    e = load_trace(_write(tmp_path / "e.json", b'{"traceEvents": [], "x": 1}'))
    assert e.events.empty and e.meta == {"x": 1}


def test_metadata_after_events_and_overlapping_events(tmp_path: Path) -> None:
    events = [_event(0, dur=100.0), _event(1, ts=50.0, dur=100.0)]  # overlap without nesting
    doc = {"traceEvents": events, "deviceProperties": [{"id": 0}, {"id": 1}], "distributedInfo": {"rank": 5}}
    t = load_trace(_write(tmp_path / "t.json", json.dumps(doc).encode()))
    assert t.rank == 5 and t.meta["deviceProperties"] == [{"id": 0}, {"id": 1}] and len(t.events) == 2


def test_an_event_larger_than_a_piece_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace_parse, "PIECE_BYTES", 4096)
    doc = _doc(50)
    doc["traceEvents"][20]["args"]["Call stack"] = "x" * 10000  # one event bigger than two pieces
    t = load_trace(_write(tmp_path / "big.json", json.dumps(doc).encode()), use_cache=False)
    assert len(t.events) == 50 and t.warnings == []
