"""Trace events whose fields are nested thousands deep: found without recursion and cut (data layer).

msgspec decodes recursively and raises RecursionError on JSON nested about a thousand levels
deep (``"args": {"a": {"a": ...}}``, 100k levels, in one event). The parser's decode catches it
and calls :func:`drop_deep_values`, which walks the bytes with a loop (no recursion), replaces
each field value of an event nested deeper than :data:`MAX_NESTING` levels with ``{}`` or ``[]``
and counts the events changed; the event keeps its other fields, and the parser says how many
events lost such a field. Only that rare path pays for the walk.
"""
from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["MAX_NESTING", "drop_deep_values", "value_end"]

MAX_NESTING = 64  # levels below an event's field; Kineto's deepest (shapes of tensor lists) is 3
_TOKEN = re.compile(rb'["\[\]{}]')
_STRING_REST = re.compile(rb'(?:[^"\\]|\\.)*"', re.DOTALL)
_OPEN = (0x5B, 0x7B)  # "[", "{"


def _tokens(buf: bytes | bytearray | memoryview, pos: int) -> Iterator[tuple[int, int]]:
    """(position, byte) of each bracket outside strings from ``pos`` on; a string left open ends it."""
    search, skip = _TOKEN.search, _STRING_REST.match
    while True:
        m = search(buf, pos)
        if m is None:
            return
        p = m.start()
        c = buf[p]
        if c == 0x22:  # '"': jump over the string
            s = skip(buf, p + 1)
            if s is None:
                return
            pos = s.end()
            continue
        yield p, c
        pos = p + 1


def drop_deep_values(data: bytes | bytearray | memoryview) -> tuple[bytes, int]:
    """``data`` (a JSON array of events) with every value of an event's field (or element of a
    non-object element) nested more than MAX_NESTING levels replaced by ``{}``/``[]``, and the
    number of elements changed. Values left open at the end are kept (the text is truncated there)."""
    raw = bytes(data)
    cuts: list[tuple[int, int, bytes]] = []
    changed_at: set[int] = set()
    depth = 0
    value_start = element_start = -1
    deepest = 0
    for p, c in _tokens(raw, 0):
        if c in _OPEN:
            depth += 1
            if depth == 2:
                element_start = p
            elif depth == 3:
                value_start, deepest = p, 3
            elif depth > deepest:
                deepest = depth
        else:
            if depth == 3 and deepest - 2 > MAX_NESTING:
                cuts.append((value_start, p + 1, b"{}" if raw[value_start] == 0x7B else b"[]"))
                changed_at.add(element_start)
            depth -= 1
    if not cuts:
        return raw, 0
    parts: list[bytes] = []
    last = 0
    for a, b, repl in cuts:
        parts += [raw[last:a], repl]
        last = b
    parts.append(raw[last:])
    return b"".join(parts), len(changed_at)


def value_end(buf: bytes | bytearray | memoryview, pos: int) -> int | None:
    """The index just after the JSON object or array that opens at ``pos``, found without recursion;
    None when it does not close in ``buf``."""
    depth = 0
    for p, c in _tokens(buf, pos):
        depth += 1 if c in _OPEN else -1
        if depth == 0:
            return p + 1
    return None
