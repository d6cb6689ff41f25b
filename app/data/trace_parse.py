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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa

from app.data.trace_decode import KINETO_FIELDS, UNTYPED, Undecodable, counters_from, decode_array
from app.errors import TraceError

__all__ = ["ParsedTrace", "parse_trace_file", "PIECE_BYTES", "KINETO_FIELDS"]

Progress = Callable[[int, int], None]

PIECE_BYTES = 8 << 20  # decompressed bytes decoded at a time; bounds peak memory
_READ_BYTES = 1 << 20  # compressed bytes read at a time
_MAX_BACKOFF = 64  # boundary candidates tried before a piece is declared undecodable

# `}` , `{` between two events (any whitespace); `}` `]` at the end of the array.
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_ARRAY_END = re.compile(rb"\}\s*\]|\[\s*\]")
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


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


class _Sink:
    """Collects the Arrow tables of each decoded piece and counts events."""

    def __init__(self) -> None:
        self.parts: dict[str, list[pa.Table]] = {"events": [], "memory": [], "flows": [], "threads": []}
        self.counter_rows: list[dict[str, Any]] = []
        self.n_events = 0

    def add(self, evs: list[Any], data: bytes) -> None:
        from app.data.trace_columns import columns_from_events

        self.n_events += len(evs)
        for kind, table in columns_from_events(evs).items():
            if table.num_rows:
                self.parts[kind].append(table)
        if b'"C"' in data:  # ``data`` is the events part that was decoded, without the brackets
            self.counter_rows.extend(counters_from(b"[" + data + b"]"))


def _try(buf: bytes, end: int, warnings: list[str], path: Path) -> list[Any] | None:
    try:
        return decode_array(b"[" + buf[:end] + b"]", warnings, path)
    except Undecodable:
        return None


def _longest_prefix(buf: bytes, warnings: list[str], path: Path) -> tuple[int, list[Any]]:
    """Return (end, events) for the longest run of whole events at the start of ``buf``.

    Decodability is monotone in the cut position (every cut before a corruption decodes, none
    after it), so a binary search over boundary candidates finds it in a few decodes.
    """
    cands = [m.start() + 1 for m in _BOUNDARY.finditer(buf)]
    cands += [m.start() + 1 for m in _ARRAY_END.finditer(buf) if buf[m.start():m.start() + 1] == b"}"]
    cands = sorted(set(cands))
    lo, hi, best, best_evs = 0, len(cands) - 1, 0, []
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


def _finish(buf: bytes, is_object: bool, warnings: list[str],
            path: Path) -> tuple[list[Any], dict[str, Any], int] | None:
    """At end of input: the events array must close, followed by the object's last fields.

    Returns (events, trailing fields, end of the events part in ``buf``), or None.
    """
    head = buf.lstrip()
    if head.startswith(b"]"):  # no events at all: `"traceEvents": [ ]`
        meta = _tail_meta(head[1:], is_object)
        return ([], meta, 0) if meta is not None else None
    ends = list(_ARRAY_END.finditer(buf))
    for m in reversed(ends[-_MAX_BACKOFF:]):
        meta = _tail_meta(buf[m.end():], is_object)
        if meta is None:
            continue
        if buf[m.start():m.start() + 1] == b"[":  # empty array: `[ ]`
            if buf[:m.start()].strip() == b"":
                return [], meta, 0
            continue
        evs = _try(buf, m.start() + 1, warnings, path)
        if evs is not None:
            return evs, meta, m.start() + 1
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
    buf = b""
    base = 0  # absolute (decompressed) offset of buf[0]
    start = None
    limit = PIECE_BYTES
    for piece in pieces:
        buf += piece
        if start is None:
            try:
                start = _find_start(buf)
            except ValueError as e:
                raise TraceError(f"{path}: not a Chrome/Kineto trace: {e}") from None
            if start is None:
                continue
            off, is_object = start
            if is_object:
                out.meta = _meta_from(buf[:off - len(b"[")].rsplit(b'"traceEvents"', 1)[0])
            buf, base = buf[off:], base + off
        if len(buf) < limit:
            continue
        cut, evs = _cut(buf, out.warnings, path)
        if cut is None and len(buf) < 4 * PIECE_BYTES:
            limit = len(buf) + PIECE_BYTES  # maybe one huge event: read on before calling it corrupt
            continue
        limit = PIECE_BYTES
        if cut is None:
            end, evs = _longest_prefix(buf, out.warnings, path)
            sink.add(evs, buf[:end])
            out.warnings.append(_recovered(sink.n_events, base + end, "the file is corrupt after it"))
            _close(pieces)
            return _done(out, sink)
        sink.add(evs, buf[:cut])
        nxt = buf.index(b"{", cut)
        buf, base = buf[nxt:], base + nxt
    if start is None:
        if not buf.strip() and out.warnings:
            raise TraceError(f"{path}: no trace data could be read: {out.warnings[-1]}")
        raise TraceError(_no_events_message(path, buf))
    finished = _finish(buf, start[1], out.warnings, path)
    if finished is not None:
        evs, tail, end = finished
        sink.add(evs, buf[:end])
        out.meta.update(tail)
    else:
        end, evs = _longest_prefix(buf, out.warnings, path)
        sink.add(evs, buf[:end])
        out.warnings.append(_recovered(sink.n_events, base + end, "the file ends mid-event"))
    return _done(out, sink)


def _cut(buf: bytes, warnings: list[str], path: Path) -> tuple[int | None, list[Any]]:
    """Decode the longest whole-event prefix ending at one of the last boundary candidates."""
    window = max(0, len(buf) - (1 << 20))
    cands = [m.start() + 1 for m in _BOUNDARY.finditer(buf, window)]
    if not cands:
        cands = [m.start() + 1 for m in _BOUNDARY.finditer(buf)]
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
    from app.data.trace_columns import (COUNTER_SCHEMA, EVENT_SCHEMA, FLOW_SCHEMA, MEMORY_SCHEMA,
                                        THREAD_SCHEMA, counters_table)

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
