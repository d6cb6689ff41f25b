"""Decoded trace events → Arrow columns, one table per kind of event (data layer).

Called once per decoded piece of the file; the tables of all pieces are concatenated at the end.
Strings are dictionary-encoded (pandas categoricals) because a trace repeats a few thousand op
and kernel names millions of times.
"""
from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from app.data.trace_decode import EMPTY_RAW, Event
from app.data.trace_kinds import TABLES

__all__ = ["TABLES", "TABLE_SCHEMAS", "EVENT_SCHEMA", "MEMORY_SCHEMA", "FLOW_SCHEMA", "COUNTER_SCHEMA",
           "THREAD_SCHEMA", "columns_from_events", "counters_table", "empty_table", "int_ids", "small_dict",
           "text_dictionary", "id_text", "lenient_ints"]

_DICT = pa.dictionary(pa.int32(), pa.string())

EVENT_SCHEMA = pa.schema([
    ("name", _DICT), ("cat", _DICT), ("ts_us", pa.float64()), ("dur_us", pa.float64()),
    ("pid", _DICT), ("tid", _DICT), ("correlation", pa.int64()), ("external_id", pa.int64()),
    ("device", pa.int64()), ("stream", pa.int64()), ("input_shapes", _DICT), ("input_types", _DICT),
    ("bytes", pa.int64()), ("sequence", pa.int64()), ("fwd_tid", pa.int64()),
])
MEMORY_SCHEMA = pa.schema([
    ("ts_us", pa.float64()), ("device_type", pa.int64()), ("device_id", pa.int64()), ("addr", pa.int64()),
    ("bytes", pa.int64()), ("total_allocated_bytes", pa.int64()), ("total_reserved_bytes", pa.int64()),
    ("pid", _DICT), ("tid", _DICT),
])
FLOW_SCHEMA = pa.schema([
    ("id", pa.string()), ("cat", _DICT), ("ph", _DICT), ("ts_us", pa.float64()), ("pid", _DICT), ("tid", _DICT),
])
COUNTER_SCHEMA = pa.schema([("name", _DICT), ("ts_us", pa.float64()), ("pid", _DICT), ("value", pa.float64())])
THREAD_SCHEMA = pa.schema([("pid", _DICT), ("tid", _DICT), ("kind", _DICT), ("name", pa.string())])
# The tables of one trace, by name: the parser's output, the cache's files, TraceTables' attributes.
TABLE_SCHEMAS: dict[str, pa.Schema] = {
    "events": EVENT_SCHEMA, "memory": MEMORY_SCHEMA, "flows": FLOW_SCHEMA, "counters": COUNTER_SCHEMA,
    "threads": THREAD_SCHEMA,
}
assert tuple(TABLE_SCHEMAS) == TABLES, "trace_kinds.TABLES and TABLE_SCHEMAS list the same tables"

# Columns are taken from the structs a group at a time: one C-level getter call per event gives a
# tuple of the group's fields and Arrow converts the tuples as one struct array (measured ≈ 30 %
# cheaper than one ``map(attrgetter(field))`` pass and one conversion per column). Fields whose
# type varies (pid, tid, stream) or that are raw JSON (shapes) are taken one column at a time.
_X_TOP = attrgetter("name", "cat", "ts", "dur", "pid", "tid")
_X_TOP_TYPE = pa.struct([("name", pa.string()), ("cat", pa.string()), ("ts", pa.float64()), ("dur", pa.float64()),
                         ("pid", pa.int64()), ("tid", pa.int64())])
_X_TOP_NO_IDS = attrgetter("name", "cat", "ts", "dur")
_X_TOP_NO_IDS_TYPE = pa.struct(list(_X_TOP_TYPE)[:4])
_X_INT_FIELDS = ("correlation", "external_id", "external_id_lc", "device", "nbytes", "sequence", "fwd_tid")
_X_INTS = attrgetter(*_X_INT_FIELDS)
_X_INTS_TYPE = pa.struct([(f, pa.int64()) for f in _X_INT_FIELDS])
_X_RAW = [attrgetter(f) for f in ("input_dims", "input_dims_lc", "input_type")]
_PID = attrgetter("pid")
_TID = attrgetter("tid")
_STREAM = attrgetter("stream")
_ARGS = attrgetter("args")
_MEM = attrgetter("device_type", "device_id", "addr", "mem_bytes", "total_allocated", "total_reserved")


def empty_table(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()


def small_dict(values: Any, none: str = "") -> pa.Array:
    """Dictionary-encode Python values as strings; repeated values are converted once."""
    memo: dict[Any, int] = {}
    setdefault = memo.setdefault
    codes = [setdefault(v, len(memo)) for v in values]
    words = [none if k is None else k if type(k) is str else str(k) for k in memo]
    if len(set(words)) != len(words):  # e.g. pid 1 and "1", or None and "": merge through Arrow
        return pa.array(["" if v is None else str(v) for v in values], pa.string()).dictionary_encode()
    return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), pa.array(words, pa.string()))


_STR_DICT = pa.dictionary(pa.int32(), pa.string())


_NOT_INT = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError)


def _ids(values: Any) -> pa.Array:
    """pid/tid are ints for host threads and strings for devices ("stream 7", "Spans")."""
    try:  # usually all ints: encode in Arrow, without a Python step per event
        return int_ids(pa.array(values, pa.int64()))
    except _NOT_INT:
        return small_dict(values)


def int_ids(ids: pa.Array) -> pa.Array:
    """Integer ids (pid, tid) as dictionary-encoded text, in order of first use (nulls stay null)."""
    return ids.dictionary_encode().cast(_STR_DICT)


def _strings(values: list[str | None]) -> pa.Array:
    """Dictionary-encode text values (None becomes ""), in Arrow: codes in order of first appearance."""
    return _encode(pa.array(values, pa.string()))


def _encode(arr: pa.Array) -> pa.Array:
    if arr.null_count:
        arr = arr.fill_null("")
    return arr.dictionary_encode()


def _text(raws: Any, squeeze: bool) -> pa.Array:
    """Raw JSON text of shapes/types (msgspec.Raw values), dictionary-encoded; identical texts are
    decoded once.

    The raw values are joined into one buffer and viewed as an Arrow binary array (offsets from
    their lengths), dictionary-encoded in Arrow (no Python object per event); only the distinct
    texts are then cleaned and decoded in Python (``text_dictionary``)."""
    n = len(raws)
    if raws.count(EMPTY_RAW) == n:  # not recorded: every event "" (what the rest gives, without the join)
        return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([""], pa.string()))
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(np.fromiter(map(len, raws), np.int64, n), out=offsets[1:])
    joined = pa.LargeBinaryArray.from_buffers(pa.large_binary(), n,
                                              [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(raws))])
    enc = joined.dictionary_encode()
    return text_dictionary(enc.indices.cast(pa.int32()), enc.dictionary.to_pylist(), squeeze)


def text_dictionary(indices: pa.Array, distinct: list[bytes], squeeze: bool) -> pa.Array:
    """Raw JSON texts as a dictionary array: ``indices`` (int32) into their ``distinct`` texts in
    order of first use, each cleaned ("" for absent or null; with ``squeeze``, shapes without spaces,
    so that writers' spacing does not split groups) and decoded once; texts that become equal merge."""
    memo: dict[str, int] = {}
    remap = []
    for b in distinct:
        t = b.replace(b" ", b"") if squeeze else b
        remap.append(memo.setdefault("" if t in (b"", b"null") else t.decode("utf-8", "replace"), len(memo)))
    if len(memo) < len(remap):  # texts that differ only in spacing (or "" and null) become one
        indices = pc.take(pa.array(remap, pa.int32()), indices)
    return pa.DictionaryArray.from_arrays(indices, pa.array(list(memo), pa.string()))


def _first(a: Sequence[Any], b: Sequence[Any], empty: Any = None) -> Any:
    if b.count(empty) == len(b):
        return a
    return [x if x is not empty else y for x, y in zip(a, b)]


def lenient_ints(values: Sequence[Any]) -> Any:
    """Ints, null, or text read as ``int(v, 0)`` (ROCm's stream "0x0"; null when it is not a number)."""
    try:
        return pa.array(values, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array([v if v is None or type(v) is int else _parse_int(v) for v in values], pa.int64())


def _parse_int(v: Any) -> int | None:
    try:
        return int(v, 0)
    except (TypeError, ValueError):
        return None


def _complete_events(xs: list[Event]) -> pa.Table:
    if not xs:
        return empty_table(EVENT_SCHEMA)
    try:  # pid and tid are ints for host threads and devices: take them with the other fields
        name, cat, ts, dur, pid, tid = pa.array(list(map(_X_TOP, xs)), _X_TOP_TYPE).flatten()
        pid, tid = int_ids(pid), int_ids(tid)
    except _NOT_INT:  # a string id ("Spans", "stream 7"): a piece or two per trace
        name, cat, ts, dur = pa.array(list(map(_X_TOP_NO_IDS, xs)), _X_TOP_NO_IDS_TYPE).flatten()
        pid, tid = _ids(list(map(_PID, xs))), _ids(list(map(_TID, xs)))
    args = list(map(_ARGS, xs))
    corr, ext, ext_lc, dev, nbytes, seq, fwd = pa.array(list(map(_X_INTS, args)), _X_INTS_TYPE).flatten()
    if ext_lc.null_count < len(ext_lc):  # older torch writes "external id"; "External id" wins
        ext = pc.coalesce(ext, ext_lc)
    dims, dims_lc, types = (list(map(g, args)) for g in _X_RAW)
    cols = [
        _encode(name), _encode(cat), ts, dur, pid, tid, corr, ext, dev,
        lenient_ints(list(map(_STREAM, args))), _text(_first(dims, dims_lc, EMPTY_RAW), True), _text(types, False),
        nbytes, seq, fwd,
    ]
    return pa.Table.from_arrays(cols, schema=EVENT_SCHEMA)


def _memory_events(ms: list[Event]) -> pa.Table:
    if not ms:
        return empty_table(MEMORY_SCHEMA)
    dtype, did, addr, nbytes, alloc, reserved = zip(*(_MEM(e.args) for e in ms))
    return pa.Table.from_arrays([
        pa.array([e.ts for e in ms], pa.float64()), pa.array(dtype, pa.int64()), pa.array(did, pa.int64()),
        pa.array(addr, pa.int64()), pa.array(nbytes, pa.int64()), pa.array(alloc, pa.int64()),
        pa.array(reserved, pa.int64()), _ids([e.pid for e in ms]), _ids([e.tid for e in ms]),
    ], schema=MEMORY_SCHEMA)


_ID = attrgetter("id")
_FLOW = attrgetter("cat", "ph", "ts")
_FLOW_TYPE = pa.struct([("cat", pa.string()), ("ph", pa.string()), ("ts", pa.float64())])


def _id_text(ids: list[Any]) -> pa.Array:
    """Flow ids as text ("" when absent); usually all ints, formatted by Arrow as str() would."""
    try:
        return id_text(pa.array(ids, pa.int64()))
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        return pa.array(["" if v is None else str(v) for v in ids], pa.string())


def id_text(ids: pa.Array) -> pa.Array:
    """Integer flow ids as text, as str() writes them ("" when absent)."""
    return ids.cast(pa.string()).fill_null("")


def _flow_events(fs: list[Event]) -> pa.Table:
    if not fs:
        return empty_table(FLOW_SCHEMA)
    cat, ph, ts = pa.array(list(map(_FLOW, fs)), _FLOW_TYPE).flatten()
    return pa.Table.from_arrays([
        _id_text(list(map(_ID, fs))), _encode(cat), _encode(ph), ts,
        _ids(list(map(_PID, fs))), _ids(list(map(_TID, fs))),
    ], schema=FLOW_SCHEMA)


def _thread_events(ms: list[Event]) -> pa.Table:
    rows = [(e.pid, e.tid, "process" if e.name == "process_name" else "thread", e.args.name)
            for e in ms if e.name in ("process_name", "thread_name") and e.args.name is not None]
    if not rows:
        return empty_table(THREAD_SCHEMA)
    pid, tid, kind, name = zip(*rows)
    return pa.Table.from_arrays([_ids(pid), _ids(tid), small_dict(kind), pa.array(name, pa.string())],
                                schema=THREAD_SCHEMA)


def columns_from_events(evs: list[Event]) -> tuple[dict[str, pa.Table], bool]:
    """Split decoded events by phase; return one Arrow table per kind (events, memory, ...) and
    whether there were counter (``C``) events, which are read separately (``counters_from``)."""
    xs: list[Event] = []
    ms: list[Event] = []
    fs: list[Event] = []
    meta: list[Event] = []
    has_counters = False
    for e in evs:
        ph = e.ph
        if ph == "X":
            xs.append(e)
        elif ph in ("i", "I") and e.name == "[memory]":
            ms.append(e)
        elif ph in ("s", "f", "t"):
            fs.append(e)
        elif ph == "M":
            meta.append(e)
        elif ph == "C":
            has_counters = True
    return {"events": _complete_events(xs), "memory": _memory_events(ms), "flows": _flow_events(fs),
            "threads": _thread_events(meta)}, has_counters


def counters_table(rows: list[dict[str, Any]]) -> pa.Table:
    if not rows:
        return empty_table(COUNTER_SCHEMA)
    return pa.Table.from_arrays([
        small_dict([r["name"] for r in rows]), pa.array([r["ts_us"] for r in rows], pa.float64()),
        small_dict([r["pid"] for r in rows]), pa.array([r["value"] for r in rows], pa.float64()),
    ], schema=COUNTER_SCHEMA)
