"""Decoded trace events → Arrow columns, one table per kind of event (data layer).

Called once per decoded piece of the file; the tables of all pieces are concatenated at the end.
Strings are dictionary-encoded (pandas categoricals) because a trace repeats a few thousand op
and kernel names millions of times.
"""
from __future__ import annotations

from operator import attrgetter
from typing import Any

import pyarrow as pa

from app.data.trace_parse import _EMPTY

__all__ = ["EVENT_SCHEMA", "MEMORY_SCHEMA", "FLOW_SCHEMA", "COUNTER_SCHEMA", "THREAD_SCHEMA",
           "columns_from_events", "empty_table"]

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

_X = attrgetter("name", "cat", "ts", "dur", "pid", "tid", "args")
_XARGS = attrgetter("correlation", "external_id", "external_id_lc", "device", "stream", "input_dims",
                    "input_dims_lc", "input_type", "nbytes", "sequence", "fwd_tid")
_MEM = attrgetter("device_type", "device_id", "addr", "mem_bytes", "total_allocated", "total_reserved")


def empty_table(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()


def _dict(values: list[Any]) -> pa.Array:
    return pa.array(values, pa.string()).dictionary_encode()


def _ids(values: list[Any]) -> pa.Array:
    """pid/tid are ints for host threads and strings for devices ("stream 7", "Spans")."""
    memo: dict[Any, str] = {v: ("" if v is None else str(v)) for v in set(values)}
    return _dict([memo[v] for v in values])


def _text(raws: list[Any], squeeze: bool) -> list[str]:
    """Raw JSON text of shapes/types; identical texts are converted once (they repeat a lot)."""
    memo: dict[bytes, str] = {}
    out = []
    for r in raws:
        if r is _EMPTY:  # most events have no shapes: skip the copy
            out.append("")
            continue
        b = bytes(r)
        s = memo.get(b)
        if s is None:
            # shapes hold only digits and brackets: drop spaces so writers' spacing does not split groups
            t = b.replace(b" ", b"") if squeeze else b
            s = memo[b] = "" if t in (b"", b"null") else t.decode("utf-8", "replace")
        out.append(s)
    return out


def _first(a: tuple[Any, ...], b: tuple[Any, ...], empty: Any = None) -> list[Any] | tuple[Any, ...]:
    if all(v is empty for v in b):
        return a
    return [x if x is not empty else y for x, y in zip(a, b)]


def _ints(values: tuple[Any, ...]) -> tuple[Any, ...] | list[Any]:
    if all(v is None or type(v) is int for v in values):
        return values
    return [v if v is None or type(v) is int else _parse_int(v) for v in values]


def _parse_int(v: Any) -> int | None:
    try:
        return int(v, 0)
    except (TypeError, ValueError):
        return None


def _complete_events(xs: list[Any]) -> pa.Table:
    if not xs:
        return empty_table(EVENT_SCHEMA)
    name, cat, ts, dur, pid, tid, args = zip(*map(_X, xs))
    corr, ext, ext_lc, dev, stream, dims, dims_lc, types, nbytes, seq, fwd = zip(*map(_XARGS, args))
    cols = [
        _dict([n or "" for n in name]), _dict([c or "" for c in cat]),
        pa.array(ts, pa.float64()), pa.array(dur, pa.float64()), _ids(list(pid)), _ids(list(tid)),
        pa.array(corr, pa.int64()), pa.array(_first(ext, ext_lc), pa.int64()), pa.array(dev, pa.int64()),
        pa.array(_ints(stream), pa.int64()), _dict(_text(list(_first(dims, dims_lc, _EMPTY)), True)),
        _dict(_text(list(types), False)), pa.array(nbytes, pa.int64()), pa.array(seq, pa.int64()),
        pa.array(fwd, pa.int64()),
    ]
    return pa.Table.from_arrays(cols, schema=EVENT_SCHEMA)


def _memory_events(ms: list[Any]) -> pa.Table:
    if not ms:
        return empty_table(MEMORY_SCHEMA)
    dtype, did, addr, nbytes, alloc, reserved = zip(*(_MEM(e.args) for e in ms))
    return pa.Table.from_arrays([
        pa.array([e.ts for e in ms], pa.float64()), pa.array(dtype, pa.int64()), pa.array(did, pa.int64()),
        pa.array(addr, pa.int64()), pa.array(nbytes, pa.int64()), pa.array(alloc, pa.int64()),
        pa.array(reserved, pa.int64()), _ids([e.pid for e in ms]), _ids([e.tid for e in ms]),
    ], schema=MEMORY_SCHEMA)


def _flow_events(fs: list[Any]) -> pa.Table:
    if not fs:
        return empty_table(FLOW_SCHEMA)
    return pa.Table.from_arrays([
        pa.array(["" if e.id is None else str(e.id) for e in fs], pa.string()),
        _dict([e.cat or "" for e in fs]), _dict([e.ph for e in fs]),
        pa.array([e.ts for e in fs], pa.float64()), _ids([e.pid for e in fs]), _ids([e.tid for e in fs]),
    ], schema=FLOW_SCHEMA)


def _thread_events(ms: list[Any]) -> pa.Table:
    rows = [(e.pid, e.tid, "process" if e.name == "process_name" else "thread", e.args.name)
            for e in ms if e.name in ("process_name", "thread_name") and e.args.name is not None]
    if not rows:
        return empty_table(THREAD_SCHEMA)
    pid, tid, kind, name = zip(*rows)
    return pa.Table.from_arrays([_ids(list(pid)), _ids(list(tid)), _dict(list(kind)), pa.array(name, pa.string())],
                                schema=THREAD_SCHEMA)


def columns_from_events(evs: list[Any]) -> dict[str, pa.Table]:
    """Split decoded events by phase and return one Arrow table per kind (events, memory, ...)."""
    xs: list[Any] = []
    ms: list[Any] = []
    fs: list[Any] = []
    meta: list[Any] = []
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
    return {"events": _complete_events(xs), "memory": _memory_events(ms), "flows": _flow_events(fs),
            "threads": _thread_events(meta)}


def counters_table(rows: list[dict[str, Any]]) -> pa.Table:
    if not rows:
        return empty_table(COUNTER_SCHEMA)
    return pa.Table.from_arrays([
        _dict([r["name"] for r in rows]), pa.array([r["ts_us"] for r in rows], pa.float64()),
        _dict([r["pid"] for r in rows]), pa.array([r["value"] for r in rows], pa.float64()),
    ], schema=COUNTER_SCHEMA)
