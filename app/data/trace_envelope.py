"""The JSON around a trace's events array: where the events start, the fields before and after them,
and what a file without events is instead (data layer, used by ``trace_parse``).

A Kineto/Chrome trace is either ``{"field": ..., "traceEvents": [...], "field": ...}`` or a bare
``[...]`` of events; torch's ``export_memory_timeline`` writes look-alike JSON that is not a trace.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypeAlias

import msgspec

from app.data.trace_decode import UNTYPED
from app.data.trace_scan import NOT_SPACE
from app.errors import TraceError

__all__ = ["TraceFields", "MEMORY_TIMELINE", "find_start", "meta_from", "tail_meta", "tail_meta_at", "no_events_message"]

# A trace's own top-level fields (``deviceProperties``, ``distributedInfo``, ``baseTimeNanoseconds``, ...):
# Any, because they hold whatever JSON the profiler that wrote the trace put there; readers check each
# field they use (``isinstance``) before trusting it.
TraceFields: TypeAlias = dict[str, Any]
MEMORY_TIMELINE = ("is a memory timeline (export_memory_timeline), not a trace: open it in the Memory tab "
                   "of a run, or record with torchscope run --memory-timeline")
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_QUOTE, _CLOSE_OBJECT, _COMMA = 0x22, 0x7D, 0x2C  # '"', "}", ","


def find_start(buf: bytes) -> tuple[int, bool] | None:
    """Return (offset of the first event byte, top-level is an object) or None if not yet known.

    Raises ValueError when ``buf`` starts with neither an object nor an array, and TraceError
    (with MEMORY_TIMELINE, to follow the file's path) for a memory timeline's list of lists.
    """
    s = buf.lstrip(b"\xef\xbb\xbf \t\r\n")
    skipped = len(buf) - len(s)
    if s[:1] == b"[":
        inner = s[1:].lstrip()
        if not inner:
            return None  # the first element is not read yet
        if inner[:1] == b"[":  # a list of lists: export_memory_timeline's rows, not events
            raise TraceError(MEMORY_TIMELINE)
        return skipped + 1, False
    if s[:1] != b"{":
        raise ValueError("it does not start with a JSON object or array")
    m = _EVENTS_KEY.search(buf)
    return (m.end(), True) if m else None


def meta_from(header: bytes) -> TraceFields:
    """Decode the object's fields before ``traceEvents`` (``{ "a": 1, `` → ``{"a": 1}``).

    The values are whatever JSON the writer put there (hence Any); {} when they do not decode.
    """
    text = header.rstrip().rstrip(b",")
    try:
        doc = UNTYPED.decode(text + b"}")
    except (msgspec.DecodeError, RecursionError):  # RecursionError: a field nested thousands deep
        return {}
    return doc if isinstance(doc, dict) else {}


def tail_meta(tail: bytes, is_object: bool) -> TraceFields | None:
    """Validate what follows the events array; return its fields, or None if it is not a valid end."""
    t = tail.strip()
    if not is_object:
        return {} if t == b"" else None
    if t == b"}":
        return {}
    if not t.startswith(b","):
        return None
    try:
        doc = UNTYPED.decode(b"{" + t[1:])
    except (msgspec.DecodeError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def tail_meta_at(buf: bytearray, pos: int, is_object: bool) -> TraceFields | None:
    """``tail_meta(buf[pos:])``, without copying the tail when its first bytes already rule it out
    (a candidate deep inside the events, e.g. an empty shape list, is followed by ``, [`` or ``]``)."""
    first = NOT_SPACE.search(buf, pos)
    if first is None:
        return None if is_object else {}
    if not is_object:
        return None
    c = buf[first.start()]
    if c == _CLOSE_OBJECT:  # valid only as the very end
        return {} if NOT_SPACE.search(buf, first.start() + 1) is None else None
    if c != _COMMA:
        return None
    key = NOT_SPACE.search(buf, first.start() + 1)
    if key is None or buf[key.start()] not in (_QUOTE, _CLOSE_OBJECT):  # a field name, or "}"
        return None
    return tail_meta(bytes(buf[pos:]), is_object)


def no_events_message(path: Path, buf: bytes) -> str:
    """Why ``buf`` (the whole of a file in which no events array was found) is not a trace."""
    try:
        doc = UNTYPED.decode(buf)
    except RecursionError:
        return f"{path}: not a Chrome/Kineto trace: no traceEvents array found (JSON nested too deeply)"
    except msgspec.DecodeError as e:
        if not buf.strip():
            return f"{path}: the file is empty"
        return f"{path}: not a Chrome/Kineto trace: no traceEvents array found ({e})"
    if isinstance(doc, dict):
        if {"times", "sizes"} <= set(doc):  # a memory timeline written as an object
            return f"{path} {MEMORY_TIMELINE}"
        return (f"{path}: not a profiler trace: no traceEvents (a Chrome/Kineto trace is a JSON object with a "
                f"'traceEvents' list; this one has the keys {sorted(doc)[:8]})")
    if isinstance(doc, list) and doc and isinstance(doc[0], list):
        return f"{path} {MEMORY_TIMELINE}"
    return f"{path}: not a Chrome/Kineto trace: expected a JSON object with 'traceEvents', got {type(doc).__name__}"
