"""The parse's optional accelerator: a piece of events read by C into the tables of trace_columns (data layer).

``app/data/_event_scan.c`` reads a JSON array of Kineto events straight into flat columns, without
a Python object per event field (the pure-Python parse's cost: msgspec structs, then Arrow columns
from them). ``scan_tables`` turns its columns into exactly the tables ``columns_from_events`` makes
of the same events, with the same Arrow operations (dictionary encoding in order of first use,
the same id and shape-text rules), so that the cache, the analysis and every document are the same
whichever path read a piece (tests/data/test_event_scan.py compares them table by table).

The extension is built by ``pip install`` where a C compiler is found (setup.py; optional). Without
it, or with ``TORCHSCOPE_PURE_PYTHON=1``, or for a piece it gives up on (a string stream or flow id, an escaped
name, a field of an odd type, a wrong cut: the list in the C file's header), the piece is read by
the Python path, which knows every leniency and warning.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from app.data.trace_columns import (
    EVENT_SCHEMA,
    FLOW_SCHEMA,
    MEMORY_SCHEMA,
    THREAD_SCHEMA,
    empty_table,
    encode_text,
    id_text,
    int_ids,
    shape_text,
    small_dict,
)

try:
    from app.data import _event_scan  # type: ignore[attr-defined]
except ImportError:  # not built (no C compiler at install): the pure-Python parse reads every piece
    _event_scan = None

__all__ = ["ScannedEvents", "scan_tables", "accelerated", "PURE_PYTHON_ENV"]

PURE_PYTHON_ENV = "TORCHSCOPE_PURE_PYTHON"  # "1": never use the accelerator (comparisons, debugging)

_X, _MEMORY_PH, _FLOW_PH, _META, _COUNTER = ord("X"), (ord("i"), ord("I")), (ord("s"), ord("f"), ord("t")), ord("M"), ord("C")


# a flow's ph byte -> its text, by index into _FLOW_WORDS
_FLOW_WORDS = pa.array([chr(c) for c in _FLOW_PH], pa.string())
_FLOW_INDEX = np.zeros(256, np.int32)
_FLOW_INDEX[list(_FLOW_PH)] = np.arange(len(_FLOW_PH), dtype=np.int32)


def accelerated() -> bool:
    """Whether pieces are read by the C accelerator (built, and not switched off)."""
    return _event_scan is not None and os.environ.get(PURE_PYTHON_ENV, "") != "1"


@dataclass
class ScannedEvents:
    """The events of one piece as tables (``columns_from_events``' result) and their number."""

    tables: dict[str, pa.Table]
    has_counters: bool
    n: int

    def __len__(self) -> int:
        return self.n


def scan_tables(data: bytes | bytearray | memoryview) -> ScannedEvents | None:
    """The tables of the JSON array of events ``data``, read by the accelerator; None when it is not
    built, is switched off, or gives the piece up (the caller then decodes it in Python)."""
    if not accelerated():
        return None
    cols = _event_scan.scan(data)
    if cols is None:
        return None
    return ScannedEvents(_Columns(cols).tables(), bool((_ph(cols) == _COUNTER).any()), cols["n"])


def _ph(cols: dict[str, Any]) -> np.ndarray:
    return np.frombuffer(cols["ph"], np.uint8)


class _Columns:
    """The scanner's flat columns, and the rows of each kind of event taken from them."""

    def __init__(self, cols: dict[str, Any]) -> None:
        self.cols = cols
        self.n = cols["n"]
        self.ph = _ph(cols)
        self.words = pa.array(cols["words"], pa.string())

    def tables(self) -> dict[str, pa.Table]:
        ph = self.ph
        name = self._codes("name")
        memory = np.isin(ph, _MEMORY_PH)
        if memory.any():
            word = self.cols["words"].index("[memory]") if "[memory]" in self.cols["words"] else -2
            memory &= name == word
        return {"events": self._complete(np.flatnonzero(ph == _X)),
                "memory": self._memory(np.flatnonzero(memory)),
                "flows": self._flows(np.flatnonzero(np.isin(ph, _FLOW_PH))),
                "threads": self._threads(np.flatnonzero(ph == _META))}

    # ---- columns of the rows ``rows`` (an index array)

    def _codes(self, key: str) -> np.ndarray:
        return np.frombuffer(self.cols[key], np.int32)

    def _ints(self, key: str, rows: np.ndarray) -> pa.Array:
        values = np.frombuffer(self.cols[key], np.int64)[rows]
        ok = np.frombuffer(self.cols[f"{key}_ok"], np.uint8)[rows]
        return pa.array(values, pa.int64(), mask=ok == 0)

    def _ids(self, key: str, rows: np.ndarray) -> pa.Array:
        """pid/tid as trace_columns encodes them: ints, unless some are strings ("Spans")."""
        kind = np.frombuffer(self.cols[f"{key}_ok"], np.uint8)[rows]
        if not (kind == 2).any():
            return int_ids(self._ints(key, rows))
        values = np.frombuffer(self.cols[key], np.int64)[rows]
        words = self.cols["words"]
        return small_dict([None if k == 0 else int(v) if k == 1 else words[v] for k, v in zip(kind, values)])

    def _floats(self, key: str, rows: np.ndarray) -> pa.Array:
        values = np.frombuffer(self.cols[key], np.float64)[rows]
        ok = np.frombuffer(self.cols[f"{key}_ok"], np.bool_)[rows]
        return pa.array(values, pa.float64(), mask=~ok)

    def _strings(self, key: str, rows: np.ndarray) -> pa.Array:
        """Text values (null where absent or null), as the structs' ``str | None`` fields give them."""
        codes = self._codes(key)[rows]
        return self.words.take(pa.array(codes, pa.int32(), mask=codes < 0))

    def _raw(self, key: str, rows: np.ndarray) -> pa.Array:
        """Each row's raw JSON text of ``key`` (empty where absent), as a binary array."""
        ends = np.frombuffer(self.cols[f"{key}_end"], np.int64)
        offsets = np.zeros(self.n + 1, np.int64)
        offsets[1:] = ends
        whole = pa.LargeBinaryArray.from_buffers(pa.large_binary(), self.n,
                                                 [None, pa.py_buffer(offsets), pa.py_buffer(self.cols[key])])
        return whole.take(pa.array(rows))

    def _shapes(self, rows: np.ndarray) -> pa.Array:
        """``Input Dims``, else ``Input dims`` (older torch), as trace_columns reads them."""
        dims = self._raw("input_dims", rows)
        lower = np.frombuffer(self.cols["input_dims_lc_end"], np.int64)
        if lower.size and lower[-1]:  # some event has "Input dims"
            dims_lc = self._raw("input_dims_lc", rows)
            dims = pc.if_else(pc.equal(pc.binary_length(dims), 0), dims_lc, dims)
        return shape_text(dims, True)

    # ---- the tables

    def _complete(self, rows: np.ndarray) -> pa.Table:
        if not len(rows):
            return empty_table(EVENT_SCHEMA)
        ext, ext_lc = self._ints("external_id", rows), self._ints("external_id_lc", rows)
        if ext_lc.null_count < len(ext_lc):  # older torch writes "external id"; "External id" wins
            ext = pc.coalesce(ext, ext_lc)
        return pa.Table.from_arrays([
            encode_text(self._strings("name", rows)), encode_text(self._strings("cat", rows)),
            self._floats("ts", rows), self._floats("dur", rows),
            self._ids("pid", rows), self._ids("tid", rows),
            self._ints("correlation", rows), ext, self._ints("device", rows), self._ints("stream", rows),
            self._shapes(rows), shape_text(self._raw("input_type", rows), False),
            self._ints("nbytes", rows), self._ints("sequence", rows), self._ints("fwd_tid", rows),
        ], schema=EVENT_SCHEMA)

    def _memory(self, rows: np.ndarray) -> pa.Table:
        if not len(rows):
            return empty_table(MEMORY_SCHEMA)
        return pa.Table.from_arrays([
            self._floats("ts", rows), self._ints("device_type", rows), self._ints("device_id", rows),
            self._ints("addr", rows), self._ints("mem_bytes", rows), self._ints("total_allocated", rows),
            self._ints("total_reserved", rows), self._ids("pid", rows), self._ids("tid", rows),
        ], schema=MEMORY_SCHEMA)

    def _flows(self, rows: np.ndarray) -> pa.Table:
        if not len(rows):
            return empty_table(FLOW_SCHEMA)
        ph = _FLOW_WORDS.take(pa.array(_FLOW_INDEX[self.ph[rows]]))
        return pa.Table.from_arrays([
            id_text(self._ints("id", rows)), encode_text(self._strings("cat", rows)), encode_text(ph),
            self._floats("ts", rows), self._ids("pid", rows), self._ids("tid", rows),
        ], schema=FLOW_SCHEMA)

    def _threads(self, rows: np.ndarray) -> pa.Table:
        words = self.cols["words"]
        names, arg_names = self._codes("name")[rows], self._codes("arg_name")[rows]
        keep = [i for i in range(len(rows)) if arg_names[i] >= 0 and names[i] >= 0
                and words[names[i]] in ("process_name", "thread_name")]
        if not keep:
            return empty_table(THREAD_SCHEMA)
        kept = rows[keep]
        kind = ["process" if words[names[i]] == "process_name" else "thread" for i in keep]
        return pa.Table.from_arrays([self._ids("pid", kept), self._ids("tid", kept), small_dict(kind),
                                     pa.array([words[arg_names[i]] for i in keep], pa.string())], schema=THREAD_SCHEMA)
