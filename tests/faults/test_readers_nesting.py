"""Hostile JSON nesting in traces: a field nested 100k deep in one event (RecursionError before) is
dropped with a warning naming the file; the event and every other event are kept."""
from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from app.data.trace import load_trace
from app.data.trace_head import read_trace_meta
from app.data.trace_nesting import MAX_NESTING, drop_deep_values, value_end
from app.errors import TraceError

DEEP = 100_000
DEEP_OBJECT = b'{"a":' * DEEP + b"1" + b"}" * DEEP
DEEP_LIST = b"[" * DEEP + b"]" * DEEP


def _event(name: str, ts: int, args: bytes = b"{}", ph: str = "X") -> bytes:
    return (f'{{"ph": "{ph}", "name": "{name}", "pid": 1, "tid": 1, "ts": {ts}, "dur": 1, "args": '.encode()
            + args + b"}")


def _trace(tmp_path: Path, name: str, events: list[bytes], before: bytes = b"", after: bytes = b"",
           gz: bool = False) -> Path:
    text = b'{' + before + b'"traceEvents": [' + b", ".join(events) + b"]" + after + b"}"
    p = tmp_path / name
    p.write_bytes(gzip.compress(text, 1) if gz else text)
    return p


def _load(p: Path, tmp_path: Path) -> tuple[list[str], list[str]]:
    t = load_trace(p, cache_dir=tmp_path / "cache")
    return list(t.events["name"].astype(str)), t.warnings


@pytest.mark.fault("hostile JSON nesting")
@pytest.mark.parametrize("args", [DEEP_OBJECT, DEEP_LIST, b'{"Input Dims": ' + DEEP_LIST + b', "External id": 7}'],
                         ids=["object", "list", "beside kept fields"])
def test_a_deeply_nested_field_is_dropped_and_the_events_are_kept(tmp_path: Path, args: bytes) -> None:
    p = _trace(tmp_path, "t.json", [_event("a", 1), _event("deep", 2, args), _event("c", 3)])
    names, warnings = _load(p, tmp_path)
    assert names == ["a", "deep", "c"]
    assert any(str(p) in w and f"more than {MAX_NESTING} levels deep" in w for w in warnings), warnings


@pytest.mark.fault("hostile JSON nesting")
def test_nesting_longer_than_a_parse_piece_in_a_gzip_trace(tmp_path: Path) -> None:
    deep = 400_000  # 2.4 MB of nesting: longer than one piece (2 MB) of the streaming parser
    args = b'{"a":' * deep + b"1" + b"}" * deep
    p = _trace(tmp_path, "t.pt.trace.json.gz", [_event(f"e{i}", i) for i in range(3)] + [_event("deep", 9, args)]
               + [_event("z", 10)], gz=True)
    names, warnings = _load(p, tmp_path)
    assert names == ["e0", "e1", "e2", "deep", "z"]
    assert any("nested more than" in w for w in warnings)


@pytest.mark.fault("hostile JSON nesting")
def test_nesting_in_a_counter_an_element_and_around_the_events(tmp_path: Path) -> None:
    p = _trace(tmp_path, "c.json", [_event("cnt", 1, b'{"v": 1, "x": ' + DEEP_OBJECT + b"}", ph="C"), _event("b", 2)])
    names, _ = _load(p, tmp_path)
    assert names == ["b"]
    p = tmp_path / "element.json"
    p.write_bytes(b'{"traceEvents": [' + _event("a", 1) + b", " + DEEP_LIST + b", " + _event("b", 2) + b"]}")
    names, warnings = _load(p, tmp_path)
    assert names == ["a", "b"] and warnings
    for before, after in ((b'"deviceProperties": ' + DEEP_LIST + b", ", b""), (b"", b', "x": ' + DEEP_OBJECT)):
        p = _trace(tmp_path, "around.json", [_event("a", 1)], before=before, after=after)
        try:
            names, warnings = _load(p, tmp_path)
        except TraceError as e:  # a clear error naming the file is also fine
            assert str(p) in str(e)
        else:
            assert names == ["a"]
        assert read_trace_meta(p).rank is None


@pytest.mark.fault("hostile JSON nesting")
def test_a_file_that_is_only_deep_nesting_is_a_trace_error(tmp_path: Path) -> None:
    for name, text in (("list.json", DEEP_LIST), ("obj.json", DEEP_OBJECT), ("open.json", b"[" * DEEP)):
        p = tmp_path / name
        p.write_bytes(text)
        with pytest.raises(TraceError, match=name.replace(".", r"\.")):
            load_trace(p, cache_dir=tmp_path / "cache")


@pytest.mark.fault("hostile JSON nesting")
def test_the_walk_finds_ends_and_cuts_without_recursion() -> None:
    value = b'{"a": "}{[", "b": [1, {"c": 2}], "e": "\\"]"}'
    assert value_end(value + b" tail", 0) == len(value)
    assert value_end(b"[[[", 0) is None
    flat, n = drop_deep_values(b'[{"a": 1, "b": ' + DEEP_LIST + b'}, {"s": "[[[[", "c": [1]}]')
    assert flat == b'[{"a": 1, "b": []}, {"s": "[[[[", "c": [1]}]' and n == 1
    assert drop_deep_values(b'[{"a": [[[1]]]}]') == (b'[{"a": [[[1]]]}]', 0)
