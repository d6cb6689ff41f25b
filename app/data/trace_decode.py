"""Decoding Kineto trace events with msgspec: the typed structs and the lenient fallback (data layer).

``Event``/``_Args`` name the only fields the engine keeps (``KINETO_FIELDS``, versioned with the
cache); msgspec skips every other key while decoding, without building objects for them. A piece
whose fields have unexpected types (e.g. ROCm's string ``stream``) is decoded untyped and coerced
field by field instead, with one warning.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from app.data.trace_nesting import MAX_NESTING, drop_deep_values

__all__ = ["Event", "KINETO_FIELDS", "EMPTY_RAW", "Undecodable", "NotEvents", "Decoded", "decode_array", "counters_from",
           "UNTYPED"]


EMPTY_RAW = msgspec.Raw(b"")  # "field absent" for the raw JSON fields (shapes, types)


class _Args(msgspec.Struct, frozen=True, gc=False):
    """The few ``args`` fields the engine keeps; every other key is skipped while decoding."""

    external_id: int | None = msgspec.field(default=None, name="External id")
    external_id_lc: int | None = msgspec.field(default=None, name="external id")
    correlation: int | None = None
    device: int | None = None
    stream: int | str | None = None  # ROCm writes it as a string
    input_dims: msgspec.Raw = msgspec.field(default=EMPTY_RAW, name="Input Dims")
    input_dims_lc: msgspec.Raw = msgspec.field(default=EMPTY_RAW, name="Input dims")
    input_type: msgspec.Raw = msgspec.field(default=EMPTY_RAW, name="Input type")
    nbytes: int | None = msgspec.field(default=None, name="bytes")
    mem_bytes: int | None = msgspec.field(default=None, name="Bytes")
    total_allocated: int | None = msgspec.field(default=None, name="Total Allocated")
    total_reserved: int | None = msgspec.field(default=None, name="Total Reserved")
    addr: int | None = msgspec.field(default=None, name="Addr")
    device_type: int | None = msgspec.field(default=None, name="Device Type")
    device_id: int | None = msgspec.field(default=None, name="Device Id")
    sequence: int | None = msgspec.field(default=None, name="Sequence number")
    fwd_tid: int | None = msgspec.field(default=None, name="Fwd thread id")
    name: str | None = None  # process_name / thread_name metadata
    sort_index: int | None = None


_NO_ARGS = _Args()


class Event(msgspec.Struct, gc=False):
    """One trace event, with only the fields the engine keeps (every other key is skipped)."""

    ph: str = ""
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None
    id: int | str | None = None
    args: _Args = _NO_ARGS


# The Kineto fields read, versioned with the cache (docs/trace-engine.md lists them).
KINETO_FIELDS = tuple(Event.__struct_fields__) + tuple(
    getattr(f, "encode_name", f) for f in msgspec.structs.fields(_Args)
)

_TYPED = msgspec.json.Decoder(list[Event])
UNTYPED = msgspec.json.Decoder()


class Undecodable(Exception):
    """The bytes are not a JSON array of events (a cut in the wrong place, or corruption)."""



class NotEvents(Undecodable):
    """The bytes are a JSON array, but some of its elements are not objects (e.g. ``5``, ``null``).

    The parser then reads that piece element by element (``trace_scan.scan``), which skips those
    elements and says at which byte each was."""


class Decoded(list[Event]):
    """Decoded events; ``bad_ts`` counts the events dropped because their ``ts`` is not a number."""

    bad_ts = 0


def decode_array(data: bytes | memoryview, warnings: list[str], path: Path) -> list[Event]:
    """Decode a JSON array of events: typed fast path, untyped fallback for odd field types.
    A field nested too deep for the decoder (RecursionError) is dropped from its event, with a
    warning (``trace_nesting``). Raises Undecodable, and NotEvents for a non-object element."""
    try:
        return _decode_array(data, warnings, path)
    except RecursionError:
        pass
    flat, n = drop_deep_values(data)
    if n == 0:
        raise Undecodable("JSON nested too deeply to decode") from None
    warnings.append(f"{path}: {n:,} event{'s have' if n > 1 else ' has'} a field nested more than "
                    f"{MAX_NESTING} levels deep; that field was dropped, the rest of the event is kept")
    try:
        return _decode_array(flat, warnings, path)
    except RecursionError:
        raise Undecodable("JSON nested too deeply to decode") from None


def _decode_array(data: bytes | memoryview, warnings: list[str], path: Path) -> list[Event]:
    try:
        return _TYPED.decode(data)
    except msgspec.ValidationError:
        pass
    except msgspec.DecodeError as e:
        if "UTF-8" not in str(e):
            raise Undecodable(str(e)) from None
        data = bytes(data).decode("utf-8", "replace").encode("utf-8")
        _note_once(warnings, f"{path}: some names are not valid UTF-8; replaced the bad bytes with U+FFFD")
        try:
            return _TYPED.decode(data)
        except msgspec.ValidationError:
            pass
        except msgspec.DecodeError as e2:
            raise Undecodable(str(e2)) from None
    try:
        raw = UNTYPED.decode(data)
    except msgspec.DecodeError as e:
        raise Undecodable(str(e)) from None
    if not all(isinstance(e, dict) for e in raw):
        raise NotEvents("an element of the events array is not an object")
    _note_once(warnings, f"{path}: some events have fields of an unexpected type; they were read leniently")
    out = Decoded(ev for ev in map(_lenient, raw) if ev is not None)
    out.bad_ts = len(raw) - len(out)
    return out


def _note_once(warnings: list[str], msg: str) -> None:
    if msg not in warnings:
        warnings.append(msg)


def _num(v: Any, kind: type) -> Any:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return kind(v)
    if isinstance(v, str):
        try:
            return kind(float(v))
        except ValueError:
            return None
    return None


def _raw(v: Any) -> msgspec.Raw:
    return EMPTY_RAW if v is None else msgspec.Raw(msgspec.json.encode(v))


def _lenient(d: dict[str, Any]) -> Event | None:
    """Build an Event from a dict whose fields may have unexpected types (coerce or drop); None
    when its ``ts`` is there but is not a number (``"abc"``, a list): such an event is skipped."""
    ts = d.get("ts")
    ts_num = _num(ts, float)
    if ts is not None and ts_num is None:
        return None
    a = d.get("args")
    args = _NO_ARGS
    if isinstance(a, dict):
        g = a.get
        args = _Args(
            external_id=_num(g("External id"), int), external_id_lc=_num(g("external id"), int),
            correlation=_num(g("correlation"), int), device=_num(g("device"), int),
            stream=_num(g("stream"), int), input_dims=_raw(g("Input Dims")),
            input_dims_lc=_raw(g("Input dims")), input_type=_raw(g("Input type")),
            nbytes=_num(g("bytes"), int), mem_bytes=_num(g("Bytes"), int),
            total_allocated=_num(g("Total Allocated"), int), total_reserved=_num(g("Total Reserved"), int),
            addr=_num(g("Addr"), int), device_type=_num(g("Device Type"), int),
            device_id=_num(g("Device Id"), int), sequence=_num(g("Sequence number"), int),
            fwd_tid=_num(g("Fwd thread id"), int),
            name=g("name") if isinstance(g("name"), str) else None, sort_index=_num(g("sort_index"), int),
        )
    pid, tid, eid = d.get("pid"), d.get("tid"), d.get("id")
    return Event(
        ph=str(d.get("ph") or ""), cat=_str(d.get("cat")), name=_str(d.get("name")),
        pid=pid if isinstance(pid, (int, str)) and not isinstance(pid, bool) else None,
        tid=tid if isinstance(tid, (int, str)) and not isinstance(tid, bool) else None,
        ts=ts_num, dur=_num(d.get("dur"), float),
        id=eid if isinstance(eid, (int, str)) and not isinstance(eid, bool) else None, args=args,
    )


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) or v is None else str(v)


def counters_from(data: bytes | memoryview) -> list[dict[str, Any]]:
    """``C`` events keep arbitrary ``args`` keys, so they are decoded untyped (they are rare)."""
    try:
        raw = UNTYPED.decode(data)
    except msgspec.DecodeError:
        return []
    except RecursionError:  # a field nested thousands deep: dropped, as decode_array does
        try:
            raw = UNTYPED.decode(drop_deep_values(data)[0])
        except (msgspec.DecodeError, RecursionError):
            return []
    out = []
    for e in raw:
        if isinstance(e, dict) and e.get("ph") == "C" and isinstance(e.get("args"), dict):
            for k, v in e["args"].items():
                val = _num(v, float)
                if val is not None:
                    out.append({"name": f"{e.get('name')}.{k}" if len(e["args"]) > 1 else str(e.get("name")),
                                "ts_us": _num(e.get("ts"), float), "pid": str(e.get("pid")), "value": val})
    return out
