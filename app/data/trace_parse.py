"""Streaming Kineto/Chrome trace parser: bytes → columnar Arrow tables (data layer).

The file is read in bounded pieces (gzip decompressed on the fly); the ``traceEvents`` array is cut
at event boundaries and each piece is decoded with msgspec into small typed structs, turned into
Arrow columns and dropped. Peak memory is therefore the output columns plus one piece, not the
whole JSON object tree (see docs/trace-engine.md for the measurements behind this choice).

A cut is only accepted when the piece decodes as a JSON array: a cut inside a string or inside a
nested object can never decode, so validating by decoding is exact. A piece that cannot be cut or
closed (a file that ends mid-event, a syntax error, an element that is not an object) is read
element by element instead (``_scan``), which keeps every whole event and says what was wrong and
at which byte (docs/trace-engine.md, "Bad input").
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

from app.data.trace_columns import (
    COUNTER_SCHEMA,
    EVENT_SCHEMA,
    FLOW_SCHEMA,
    MEMORY_SCHEMA,
    THREAD_SCHEMA,
    columns_from_events,
    counters_table,
)
from app.data.trace_decode import KINETO_FIELDS, UNTYPED, NotEvents, Undecodable, counters_from, decode_array
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
MEMORY_TIMELINE = ("is a memory timeline (export_memory_timeline), not a trace: open it in the Memory tab "
                   "of a run, or record with torchscope run --memory-timeline")


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
                    at = done - len(raw) + i  # noted first: the reader may stop at the bytes yielded below
                    warnings.append(f"{path}: the gzip data is corrupt near compressed byte {at:,} ({e}); "
                                    "reading what was decompressed before it")
                    if out:
                        yield b"".join(out)
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
        self.bad_ts = 0  # events skipped because their ts is not a number
        self.not_objects: list[int] = []  # absolute byte of each element of traceEvents that is not an object

    def add(self, evs: list[Any], buf: bytearray, end: int) -> None:
        self.n_events += len(evs)
        self.bad_ts += getattr(evs, "bad_ts", 0)
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
    """The events of ``buf[:end] + "]"``, or None when that is not a JSON array (a wrong cut).
    NotEvents (a non-object element) propagates: the piece is then read element by element."""
    with _closed(buf, end) as data:
        try:
            return decode_array(data, warnings, path)
        except NotEvents:
            raise
        except Undecodable:
            return None


# ---------------------------------------------------------------- the slow path: element by element
#
# Used only when the fast path cannot cut or close a piece: a non-object element (``5``), a syntax
# error, a file that ends mid-event, or a single event longer than a piece. It walks the array one
# JSON value at a time (msgspec decodes one value and says where the trailing bytes start), so it
# knows exactly why it stopped and at which byte; the objects it found are decoded together as usual.

_AT_BYTE = re.compile(r"\s*\(byte (\d+)\)")


def _err_at(msg: str) -> int | None:
    """The 0-based offset of the byte msgspec's message names, or None. msgspec 0.19–0.23 reports
    the offending byte itself, except for trailing characters, where it reports the byte after it."""
    m = _AT_BYTE.search(msg)
    if m is None:
        return None
    return int(m.group(1)) - ("trailing characters" in msg)


def _err_text(msg: str) -> str:
    return _AT_BYTE.sub("", msg).replace("JSON is malformed: ", "")


@dataclass
class _Scan:
    objects: list[tuple[int, int]]  # (start, end) in buf of each whole object element
    others: list[int]  # start in buf of each whole element that is not an object
    stop: int  # where it stopped: the "]" ("end"), the first byte not read ("truncated") or the error ("invalid")
    how: str  # "end" | "truncated" | "invalid"
    error: str = ""


def _scan(buf: bytearray, pos: int) -> _Scan:
    """Walk the elements of the events array from ``pos`` (just after ``[`` or a ``,``)."""
    mv = memoryview(buf)
    objects: list[tuple[int, int]] = []
    others: list[int] = []
    want_value, first, last = True, pos == 1, pos
    while True:
        m = _NOT_SPACE.search(buf, pos)
        if m is None:  # the bytes stop: re-read the last element with the next piece (it may go on)
            if not want_value:
                if others and others[-1] == last:
                    others.pop()
                else:
                    objects.pop()
                pos = last
            return _Scan(objects, others, pos, "truncated")
        p = m.start()
        c = buf[p]
        if not want_value:
            if c == 0x2C:  # ","
                pos, want_value = p + 1, True
                continue
            if c == 0x5D:  # "]"
                return _Scan(objects, others, p, "end")
            return _Scan(objects, others, p, "invalid", "expected ',' or ']' after an event")
        if c == 0x5D and first:  # an empty array
            return _Scan(objects, others, p, "end")
        try:
            UNTYPED.decode(mv[p:])
        except msgspec.DecodeError as e:
            msg = str(e)
            if "UTF-8" in msg and mv.obj is buf:
                # Find the structure in a copy whose invalid bytes are "?" one for one (same offsets);
                # the objects are still decoded from ``buf`` (bad bytes become U+FFFD, with a warning).
                mv = memoryview(bytes(buf).decode("utf-8", "surrogateescape").encode("utf-8", "replace"))
                continue
            if "truncated" in msg:
                return _Scan(objects, others, p, "truncated")
            at = _err_at(msg)
            if at is None or "trailing characters" not in msg:
                return _Scan(objects, others, p + (at or 0), "invalid", _err_text(msg))
            end = p + at
        else:  # one value up to the end of the bytes: no "]" follows it yet
            return _Scan(objects, others, p, "truncated")
        if c == 0x7B:  # "{"
            objects.append((p, end))
        else:
            others.append(p)
        pos, last, want_value, first = end, p, False, False


def _add_scanned(sink: _Sink, buf: bytearray, sc: _Scan, base: int, warnings: list[str], path: Path) -> None:
    """Decode the whole objects the scan found, as one array, and note the other elements."""
    sink.not_objects += [base + p - 1 for p in sc.others]
    if not sc.objects:
        return
    mv = memoryview(buf)
    arr = bytearray(b"[") + b",".join(mv[a:b] for a, b in sc.objects) + b"]"
    with _closed(arr, len(arr) - 1) as data:
        evs = decode_array(data, warnings, path)  # whole objects: decodes (typed, or leniently)
    sink.add(evs, arr, len(arr) - 1)


def _line_col(path: Path, at: int) -> tuple[int, int]:
    """Line and column (1-based, in bytes) of decompressed byte ``at`` (read again: errors only)."""
    line, col_start, done = 1, 0, 0
    for piece in _read_pieces(path, [], None):
        chunk = piece[: max(0, at - done)]
        n = chunk.count(b"\n")
        if n:
            line += n
            col_start = done + chunk.rindex(b"\n") + 1
        done += len(piece)
        if done >= at:
            break
    return line, at - col_start + 1


def _invalid(path: Path, at: int, error: str) -> str:
    line, col = _line_col(path, at)
    return f"{path}: invalid JSON at byte {at:,} (line {line}, column {col}): {error}"


def _find_start(buf: bytes) -> tuple[int, bool] | None:
    """Return (offset of the first event byte, top-level is an object) or None if not yet known."""
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
            except TraceError as e:
                raise TraceError(f"{path} {e}") from None
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
        if cut is not None:
            limit = PIECE_BYTES
            sink.add(evs, buf, cut)
            del evs
            nxt = buf.index(b"{", cut)
            parts, have, base = [bytes(buf[nxt:])], len(buf) - nxt, base + nxt - 1
            continue
        sc = _scan(buf, 1)  # the slow path: why can it not be cut?
        if sc.how == "truncated" and sc.stop == 1 and have < MAX_EVENT_BYTES:
            limit = have + max(PIECE_BYTES, _GROW_BYTES)  # one huge event: read on before calling it corrupt
            continue
        limit = PIECE_BYTES
        _add_scanned(sink, buf, sc, base, out.warnings, path)
        if sc.how == "truncated" and sc.stop > 1:  # whole elements read; the rest goes with the next piece
            nxt = sc.stop
            parts, have, base = [bytes(buf[nxt:])], len(buf) - nxt, base + nxt - 1
            continue
        if sc.how == "end":  # the array ended in the middle of the stream: the object's last fields follow
            rest = bytes(buf[sc.stop + 1:]) + b"".join(pieces)
            _end_fields(out, sink, path, rest, start[1], base + sc.stop - 1)
            return _done(out, sink, path)
        _close(pieces)
        if sc.how == "truncated":  # nothing whole in MAX_EVENT_BYTES
            out.warnings.append(f"{path}: the event at byte {base:,} is not complete after "
                                f"{MAX_EVENT_BYTES >> 20} MB; the file is treated as corrupt there "
                                f"({sink.n_events:,} events read before it)")
        else:
            _syntax_error(out, sink, path, base + sc.stop - 1, sc.error)
        return _done(out, sink, path)
    if start is None:
        if not head.strip() and out.warnings:
            raise TraceError(f"{path}: no trace data could be read: {out.warnings[-1]}")
        raise TraceError(_no_events_message(path, head))
    buf = _joined(parts)
    parts = []
    try:
        finished = _finish(buf, start[1], out.warnings, path)
    except NotEvents:
        finished = None
    if finished is not None:
        evs, tail, end = finished
        sink.add(evs, buf, end)
        out.meta.update(tail)
        return _done(out, sink, path)
    sc = _scan(buf, 1)
    _add_scanned(sink, buf, sc, base, out.warnings, path)
    if sc.how == "truncated":
        out.warnings.append(_recovered(path, sink.n_events, base + sc.stop - 1, "the file ends mid-event"))
    elif sc.how == "invalid":
        _syntax_error(out, sink, path, base + sc.stop - 1, sc.error)
    else:
        _end_fields(out, sink, path, bytes(buf[sc.stop + 1:]), start[1], base + sc.stop - 1)
    return _done(out, sink, path)


def _syntax_error(out: ParsedTrace, sink: _Sink, path: Path, at: int, error: str) -> None:
    """A syntax error: an error when no event could be read before it, else a warning."""
    msg = _invalid(path, at, error)
    if sink.n_events == 0 and not sink.not_objects:
        raise TraceError(f"{msg}; no event could be read")
    out.warnings.append(f"{msg}; kept the {sink.n_events:,} events before it, the rest of the file is not read")


def _end_fields(out: ParsedTrace, sink: _Sink, path: Path, tail: bytes, is_object: bool, close_at: int) -> None:
    """Check and keep what follows the events array (``close_at``: the byte of its ``]``)."""
    meta = _tail_meta(tail, is_object)
    if meta is not None:
        out.meta.update(meta)
        return
    head = b'{"traceEvents":[]' if is_object else b"[]"
    try:
        UNTYPED.decode(head + tail)
    except msgspec.DecodeError as e:
        msg = str(e)
        if "truncated" in msg:
            out.warnings.append(_recovered(path, sink.n_events, close_at + len(tail),
                                           "the file ends in the fields after the events"))
            return
        at = _err_at(msg)
        where = close_at + at - (len(head) - 1) if at is not None else close_at
        out.warnings.append(f"{_invalid(path, where, _err_text(msg))}"
                            f"; after the events array (all {sink.n_events:,} events kept)")
        return
    out.warnings.append(f"{path}: the fields after the events array could not be read")


def _cut(buf: bytearray, warnings: list[str], path: Path) -> tuple[int | None, list[Any]]:
    """Decode the longest whole-event prefix ending at one of the last boundary candidates."""
    window = max(1, len(buf) - (1 << 20))
    cands = [m.start() + 1 for m in _BOUNDARY.finditer(buf, window)]
    if not cands:
        cands = [m.start() + 1 for m in _BOUNDARY.finditer(buf, 1)]
    for end in reversed(cands[-_MAX_BACKOFF:]):
        try:
            evs = _try(buf, end, warnings, path)
        except NotEvents:  # an element that is not an object: read this piece element by element
            return None, []
        if evs is not None:
            return end, evs
    return None, []


def _recovered(path: Path, n: int, at: int, why: str) -> str:
    return f"{path}: recovered {n:,} events before byte {at:,}; {why}"


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
        if {"times", "sizes"} <= set(doc):  # a memory timeline written as an object
            return f"{path} {MEMORY_TIMELINE}"
        return (f"{path}: not a profiler trace: no traceEvents (a Chrome/Kineto trace is a JSON object with a "
                f"'traceEvents' list; this one has the keys {sorted(doc)[:8]})")
    if isinstance(doc, list) and doc and isinstance(doc[0], list):
        return f"{path} {MEMORY_TIMELINE}"
    return f"{path}: not a Chrome/Kineto trace: expected a JSON object with 'traceEvents', got {type(doc).__name__}"


def _done(out: ParsedTrace, sink: _Sink, path: Path) -> ParsedTrace:
    schemas = {"events": EVENT_SCHEMA, "memory": MEMORY_SCHEMA, "flows": FLOW_SCHEMA, "threads": THREAD_SCHEMA}
    for kind, schema in schemas.items():
        parts = sink.parts[kind]
        # Chunks stay separate (no combine_chunks copy); unified dictionaries make one categorical.
        table = pa.concat_tables(parts).unify_dictionaries() if parts else schema.empty_table()
        sink.parts[kind] = []
        setattr(out, kind, table)
    out.counters = counters_table(sink.counter_rows) if sink.counter_rows else COUNTER_SCHEMA.empty_table()
    out.n_events = sink.n_events
    if sink.bad_ts:
        out.warnings.append(f"{path}: skipped {sink.bad_ts:,} event{'s' if sink.bad_ts > 1 else ''} "
                            "with a non-numeric 'ts'")
    if sink.not_objects:
        n = len(sink.not_objects)
        at = ", ".join(f"{b:,}" for b in sink.not_objects[:5]) + (", …" if n > 5 else "")
        out.warnings.append(f"{path}: skipped {n:,} entr{'ies that are' if n > 1 else 'y that is'} not an "
                            f"event object at byte{'s' if n > 1 else ''} {at}")
    return out
