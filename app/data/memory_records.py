"""Memory timeline records parsed in bounded batches, never the whole text at once (data layer).

torch's ``export_memory_timeline`` raw output is one JSON list of ``[time_ns, action, bytes,
category]`` records. Decoding it whole built a Python list per record: RSS was about 17.6× the
inflated size (a 3 MB gzip inflating to 1.5 GB took more than 5.6 GB). Here the inflated text
arrives in chunks (``safe_io``: capped by ``TORCHSCOPE_MAX_INFLATE_MB``), each run of complete
records is decoded and turned at once into an int64 array (32 bytes a record, no more than its
text), so RSS stays a small multiple of the records kept.

A text that is not a flat list of records (torch's coalesced ``[times, sizes]`` form, or
anything else) gives None from :func:`read_record_array`; the caller then decodes it whole,
still under the inflate cap.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from itertools import chain
from typing import Any

import msgspec
import numpy as np

__all__ = ["NotRecords", "read_record_array", "record_batches"]

_SPACE = b" \t\r\n"
_MAX_PENDING = 4 << 20  # inflated bytes without a record boundary before the text is "not records"
_RECORD = tuple[float, int, int, int | None]
_NESTED = re.compile(rb"\[\s*\[")  # a list in a list: in a flat record list only at the very start


class NotRecords(ValueError):
    """The text is not a flat JSON list of 4-number records (the caller decodes it another way)."""


def _boundary(buf: bytes | bytearray) -> int:
    """Index just after the last ``]`` that ends a record and is followed by a comma, or -1."""
    pos = len(buf)
    for _ in range(16):  # a record has 3 commas of its own; more tries than that means no boundary
        pos = buf.rfind(b",", 0, pos)
        if pos < 0:
            return -1
        j = pos - 1
        while j >= 0 and buf[j] in _SPACE:
            j -= 1
        if j >= 0 and buf[j] == 0x5D:  # "]"
            return j + 1
    return -1


def record_batches(pieces: Iterable[bytes]) -> Iterator[bytes]:
    """Yield ``[rec, rec, ...]`` JSON texts of complete records from the pieces of one record
    list. Raises NotRecords when the text does not start as a list of lists or has no record
    boundary within a few MiB."""
    buf = bytearray()
    started = False
    for piece in pieces:
        buf += piece
        if not started:
            head = bytes(buf[:64]).lstrip(_SPACE)
            if len(head) < 2 and len(buf) < 64:
                continue
            if head[:1] != b"[" or head[1:].lstrip(_SPACE)[:1] not in (b"[", b"]", b""):
                raise NotRecords("not a JSON list of lists")
            del buf[: buf.index(b"[") + 1]
            started = True
        cut = _boundary(buf)
        if cut < 0:
            if len(buf) > _MAX_PENDING:
                raise NotRecords("no record boundary")
            continue
        yield b"[" + bytes(buf[:cut]).lstrip(_SPACE + b",") + b"]"
        del buf[:cut]
    rest = bytes(buf).strip(_SPACE).lstrip(b",").lstrip(_SPACE)
    if not started:
        raise NotRecords("not a JSON list")
    if rest[-1:] != b"]":
        raise NotRecords("the list is not closed")
    yield b"[" + rest  # the last records and the list's own "]"


def read_record_array(pieces: Iterable[bytes], *, lenient: bool = False) -> np.ndarray[Any, np.dtype[np.int64]]:
    """An (n, 4) int64 array of the records (time in ns, action, bytes, category). ``lenient``
    (app.data.trace_memory's reading): float times are truncated and a null category becomes -1.
    Raises NotRecords when the text is not such a list (e.g. the coalesced form), and
    msgspec.DecodeError / msgspec.ValidationError when a batch is not valid records."""
    arrays: list[np.ndarray[Any, np.dtype[np.int64]]] = []
    for batch in record_batches(pieces):
        if _NESTED.search(batch, 1):
            raise NotRecords("lists nested deeper than records")
        if lenient:
            recs = msgspec.json.decode(batch, type=list[_RECORD])
            try:
                rows = [(int(t), a, b, -1 if c is None else c) for t, a, b, c in recs]
            except (OverflowError, ValueError):
                raise msgspec.ValidationError("a time is not a finite number") from None
        else:
            rows = msgspec.json.decode(batch, type=list[tuple[int, int, int, int]])
        if rows:
            try:
                flat = np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=4 * len(rows))
                arrays.append(flat.reshape(-1, 4))
            except OverflowError:
                raise msgspec.ValidationError("a number is beyond int64") from None
    if not arrays:
        return np.zeros((0, 4), np.int64)
    return np.concatenate(arrays) if len(arrays) > 1 else arrays[0]
