"""The trace parser's slow path: the events array walked one JSON value at a time (data layer).

Used only when the fast path (``trace_parse``) cannot cut or close a piece: a non-object element
(``5``), a syntax error, a file that ends mid-event, or a single event longer than a piece. msgspec
decodes one value and says where the trailing bytes start, so the walk knows exactly why it
stopped and at which byte; the objects it found are then decoded together as usual.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass

import msgspec

from app.data.trace_decode import UNTYPED
from app.data.trace_nesting import value_end

__all__ = ["NOT_SPACE", "Scan", "ScanEnd", "scan", "err_at", "err_text"]

NOT_SPACE = re.compile(rb"\S")
_AT_BYTE = re.compile(r"\s*\(byte (\d+)\)")
_COMMA, _CLOSE, _OPEN_OBJECT = 0x2C, 0x5D, 0x7B  # ",", "]", "{"


class ScanEnd(enum.StrEnum):
    """Why a walk over the events array stopped."""

    END = "end"  # at the "]" that closes the array
    TRUNCATED = "truncated"  # the bytes ran out (the last element may go on in the next piece)
    INVALID = "invalid"  # a syntax error


@dataclass
class Scan:
    """What a walk found: the whole elements, and where and why it stopped."""

    objects: list[tuple[int, int]]  # (start, end) in buf of each whole object element
    others: list[int]  # start in buf of each whole element that is not an object
    stop: int  # the "]" (END), the first byte not read (TRUNCATED) or the error (INVALID)
    how: ScanEnd
    error: str = ""


def err_at(msg: str) -> int | None:
    """The 0-based offset of the byte msgspec's message names, or None. msgspec 0.19–0.23 reports
    the offending byte itself, except for trailing characters, where it reports the byte after it."""
    m = _AT_BYTE.search(msg)
    if m is None:
        return None
    return int(m.group(1)) - ("trailing characters" in msg)


def err_text(msg: str) -> str:
    """msgspec's error message without its byte offset and prefix (the caller names the byte)."""
    return _AT_BYTE.sub("", msg).replace("JSON is malformed: ", "")


def scan(buf: bytearray, pos: int) -> Scan:
    """Walk the elements of the events array from ``pos`` (just after ``[`` or a ``,``)."""
    mv = memoryview(buf)
    objects: list[tuple[int, int]] = []
    others: list[int] = []
    want_value, first, last = True, pos == 1, pos
    while True:
        m = NOT_SPACE.search(buf, pos)
        if m is None:  # the bytes stop: re-read the last element with the next piece (it may go on)
            if not want_value:
                if others and others[-1] == last:
                    others.pop()
                else:
                    objects.pop()
                pos = last
            return Scan(objects, others, pos, ScanEnd.TRUNCATED)
        p = m.start()
        c = buf[p]
        if not want_value:
            if c == _COMMA:
                pos, want_value = p + 1, True
                continue
            if c == _CLOSE:
                return Scan(objects, others, p, ScanEnd.END)
            return Scan(objects, others, p, ScanEnd.INVALID, "expected ',' or ']' after an event")
        if c == _CLOSE and first:  # an empty array
            return Scan(objects, others, p, ScanEnd.END)
        try:
            UNTYPED.decode(mv[p:])
        except RecursionError:  # nested thousands deep: find its end without recursion
            deep_end = value_end(mv, p)
            if deep_end is None:
                return Scan(objects, others, p, ScanEnd.TRUNCATED)
            end = deep_end
        except msgspec.DecodeError as e:
            msg = str(e)
            if "UTF-8" in msg and mv.obj is buf:
                # Find the structure in a copy whose invalid bytes are "?" one for one (same offsets);
                # the objects are still decoded from ``buf`` (bad bytes become U+FFFD, with a warning).
                mv = memoryview(bytes(buf).decode("utf-8", "surrogateescape").encode("utf-8", "replace"))
                continue
            if "truncated" in msg:
                return Scan(objects, others, p, ScanEnd.TRUNCATED)
            at = err_at(msg)
            if at is not None and p + at >= len(mv):
                # An error at the last byte is the bytes stopping mid-value (``"ts": 12.`` or ``-``): msgspec
                # calls it an invalid number, but the value may go on in the next piece, or the file was cut.
                return Scan(objects, others, p, ScanEnd.TRUNCATED)
            if at is None or "trailing characters" not in msg:
                return Scan(objects, others, p + (at or 0), ScanEnd.INVALID, err_text(msg))
            end = p + at
        else:  # one value up to the end of the bytes: no "]" follows it yet
            return Scan(objects, others, p, ScanEnd.TRUNCATED)
        if c == _OPEN_OBJECT:
            objects.append((p, end))
        else:
            others.append(p)
        pos, last, want_value, first = end, p, False, False
