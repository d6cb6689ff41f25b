"""The parser's slow path (app.data.trace_scan.scan): why and where a walk over the events array stops."""
from __future__ import annotations

import pytest

from app.data.trace_scan import ScanEnd, scan


def _walk(text: bytes) -> tuple[ScanEnd, int, list[bytes], list[bytes], str]:
    buf = bytearray(text)
    sc = scan(buf, 1)
    return sc.how, sc.stop, [bytes(buf[a:b]).strip() for a, b in sc.objects], [bytes(buf[p:p + 1]) for p in sc.others], sc.error


def test_a_closed_array_ends_at_its_bracket() -> None:
    how, stop, objects, others, _ = _walk(b'[{"a": 1}, 5, {"b": [2]}] , "x": 1}')
    assert how is ScanEnd.END and stop == 24
    assert objects == [b'{"a": 1}', b'{"b": [2]}'] and others == [b"5"]


def test_an_empty_array_ends_at_once() -> None:
    assert _walk(b"[ ]")[:2] == (ScanEnd.END, 2)


@pytest.mark.parametrize(("text", "stop", "whole"), [
    (b'[{"a": 1}, {"b": 2', 11, [b'{"a": 1}']),  # the second event goes on in the next piece
    (b'[{"a": 1}, {"b": 2}', 11, [b'{"a": 1}']),  # whole, but no "," or "]" yet: read again with the next piece
    (b'[{"a": 1},   ', 10, [b'{"a": 1}']),
])
def test_bytes_that_stop_mid_array_are_truncated_at_the_first_byte_not_read(
        text: bytes, stop: int, whole: list[bytes]) -> None:
    how, got_stop, objects, _, _ = _walk(text)
    assert how is ScanEnd.TRUNCATED and got_stop == stop and objects == whole


def test_a_syntax_error_is_invalid_at_its_byte_with_a_reason() -> None:
    how, stop, objects, _, error = _walk(b'[{"a": 1} {"b": 2}]')
    assert how is ScanEnd.INVALID and stop == 10 and objects == [b'{"a": 1}']
    assert error == "expected ',' or ']' after an event"
    how, stop, _, _, error = _walk(b'[{"a": 1}, {"b": tru}]')
    assert how is ScanEnd.INVALID and stop > 11 and error and "byte" not in error


def test_scan_ends_are_plain_strings_for_messages() -> None:
    assert [str(e) for e in ScanEnd] == ["end", "truncated", "invalid"]
