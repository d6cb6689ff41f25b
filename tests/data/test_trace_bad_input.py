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


# ---------------------------------------------------------------- bad elements, syntax errors, other formats


def _names(t: object) -> list[str]:
    return sorted(t.events["name"].astype(str))  # type: ignore[attr-defined]


def test_a_non_object_element_is_skipped_and_every_event_kept(tmp_path: Path) -> None:
    head = json.dumps({"traceEvents": [_event(0), _event(1)]})[:-2]  # up to the last event's "}"
    text = (head + ", 5, " + json.dumps(_event(2))[:-1] + "}, null]}").encode()
    f = _write(tmp_path / "t.json", text)
    t = load_trace(f, use_cache=False)
    assert _names(t) == sorted(f"aten::op{i}" for i in range(3))
    (w,) = t.warnings
    at5, atnull = text.index(b", 5, ") + 2, text.index(b"null")
    assert w == f"{f}: skipped 2 entries that are not an event object at bytes {at5:,}, {atnull:,}"


def test_a_non_object_element_in_a_middle_piece(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace_parse, "PIECE_BYTES", 4096)
    events: list[object] = [_event(i) for i in range(600)]
    events.insert(300, [1, 2])
    f = _write(tmp_path / "t.json", json.dumps({"traceEvents": events, "traceName": "x"}).encode())
    t = load_trace(f, use_cache=False)
    assert len(t.events) == 600 and t.meta["traceName"] == "x"
    assert len(t.warnings) == 1 and "skipped 1 entry that is not an event object at byte" in t.warnings[0]
    at = int(t.warnings[0].rsplit(" ", 1)[1].replace(",", ""))
    assert f.read_bytes()[at:at + 6] == b"[1, 2]"


def test_an_event_with_a_non_numeric_ts_is_skipped(tmp_path: Path) -> None:
    events = [_event(0), _event(1, ts="abc", name="bad"), _event(2, ts="25"), _event(3)]
    f = _write(tmp_path / "t.json", json.dumps({"traceEvents": events}).encode())
    t = load_trace(f, use_cache=False)
    assert "bad" not in _names(t) and len(t.events) == 3
    assert sorted(t.events["ts_us"]) == [0.0, 25.0, 30.0]
    assert f"{f}: skipped 1 event with a non-numeric 'ts'" in t.warnings
    assert not any("mid-event" in w for w in t.warnings)


def test_invalid_json_without_any_event_is_an_error_at_its_byte(tmp_path: Path) -> None:
    text = b'{"traceEvents": [\n  {"name": "x", "ph": "X", ts: 1} ]}'
    f = _write(tmp_path / "bad.json", text)
    with pytest.raises(TraceError) as info:
        load_trace(f)
    at = text.index(b"ts:")
    assert str(info.value) == (f"{f}: invalid JSON at byte {at} (line 2, column {at - text.index(b'{', 2) + 3}): "
                               "object keys must be strings; no event could be read")


@pytest.mark.parametrize("piece", [None, 4096])
def test_invalid_json_after_events_keeps_them_with_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             piece: int | None) -> None:
    if piece:
        monkeypatch.setattr(trace_parse, "PIECE_BYTES", piece)
    text = json.dumps({"traceEvents": [_event(i) for i in range(500)]}).encode()
    bad = text.index(b'"name": "aten::op', len(text) * 2 // 3)
    text = text[:bad] + b"name: " + text[bad + len(b'"name": '):]  # unquoted key, file still complete
    f = _write(tmp_path / "t.json", text)
    t = load_trace(f, use_cache=False)
    n = len(t.events)
    assert 300 < n < 500 and _names(t) == sorted(f"aten::op{i % 7}" for i in range(n))
    (w,) = t.warnings
    assert w.startswith(f"{f}: invalid JSON at byte {bad:,} (line 1, column {bad + 1}): object keys must be strings")
    assert f"kept the {n:,} events before it" in w and "mid-event" not in w


def test_invalid_fields_after_the_events(tmp_path: Path) -> None:
    text = json.dumps({"traceEvents": [_event(0), 7]}).encode()[:-1] + b', "x": nope}'
    f = _write(tmp_path / "t.json", text)
    t = load_trace(f, use_cache=False)
    assert len(t.events) == 1
    (w,) = [w for w in t.warnings if "invalid JSON" in w]
    at = int(w.split("at byte ")[1].split(" ")[0])
    # msgspec names the byte where it gave up on a misspelled literal: within the word or just after it
    assert w.startswith(f"{f}: invalid JSON at byte ") and text.index(b"nope") <= at <= text.index(b"nope") + 4
    assert w.endswith("after the events array (all 1 events kept)")


def test_the_truncation_warning_names_the_file_and_the_cut_event(tmp_path: Path) -> None:
    text = json.dumps({"traceEvents": [_event(i) for i in range(50)]}).encode()
    cut = text.index(b'"aten::op3"', len(text) // 2)
    f = _write(tmp_path / "t.json", text[:cut])
    t = load_trace(f, use_cache=False)
    start = text.rindex(b"{", 0, cut)  # the event that was cut starts here
    assert t.warnings == [f"{f}: recovered {len(t.events)} events before byte {start:,}; the file ends mid-event"]


@pytest.mark.parametrize("doc", [
    [[-1, 1, 37888, 7], [1000, 2, 512, 4]],  # export_memory_timeline raw records
    [[0.0, 1.5], [[1, 2], [3, 4]]],  # its [times, sizes] form
    {"times": [0, 1], "sizes": [[1], [2]]},
])
def test_a_memory_timeline_is_named_as_such(tmp_path: Path, doc: object) -> None:
    f = _write(tmp_path / "m.raw.json.gz", gzip.compress(json.dumps(doc).encode()))
    with pytest.raises(TraceError) as info:
        load_trace(f)
    assert str(info.value) == (f"{f} is a memory timeline (export_memory_timeline), not a trace: open it in the "
                               "Memory tab of a run, or record with torchscope run --memory-timeline")


def test_a_document_without_trace_events(tmp_path: Path) -> None:
    f = _write(tmp_path / "x.json", b'{"foo": 1}')
    with pytest.raises(TraceError, match="not a profiler trace: no traceEvents") as info:
        load_trace(f)
    assert str(f) in str(info.value)


def test_traces_without_rank_information_share_rank_0_with_a_warning(tmp_path: Path) -> None:
    from app.data.trace import load_traces

    doc = {"traceEvents": [_event(0)]}
    for name in ("plain.json", "trainer_5.pt.trace.json", "rank3.json"):
        _write(tmp_path / name, json.dumps(doc).encode())
    a, b, c = load_traces(tmp_path)
    assert [t.rank for t in (a, b, c)] == [0, 0, 3] and c.warnings == []
    msg = "2 traces have no rank information and were all given rank 0: plain.json, trainer_5.pt.trace.json"
    assert a.warnings == [f"{a.path}: {msg}"] and b.warnings == [f"{b.path}: {msg}"]
    (tmp_path / "plain.json").unlink()
    assert all(t.warnings == [] for t in load_traces(tmp_path))  # one unranked trace: no collision


def test_non_utf8_names_next_to_a_non_object_element(tmp_path: Path) -> None:
    text = json.dumps({"traceEvents": [_event(0), _event(1, name="XNAMEX"), 5]}).encode()
    f = _write(tmp_path / "t.json", text.replace(b"XNAMEX", b"bad\xffname"))
    t = load_trace(f, use_cache=False)
    assert _names(t) == ["aten::op0", "bad\ufffdname"]
    assert any("UTF-8" in w for w in t.warnings) and not any("invalid JSON" in w for w in t.warnings)
    assert any("skipped 1 entry that is not an event object" in w for w in t.warnings)


def test_an_array_that_ends_in_a_middle_piece(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace_parse, "PIECE_BYTES", 4096)
    doc = {"traceEvents": [_event(i) for i in range(100)] + [5], "deviceProperties": "x" * 20000,
           "distributedInfo": {"rank": 4}}
    t = load_trace(_write(tmp_path / "t.json", json.dumps(doc).encode()), use_cache=False)
    assert len(t.events) == 100 and t.rank == 4 and t.meta["deviceProperties"] == "x" * 20000
    assert len(t.warnings) == 1 and "not an event object" in t.warnings[0]


@pytest.mark.parametrize("tail", [b'"ts": 12.', b'"ts": -', b'"dur": 1e', b'"dur": 1e-', b'"dur": 5.0'])
def test_a_cut_inside_a_number_ends_mid_event(tmp_path: Path, tail: bytes) -> None:
    # msgspec calls ``12.`` at the end of the bytes an invalid number; it is a file cut mid-value.
    text = json.dumps(_doc(50)).encode()
    cut = text.index(b'"ts": ', len(text) // 2)
    t = load_trace(_write(tmp_path / "t.json", text[:cut] + tail), use_cache=False)
    (msg,) = t.warnings
    assert "ends mid-event" in msg and "invalid" not in msg, msg
    assert 0 < len(t.events) < 50


def test_pieces_that_end_inside_a_number_are_read_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every piece size from 4,096 to 4,135 bytes: some piece ends right after a number's "." or "-".
    doc = {"traceEvents": [_event(i, ts=10.25 * i, dur=1.5e-3 if i % 3 else 5.0) for i in range(400)]}
    for e in doc["traceEvents"]:
        e["args"]["offset"] = -2.5
    f = _write(tmp_path / "t.json", json.dumps(doc).encode())
    for piece in range(4096, 4136):
        monkeypatch.setattr(trace_parse, "PIECE_BYTES", piece)
        t = load_trace(f, use_cache=False)
        assert len(t.events) == 400 and t.warnings == [], (piece, t.warnings)
