"""Streaming Kineto/Chrome trace parser: bytes → columnar Arrow tables (data layer).

The file is read in bounded pieces (gzip decompressed on the fly); the ``traceEvents`` array is cut
at event boundaries and each piece is decoded with msgspec into small typed structs, turned into
Arrow columns and dropped. Peak memory is therefore the output columns plus one piece, not the
whole JSON object tree (see docs/trace-engine.md for the measurements behind this choice).

A cut is only accepted when the piece decodes as a JSON array: a cut inside a string or inside a
nested object can never decode, so validating by decoding is exact. The same rule recovers the
events of a truncated file (a job killed while writing): the longest prefix that decodes is kept
and a warning says where the file ended.
"""
from __future__ import annotations

import gc
import re
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa

from app.data.trace_columns import (COUNTER_SCHEMA, EVENT_SCHEMA, FLOW_SCHEMA, MEMORY_SCHEMA, THREAD_SCHEMA,
                                    columns_from_events, counters_table)
from app.data.trace_decode import KINETO_FIELDS, UNTYPED, Undecodable, counters_from, decode_array
from app.errors import TraceError

__all__ = ["ParsedTrace", "parse_trace_file", "PIECE_BYTES", "KINETO_FIELDS"]

Progress = Callable[[int, int], None]

# Decompressed bytes decoded at a time. Smaller pieces mean fewer decoded objects alive at once, so
# fewer pages for the process to fault in: 2 MB halved the page faults of the 20 MB benchmark
# trace against 4 MB (17k → 9k) and 8 MB gave a higher peak; below 2 MB nothing improved.
PIECE_BYTES = 2 << 20
MAX_EVENT_BYTES = 32 << 20  # one event (a piece that cannot be cut) may grow to this before it is corrupt
_GROW_BYTES = 8 << 20  # read this much more each time a piece cannot be cut (each try re-decodes it)
_READ_BYTES = 1 << 20  # compressed bytes read at a time
_MAX_BACKOFF = 64  # boundary candidates tried before a piece is declared undecodable

# `}` , `{` between two events (any whitespace); `}` `]` at the end of the array.
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_ARRAY_END = re.compile(rb"\}\s*\]|\[\s*\]")
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_NOT_SPACE = re.compile(rb"\S")


@dataclass
class ParsedTrace:
    """What one pass over a trace file gives: metadata, warnings and Arrow tables by kind."""

    meta: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    events: pa.Table | None = None
    memory: pa.Table | None = None
    flows: pa.Table | None = None
    counters: pa.Table | None = None
    threads: pa.Table | None = None
    n_events: int = 0


# ---------------------------------------------------------------- reading bytes


def _read_pieces(path: Path, warnings: list[str], progress: Progress | None) -> Iterator[bytes]:
    """Yield the decompressed bytes of ``path`` in pieces; a broken gzip ends the stream early."""
    total = path.stat().st_size
    done = 0
    with path.open("rb") as f:
        head = f.read(2)
        f.seek(0)
        gz = head == b"\x1f\x8b"
        dec = zlib.decompressobj(47) if gz else None
        while True:
            raw = f.read(_READ_BYTES)
            done += len(raw)
            if progress is not None:
                progress(done, total)
            if not raw:
                if dec is not None and not dec.eof:
                    warnings.append(
                        f"{path}: the gzip stream is truncated at compressed byte {done:,}; "
                        "reading what was written before the cut"
                    )
                return
            if dec is None:
                yield raw
                continue
            out = []
            # Small slices, so that a corrupt block loses only the bytes after it.
            for i in range(0, len(raw), 1 << 16):
                try:
                    out.append(dec.decompress(raw[i:i + (1 << 16)]))
                    while dec.eof and dec.unused_data:  # concatenated gzip members
                        rest = dec.unused_data
                        dec = zlib.decompressobj(47)
                        out.append(dec.decompress(rest))
                except zlib.error as e:
                    if out:
                        yield b"".join(out)
                    at = done - len(raw) + i
                    warnings.append(f"{path}: the gzip data is corrupt near compressed byte {at:,} ({e}); "
                                    "reading what was decompressed before it")
                    return
            data = b"".join(out)
            if data:
                yield data

# ---------------------------------------------------------------- the pass over the file
#
# The undecoded events are kept as one bytearray per piece, ``buf``, whose byte 0 is ``[``: the
# events array of the piece is ``buf[:end] + "]"``. That bracket is written over ``buf[end]`` (the
# separator after an event's ``}``) for the decode and put back afterwards, so a piece's bytes are
# copied once (when the read blocks are joined), not once per slice or concatenation.


class _Sink:
    """Collects the Arrow tables of each decoded piece and counts events."""

    def __init__(self) -> None:
        self.parts: dict[str, list[pa.Table]] = {"events": [], "memory": [], "flows": [], "threads": []}
        self.counter_rows: list[dict[str, Any]] = []
        self.n_events = 0

    def add(self, evs: list[Any], buf: bytearray, end: int) -> None:
        self.n_events += len(evs)
        tables, has_counters = columns_from_events(evs)
        for kind, table in tables.items():
            if table.num_rows:
                self.parts[kind].append(table)
        if has_counters:  # ``C`` events keep arbitrary keys: their piece is decoded again, untyped
            with _closed(buf, end) as data:
                self.counter_rows.extend(counters_from(data))


def _joined(parts: list[Any]) -> bytearray:
    """``[`` followed by the undecoded bytes, in one new buffer."""
    return bytearray().join([b"[", *parts])


@contextmanager
def _closed(buf: bytearray, end: int) -> Iterator[memoryview | bytes]:
    """The JSON array ``buf[:end] + "]"`` (``buf[0]`` is ``[``), without copying ``buf``."""
    if end >= len(buf):
        yield bytes(buf[:end]) + b"]"
        return
    saved = buf[end]
    buf[end] = 0x5D  # "]"
    try:
        yield memoryview(buf)[:end + 1]
    finally:
        buf[end] = saved


def _try(buf: bytearray, end: int, warnings: list[str], path: Path) -> list[Any] | None:
    with _closed(buf, end) as data:
        try:
            return decode_array(data, warnings, path)
        except Undecodable:
            return None


def _longest_prefix(buf: bytearray, warnings: list[str], path: Path) -> tuple[int, list[Any]]:
    """Return (end, events) for the longest run of whole events at the start of ``buf``
    (end 1, no events, when not even the first event is whole).

    Decodability is monotone in the cut position (every cut before a corruption decodes, none
    after it), so a binary search over boundary candidates finds it in a few decodes.
    """
    cands = [m.start() + 1 for m in _BOUNDARY.finditer(buf, 1)]
    cands += [m.start() + 1 for m in _ARRAY_END.finditer(buf, 1) if buf[m.start()] == 0x7D]  # "}"
    cands = sorted(set(cands))
    lo, hi, best, best_evs = 0, len(cands) - 1, 1, []
    while lo <= hi:
        mid = (lo + hi) // 2
        evs = _try(buf, cands[mid], warnings, path)
        if evs is None:
            hi = mid - 1
        else:
            best, best_evs, lo = cands[mid], evs, mid + 1
    return best, best_evs


def _find_start(buf: bytes) -> tuple[int, bool] | None:
    """Return (offset of the first event byte, top-level is an object) or None if not yet known."""
    s = buf.lstrip(b"\xef\xbb\xbf \t\r\n")
    skipped = len(buf) - len(s)
    if s[:1] == b"[":
        return skipped + 1, False
    if s[:1] != b"{":
        raise ValueError("it does not start with a JSON object or array")
    m = _EVENTS_KEY.search(buf)
    return (m.end(), True) if m else None


def _meta_from(header: bytes) -> dict[str, Any]:
    """Decode the object's fields before ``traceEvents`` (``{ "a": 1, `` → ``{"a": 1}``)."""
    text = header.rstrip().rstrip(b",")
    try:
        doc = UNTYPED.decode(text + b"}")
    except msgspec.DecodeError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _tail_meta(tail: bytes, is_object: bool) -> dict[str, Any] | None:
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
    except msgspec.DecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def _tail_meta_at(buf: bytearray, pos: int, is_object: bool) -> dict[str, Any] | None:
    """``_tail_meta(buf[pos:])``, without copying the tail when its first bytes already rule it out
    (a candidate deep inside the events, e.g. an empty shape list, is followed by ``, [`` or ``]``)."""
    first = _NOT_SPACE.search(buf, pos)
    if first is None:
        return None if is_object else {}
    if not is_object:
        return None
    c = buf[first.start()]
    if c == 0x7D:  # "}": valid only as the very end
        return {} if _NOT_SPACE.search(buf, first.start() + 1) is None else None
    if c != 0x2C:  # ","
        return None
    key = _NOT_SPACE.search(buf, first.start() + 1)
    if key is None or buf[key.start()] not in (0x22, 0x7D):  # a field name, or "}"
        return None
    return _tail_meta(bytes(buf[pos:]), is_object)


_TAIL_WINDOW = 1 << 16  # where the end of the events array is looked for first


def _finish(buf: bytearray, is_object: bool, warnings: list[str],
            path: Path) -> tuple[list[Any], dict[str, Any], int] | None:
    """At end of input: the events array must close, followed by the object's last fields.

    Returns (events, trailing fields, end of the events in ``buf``), or None. The array's end is
    one of the last ``_MAX_BACKOFF`` candidates (``}]`` or ``[]``); they are looked for in the
    last 64 KB first, as scanning a whole piece with the pattern costs more than decoding it.
    """
    first = _NOT_SPACE.search(buf, 1)
    if first is not None and buf[first.start()] == 0x5D:  # no events at all: `"traceEvents": [ ]`
        meta = _tail_meta(bytes(buf[first.start() + 1:]), is_object)
        return ([], meta, 1) if meta is not None else None
    for lo in (max(1, len(buf) - _TAIL_WINDOW), 1):
        ends = list(_ARRAY_END.finditer(buf, lo))
        for m in reversed(ends[-_MAX_BACKOFF:]):
            meta = _tail_meta_at(buf, m.end(), is_object)
            if meta is None:
                continue
            if buf[m.start()] == 0x5B:  # empty array: `[ ]`
                if not buf[1:m.start()].strip():
                    return [], meta, 1
                continue
            evs = _try(buf, m.start() + 1, warnings, path)
            if evs is not None:
                return evs, meta, m.start() + 1
        if lo == 1 or len(ends) >= _MAX_BACKOFF:  # the window held every candidate to try
            break
    return None


def parse_trace_file(path: Path, progress: Progress | None = None) -> ParsedTrace:
    """Read ``path`` once and return its tables; raise TraceError when nothing can be recovered."""
    # The pass allocates millions of short-lived objects that hold no reference cycles; the cyclic
    # GC would rescan them again and again (measured: a third of the ingest time at 100 MB).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse(path, progress)
    finally:
        if was_enabled:
            gc.enable()


def _parse(path: Path, progress: Progress | None) -> ParsedTrace:
    out = ParsedTrace()
    sink = _Sink()
    pieces = _read_pieces(path, out.warnings, progress)
    head = b""  # the bytes read before the first event was found
    parts: list[Any] = []  # undecoded event bytes, in order (the first starts at an event's "{")
    have = 0  # their length
    base = 0  # absolute (decompressed) offset of parts[0][0]
    start = None
    limit = PIECE_BYTES
    for piece in pieces:
        if start is None:
            head += piece
            try:
                start = _find_start(head)
            except ValueError as e:
                raise TraceError(f"{path}: not a Chrome/Kineto trace: {e}") from None
            if start is None:
                continue
            off, is_object = start
            if is_object:
                out.meta = _meta_from(head[:off - len(b"[")].rsplit(b'"traceEvents"', 1)[0])
            piece, base, head = head[off:], off, b""
        parts.append(piece)
        have += len(piece)
        if have < limit:
            continue
        buf = _joined(parts)
        parts = [memoryview(buf)[1:]]  # the read blocks are freed; buf holds the bytes now
        cut, evs = _cut(buf, out.warnings, path)
        if cut is None and have < MAX_EVENT_BYTES:
            limit = have + max(PIECE_BYTES, _GROW_BYTES)  # maybe one huge event: read on before calling it corrupt
            continue
        limit = PIECE_BYTES
        if cut is None:
            end, evs = _longest_prefix(buf, out.warnings, path)
            sink.add(evs, buf, end)
            out.warnings.append(_recovered(sink.n_events, base + end - 1, "the file is corrupt after it"))
            _close(pieces)
            return _done(out, sink)
        sink.add(evs, buf, cut)
        del evs
        nxt = buf.index(b"{", cut)
        parts, have, base = [bytes(buf[nxt:])], len(buf) - nxt, base + nxt - 1
    if start is None:
        if not head.strip() and out.warnings:
            raise TraceError(f"{path}: no trace data could be read: {out.warnings[-1]}")
        raise TraceError(_no_events_message(path, head))
    buf = _joined(parts)
    parts = []
    finished = _finish(buf, start[1], out.warnings, path)
    if finished is not None:
        evs, tail, end = finished
        sink.add(evs, buf, end)
        out.meta.update(tail)
    else:
        end, evs = _longest_prefix(buf, out.warnings, path)
        sink.add(evs, buf, end)
        out.warnings.append(_recovered(sink.n_events, base + end - 1, "the file ends mid-event"))
    return _done(out, sink)


def _cut(buf: bytearray, warnings: list[str], path: Path) -> tuple[int | None, list[Any]]:
    """Decode the longest whole-event prefix ending at one of the last boundary candidates."""
    window = max(1, len(buf) - (1 << 20))
    cands = [m.start() + 1 for m in _BOUNDARY.finditer(buf, window)]
    if not cands:
        cands = [m.start() + 1 for m in _BOUNDARY.finditer(buf, 1)]
    for end in reversed(cands[-_MAX_BACKOFF:]):
        evs = _try(buf, end, warnings, path)
        if evs is not None:
            return end, evs
    return None, []


def _recovered(n: int, at: int, why: str) -> str:
    return f"recovered {n:,} events before byte {at:,}; {why}"


def _close(pieces: Iterator[bytes]) -> None:
    close = getattr(pieces, "close", None)
    if close is not None:
        close()


def _no_events_message(path: Path, buf: bytes) -> str:
    try:
        doc = UNTYPED.decode(buf)
    except msgspec.DecodeError as e:
        if not buf.strip():
            return f"{path}: the file is empty"
        return f"{path}: not a Chrome/Kineto trace: no traceEvents array found ({e})"
    if isinstance(doc, dict):
        return f"{path}: not a Chrome/Kineto trace: the JSON object has no 'traceEvents' list (keys: {sorted(doc)[:8]})"
    return f"{path}: not a Chrome/Kineto trace: expected a JSON object with 'traceEvents', got {type(doc).__name__}"


def _done(out: ParsedTrace, sink: _Sink) -> ParsedTrace:
    schemas = {"events": EVENT_SCHEMA, "memory": MEMORY_SCHEMA, "flows": FLOW_SCHEMA, "threads": THREAD_SCHEMA}
    for kind, schema in schemas.items():
        parts = sink.parts[kind]
        # Chunks stay separate (no combine_chunks copy); unified dictionaries make one categorical.
        table = pa.concat_tables(parts).unify_dictionaries() if parts else schema.empty_table()
        sink.parts[kind] = []
        setattr(out, kind, table)
    out.counters = counters_table(sink.counter_rows) if sink.counter_rows else COUNTER_SCHEMA.empty_table()
    out.n_events = sink.n_events
    return out
