"""Streaming Kineto/Chrome trace parser: bytes → columnar Arrow tables (data layer).

The file is read in bounded pieces (``trace_pieces``: gzip decompressed on the fly); the
``traceEvents`` array is cut at event boundaries and each piece is decoded with msgspec into small
typed structs, turned into Arrow columns (``trace_columns``) and dropped. Peak memory is therefore
the output columns plus one piece, not the whole JSON object tree (see docs/trace-engine.md for the
measurements behind this choice); with ``spill=True`` the columns themselves are kept compressed
out of memory (``trace_spill``), which is how ``trace.load_trace`` reads into the cache.

A cut is only accepted when the piece decodes as a JSON array: a cut inside a string or inside a
nested object can never decode, so validating by decoding is exact. A piece that cannot be cut or
closed (a file that ends mid-event, a syntax error, an element that is not an object) is read
element by element instead (``trace_scan``), which keeps every whole event and says what was wrong
and at which byte (docs/trace-engine.md, "Bad input"). The JSON around the events array is read by
``trace_envelope``.
"""
from __future__ import annotations

import gc
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa

from app.data.event_scan import ScannedEvents, accelerated, scan_tables
from app.data.trace_columns import COUNTER_SCHEMA, TABLE_SCHEMAS, TABLES, columns_from_events, counters_table
from app.data.trace_decode import (
    KINETO_FIELDS,
    UNTYPED,
    Event,
    NotEvents,
    Undecodable,
    counters_from,
    decode_array,
)
from app.data.trace_envelope import (
    TraceFields,
    find_start,
    meta_from,
    no_events_message,
    tail_meta,
    tail_meta_at,
)
from app.data.trace_kinds import Progress
from app.data.trace_pieces import close_pieces, line_col, read_pieces
from app.data.trace_scan import NOT_SPACE, Scan, ScanEnd, err_at, err_text, scan
from app.data.trace_spill import SpilledTable
from app.errors import TraceError

__all__ = ["ParsedTrace", "parse_trace_file", "parse_trace_part", "join_parts", "PIECE_BYTES", "KINETO_FIELDS"]

# Decompressed bytes decoded at a time. With msgspec, smaller pieces mean fewer decoded objects alive
# at once, so fewer pages for the process to fault in: 2 MB halved the page faults of the 20 MB
# benchmark trace against 4 MB (17k → 9k) and 8 MB gave a higher peak; below 2 MB nothing improved.
# The C accelerator makes no object per field, and its per-piece Arrow work is what larger pieces
# save: 100 MB parse 0.51 s with 2 MB pieces, 0.44 s with 8 MB (in process, median of 4).
PIECE_BYTES = (8 << 20) if accelerated() else (2 << 20)
MAX_EVENT_BYTES = 32 << 20  # one event (a piece that cannot be cut) may grow to this before it is corrupt
_GROW_BYTES = 8 << 20  # read this much more each time a piece cannot be cut (each try re-decodes it)
_MAX_BACKOFF = 64  # boundary candidates tried before a piece is declared undecodable
_TAIL_WINDOW = 1 << 16  # where the end of the events array is looked for first
_CUT_WINDOW = 1 << 20  # where the last event boundaries of a piece are looked for first
_CUT_TAIL = 64 << 10  # ... and within it, the last bytes looked at before the window (_cut)

# `}` , `{` between two events (any whitespace); `}` `]` at the end of the array.
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_ARRAY_END = re.compile(rb"\}\s*\]|\[\s*\]")
_OPEN_ARRAY, _CLOSE_ARRAY = 0x5B, 0x5D  # "[", "]"
# Tables filled piece by piece; counters keep arbitrary keys and are built from rows at the end.
_PIECE_TABLES = tuple(name for name in TABLES if name != "counters")


@dataclass
class ParsedTrace:
    """What one pass over a trace file gives: metadata, warnings and Arrow tables by kind."""

    meta: TraceFields = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    events: pa.Table | None = None
    memory: pa.Table | None = None
    flows: pa.Table | None = None
    counters: pa.Table | None = None
    threads: pa.Table | None = None
    n_events: int = 0
    # With ``spill=True``: events, memory, flows and threads as compressed pieces (the table
    # attributes are then None; counters stay a table).
    spilled: dict[str, SpilledTable] | None = None


# ---------------------------------------------------------------- pieces of the events array
#
# The undecoded events are kept as one bytearray per piece, ``buf``, whose byte 0 is ``[``: the
# events array of the piece is ``buf[:end] + "]"``. That bracket is written over ``buf[end]`` (the
# separator after an event's ``}``) for the decode and put back afterwards, so a piece's bytes are
# copied once (when the read blocks are joined), not once per slice or concatenation.


class _Sink:
    """Collects the Arrow tables of each decoded piece and counts events."""

    def __init__(self, spill: bool = False, emit: Callable[[str, pa.Table], None] | None = None) -> None:
        self.emit = emit  # given: each piece's tables go there instead of being kept (trace_split)
        self.parts: dict[str, list[pa.Table]] = {name: [] for name in _PIECE_TABLES}
        self.spilled = {name: SpilledTable(TABLE_SCHEMAS[name]) for name in _PIECE_TABLES} if spill else None
        self.counter_rows: list[dict[str, Any]] = []  # ``C`` events' fields, as written
        self.n_events = 0
        self.bad_ts = 0  # events skipped because their ts is not a number
        self.not_objects: list[int] = []  # absolute byte of each element of traceEvents that is not an object

    def add(self, evs: list[Event] | ScannedEvents, buf: bytearray, end: int) -> None:
        """Add the events ``evs`` of ``buf[:end]`` (decoded, or read into tables by the accelerator)."""
        self.n_events += len(evs)
        if isinstance(evs, ScannedEvents):
            tables, has_counters = evs.tables, evs.has_counters
        else:
            self.bad_ts += getattr(evs, "bad_ts", 0)
            tables, has_counters = columns_from_events(evs)
        for kind, table in tables.items():
            if table.num_rows:
                if self.emit is not None:
                    self.emit(kind, table)
                elif self.spilled is not None:
                    self.spilled[kind].add(table)
                else:
                    self.parts[kind].append(table)
        if has_counters:  # ``C`` events keep arbitrary keys: their piece is decoded again, untyped
            with _closed(buf, end) as data:
                self.counter_rows.extend(counters_from(data))


def _joined(parts: list[bytes | memoryview]) -> bytearray:
    """``[`` followed by the undecoded bytes, in one new buffer."""
    return bytearray().join([b"[", *parts])


@contextmanager
def _closed(buf: bytearray, end: int) -> Iterator[memoryview | bytes]:
    """The JSON array ``buf[:end] + "]"`` (``buf[0]`` is ``[``), without copying ``buf``."""
    if end >= len(buf):
        yield bytes(buf[:end]) + b"]"
        return
    saved = buf[end]
    buf[end] = _CLOSE_ARRAY
    try:
        yield memoryview(buf)[:end + 1]
    finally:
        buf[end] = saved


def _try(buf: bytearray, end: int, warnings: list[str], path: Path) -> list[Event] | ScannedEvents | None:
    """The events of ``buf[:end] + "]"``, or None when that is not a JSON array (a wrong cut).
    NotEvents (a non-object element) propagates: the piece is then read element by element.
    The accelerator (app.data.event_scan) reads the piece when it can; else msgspec decodes it."""
    with _closed(buf, end) as data:
        scanned = scan_tables(data)
        if scanned is not None:
            return scanned
        try:
            return decode_array(data, warnings, path)
        except NotEvents:
            raise
        except Undecodable:
            return None


def _cut(buf: bytearray, warnings: list[str], path: Path) -> tuple[int | None, list[Event] | ScannedEvents]:
    """Decode the longest whole-event prefix ending at one of the last boundary candidates."""
    # The last _MAX_BACKOFF boundaries are usually in the last few KB: look there first (the regex
    # over the 1 MB window cost a tenth of the parse). Matches cannot overlap (each starts at a `}`
    # and ends at a `{`), so the tail's matches are the window's that start in the tail: when the
    # tail holds _MAX_BACKOFF of them, the candidates tried are the same as over the window.
    cands = [m.start() + 1 for m in _BOUNDARY.finditer(buf, max(1, len(buf) - _CUT_TAIL))]
    if len(cands) < _MAX_BACKOFF:
        cands = [m.start() + 1 for m in _BOUNDARY.finditer(buf, max(1, len(buf) - _CUT_WINDOW))]
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


def _add_scanned(sink: _Sink, buf: bytearray, sc: Scan, base: int, warnings: list[str], path: Path) -> None:
    """Decode the whole objects the scan found, as one array, and note the other elements."""
    sink.not_objects += [base + p - 1 for p in sc.others]
    if not sc.objects:
        return
    mv = memoryview(buf)
    arr = bytearray(b"[") + b",".join(mv[a:b] for a, b in sc.objects) + b"]"
    with _closed(arr, len(arr) - 1) as data:
        evs = decode_array(data, warnings, path)  # whole objects: decodes (typed, or leniently)
    sink.add(evs, arr, len(arr) - 1)


def _finish(buf: bytearray, is_object: bool, warnings: list[str],
            path: Path) -> tuple[list[Event] | ScannedEvents, TraceFields, int] | None:
    """At end of input: the events array must close, followed by the object's last fields.

    Returns (events, trailing fields, end of the events in ``buf``), or None. The array's end is
    one of the last ``_MAX_BACKOFF`` candidates (``}]`` or ``[]``); they are looked for in the
    last 64 KB first, as scanning a whole piece with the pattern costs more than decoding it.
    """
    first = NOT_SPACE.search(buf, 1)
    if first is not None and buf[first.start()] == _CLOSE_ARRAY:  # no events at all: `"traceEvents": [ ]`
        meta = tail_meta(bytes(buf[first.start() + 1:]), is_object)
        return ([], meta, 1) if meta is not None else None
    for lo in (max(1, len(buf) - _TAIL_WINDOW), 1):
        ends = list(_ARRAY_END.finditer(buf, lo))
        for m in reversed(ends[-_MAX_BACKOFF:]):
            meta = tail_meta_at(buf, m.end(), is_object)
            if meta is None:
                continue
            if buf[m.start()] == _OPEN_ARRAY:  # empty array: `[ ]`
                if not buf[1:m.start()].strip():
                    return [], meta, 1
                continue
            evs = _try(buf, m.start() + 1, warnings, path)
            if evs is not None:
                return evs, meta, m.start() + 1
        if lo == 1 or len(ends) >= _MAX_BACKOFF:  # the window held every candidate to try
            break
    return None


# ---------------------------------------------------------------- the pass over the file


def parse_trace_file(path: Path, progress: Progress | None = None, *, spill: bool = False) -> ParsedTrace:
    """Read ``path`` once and return its tables; raise TraceError when nothing can be recovered.

    ``spill``: keep the tables as compressed pieces (``ParsedTrace.spilled``, app.data.trace_spill)
    instead of Arrow tables, so that a big trace is never whole in memory."""
    return _parse(_Pass(path, progress, spill))[0]


def parse_trace_part(path: Path, pieces: Iterator[bytes], *, emit: Callable[[str, pa.Table], None] | None = None,
                     spill: bool = False) -> tuple[ParsedTrace, list[dict[str, Any]]]:
    """Parse ``pieces``, one part of ``path``'s bytes made into a trace of its own (app.data.trace_split:
    the head of the file closed with ``]}``, or its tail opened with ``{"traceEvents":[``); return
    its tables and its counter rows, which ``join_parts`` (or, with ``spill``, ``join_spilled``)
    joins with the other part's. With ``emit``, each piece's non-empty tables are given to
    ``emit(kind, table)`` as they are made, in order, and the tables returned are empty."""
    return _parse(_Pass(path, None, spill, pieces=pieces, emit=emit))


def _parse(p: _Pass) -> tuple[ParsedTrace, list[dict[str, Any]]]:
    # The pass allocates millions of short-lived objects that hold no reference cycles; the cyclic
    # GC would rescan them again and again (measured: a third of the ingest time at 100 MB).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return p.run(), p.sink.counter_rows
    finally:
        if was_enabled:
            gc.enable()


def join_parts(head: ParsedTrace, head_rows: list[dict[str, Any]], tail: ParsedTrace,
               tail_rows: list[dict[str, Any]]) -> ParsedTrace:
    """The trace whose events are ``head``'s then ``tail``'s (two parts parsed by ``parse_trace_part``,
    both without warnings): the tables ``parse_trace_file`` gives for the whole file. Dictionaries are
    unified in that order, so each column's categories keep their order of first appearance."""
    out = ParsedTrace(meta={**head.meta, **tail.meta}, n_events=head.n_events + tail.n_events)
    for kind in _PIECE_TABLES:
        a, b = getattr(head, kind), getattr(tail, kind)
        parts = [t for t in (a, b) if t is not None and t.num_rows]
        table = pa.concat_tables(parts).unify_dictionaries() if parts else TABLE_SCHEMAS[kind].empty_table()
        setattr(out, kind, table)
    out.counters = _counters(head_rows + tail_rows)
    return out


def join_spilled(head: ParsedTrace, head_rows: list[dict[str, Any]], tail: Mapping[str, Iterable[pa.RecordBatch]],
                 tail_meta: TraceFields, tail_n_events: int, tail_rows: list[dict[str, Any]]) -> ParsedTrace:
    """``join_parts`` for a head parsed with ``spill``: the tail's record batches (by kind, in file
    order) are added to the head's spilled tables, a batch at a time, which then hold the pieces of
    the whole file as one spilled pass over it does (dictionaries grow head first). Returns ``head``."""
    assert head.spilled is not None
    for kind, batches in tail.items():
        for batch in batches:
            head.spilled[kind].add(pa.Table.from_batches([batch]))
    head.meta = {**head.meta, **tail_meta}
    head.n_events += tail_n_events
    head.counters = _counters(head_rows + tail_rows)
    return head


def _counters(rows: list[dict[str, Any]]) -> pa.Table:
    return counters_table(rows) if rows else COUNTER_SCHEMA.empty_table()


class _Pass:
    """One pass over a trace file: the pieces read so far, and what was decoded from them."""

    def __init__(self, path: Path, progress: Progress | None, spill: bool = False, *,
                 pieces: Iterator[bytes] | None = None, emit: Callable[[str, pa.Table], None] | None = None) -> None:
        self.path = path
        self.out = ParsedTrace()
        self.sink = _Sink(spill, emit)
        self.pieces = pieces if pieces is not None else read_pieces(path, self.out.warnings, progress)
        self.head = b""  # the bytes read before the first event was found
        self.started = False  # whether the events array was found
        self.is_object = False  # whether the top level is an object (else a bare array of events)
        self.parts: list[bytes | memoryview] = []  # undecoded event bytes, in order (from an event's "{")
        self.have = 0  # their length
        self.base = 0  # absolute (decompressed) offset of parts[0][0]
        self.limit = PIECE_BYTES  # decode once this many bytes are waiting

    def run(self) -> ParsedTrace:
        for piece in self.pieces:
            if not self.started:
                events = self._find_events(piece)
                if events is None:
                    continue
                piece = events
            self.parts.append(piece)
            self.have += len(piece)
            if self.have >= self.limit and self._decode_piece():
                return _done(self.out, self.sink, self.path)
        return self._at_end()

    def _find_events(self, piece: bytes) -> bytes | None:
        """Add ``piece`` to the head; once the events array starts, return the bytes from there."""
        self.head += piece
        try:
            start = find_start(self.head)
        except ValueError as e:
            raise TraceError(f"{self.path}: not a Chrome/Kineto trace: {e}") from None
        except TraceError as e:
            raise TraceError(f"{self.path} {e}") from None
        if start is None:
            return None
        off, self.is_object = start
        self.started = True
        if self.is_object:
            self.out.meta = meta_from(self.head[:off - len(b"[")].rsplit(b'"traceEvents"', 1)[0])
        events, self.base, self.head = self.head[off:], off, b""
        return events

    def _keep_from(self, buf: bytearray, nxt: int) -> None:
        """The bytes of ``buf`` from ``nxt`` on wait for the next piece."""
        self.parts, self.have, self.base = [bytes(buf[nxt:])], len(buf) - nxt, self.base + nxt - 1

    def _decode_piece(self) -> bool:
        """Decode the waiting bytes up to the last whole event; True when the pass is over."""
        buf = _joined(self.parts)
        self.parts = [memoryview(buf)[1:]]  # the read blocks are freed; buf holds the bytes now
        cut, evs = _cut(buf, self.out.warnings, self.path)
        if cut is None:
            return self._scan_piece(buf)
        self.limit = PIECE_BYTES
        self.sink.add(evs, buf, cut)
        del evs
        self._keep_from(buf, buf.index(b"{", cut))
        return False

    def _scan_piece(self, buf: bytearray) -> bool:
        """The slow path for a piece that cannot be cut (why not?); True when the pass is over."""
        sc = scan(buf, 1)
        if sc.how is ScanEnd.TRUNCATED and sc.stop == 1 and self.have < MAX_EVENT_BYTES:
            self.limit = self.have + max(PIECE_BYTES, _GROW_BYTES)  # one huge event: read on before calling it corrupt
            return False
        self.limit = PIECE_BYTES
        _add_scanned(self.sink, buf, sc, self.base, self.out.warnings, self.path)
        if sc.how is ScanEnd.TRUNCATED and sc.stop > 1:  # whole elements read; the rest goes with the next piece
            self._keep_from(buf, sc.stop)
            return False
        if sc.how is ScanEnd.END:  # the array ended in the middle of the stream: the object's last fields follow
            rest = bytes(buf[sc.stop + 1:]) + b"".join(self.pieces)
            _end_fields(self.out, self.sink, self.path, rest, self.is_object, self.base + sc.stop - 1)
            return True
        close_pieces(self.pieces)
        if sc.how is ScanEnd.TRUNCATED:  # nothing whole in MAX_EVENT_BYTES
            self.out.warnings.append(f"{self.path}: the event at byte {self.base:,} is not complete after "
                                     f"{MAX_EVENT_BYTES >> 20} MB; the file is treated as corrupt there "
                                     f"({self.sink.n_events:,} events read before it)")
        else:
            _syntax_error(self.out, self.sink, self.path, self.base + sc.stop - 1, sc.error)
        return True

    def _at_end(self) -> ParsedTrace:
        """All bytes are read: the events array must close, then the object's last fields follow."""
        out, sink, path = self.out, self.sink, self.path
        if not self.started:
            if not self.head.strip() and out.warnings:
                raise TraceError(f"{path}: no trace data could be read: {out.warnings[-1]}")
            raise TraceError(no_events_message(path, self.head))
        buf = _joined(self.parts)
        self.parts = []
        try:
            finished = _finish(buf, self.is_object, out.warnings, path)
        except NotEvents:
            finished = None
        if finished is not None:
            evs, tail, end = finished
            sink.add(evs, buf, end)
            out.meta.update(tail)
            return _done(out, sink, path)
        sc = scan(buf, 1)
        _add_scanned(sink, buf, sc, self.base, out.warnings, path)
        if sc.how is ScanEnd.TRUNCATED:
            out.warnings.append(_recovered(path, sink.n_events, self.base + sc.stop - 1, "the file ends mid-event"))
        elif sc.how is ScanEnd.INVALID:
            _syntax_error(out, sink, path, self.base + sc.stop - 1, sc.error)
        else:
            _end_fields(out, sink, path, bytes(buf[sc.stop + 1:]), self.is_object, self.base + sc.stop - 1)
        return _done(out, sink, path)


# ---------------------------------------------------------------- what the pass says at its end


def _invalid(path: Path, at: int, error: str) -> str:
    line, col = line_col(path, at)
    return f"{path}: invalid JSON at byte {at:,} (line {line}, column {col}): {error}"


def _syntax_error(out: ParsedTrace, sink: _Sink, path: Path, at: int, error: str) -> None:
    """A syntax error: an error when no event could be read before it, else a warning."""
    msg = _invalid(path, at, error)
    if sink.n_events == 0 and not sink.not_objects:
        raise TraceError(f"{msg}; no event could be read")
    out.warnings.append(f"{msg}; kept the {sink.n_events:,} events before it, the rest of the file is not read")


def _end_fields(out: ParsedTrace, sink: _Sink, path: Path, tail: bytes, is_object: bool, close_at: int) -> None:
    """Check and keep what follows the events array (``close_at``: the byte of its ``]``)."""
    meta = tail_meta(tail, is_object)
    if meta is not None:
        out.meta.update(meta)
        return
    head = b'{"traceEvents":[]' if is_object else b"[]"
    try:
        UNTYPED.decode(head + tail)
    except RecursionError:
        out.warnings.append(f"{path}: the fields after the events array are nested too deeply to read "
                            f"(all {sink.n_events:,} events kept)")
        return
    except msgspec.DecodeError as e:
        msg = str(e)
        if "truncated" in msg:
            out.warnings.append(_recovered(path, sink.n_events, close_at + len(tail),
                                           "the file ends in the fields after the events"))
            return
        at = err_at(msg)
        where = close_at + at - (len(head) - 1) if at is not None else close_at
        out.warnings.append(f"{_invalid(path, where, err_text(msg))}"
                            f"; after the events array (all {sink.n_events:,} events kept)")
        return
    out.warnings.append(f"{path}: the fields after the events array could not be read")


def _recovered(path: Path, n: int, at: int, why: str) -> str:
    return f"{path}: recovered {n:,} events before byte {at:,}; {why}"


def _done(out: ParsedTrace, sink: _Sink, path: Path) -> ParsedTrace:
    out.spilled = sink.spilled
    for kind in _PIECE_TABLES if sink.spilled is None else ():
        parts = sink.parts[kind]
        # Chunks stay separate (no combine_chunks copy); unified dictionaries make one categorical.
        table = pa.concat_tables(parts).unify_dictionaries() if parts else TABLE_SCHEMAS[kind].empty_table()
        sink.parts[kind] = []
        setattr(out, kind, table)
    out.counters = _counters(sink.counter_rows)
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
