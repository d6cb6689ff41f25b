"""The parse's optional accelerator: a piece of events read by C into the tables of trace_columns (data layer).

``app/data/_event_scan.c`` reads a JSON array of Kineto events straight into flat columns, without
a Python object per event field (the pure-Python parse's cost: msgspec structs, then Arrow columns
from them). ``scan_tables`` turns its columns into exactly the tables ``columns_from_events`` makes
of the same events, with the same Arrow operations (dictionary encoding in order of first use,
the same id and shape-text rules), so that the cache, the analysis and every document are the same
whichever path read a piece (tests/data/test_event_scan.py compares them table by table).

The extension is built by ``pip install`` where a C compiler is found (setup.py; optional). Without
it, or with ``TORCHSCOPE_PURE_PYTHON=1``, or for a piece it gives up on (a string flow id, an escaped
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
    id_text,
    int_ids,
    lenient_ints,
    small_dict,
    text_dictionary,
)

try:
    from app.data import _event_scan  # type: ignore[attr-defined]
except ImportError:  # not built (no C compiler at install): the pure-Python parse reads every piece
    _event_scan = None

__all__ = ["ScannedEvents", "scan_tables", "accelerated", "PURE_PYTHON_ENV"]

PURE_PYTHON_ENV = "TORCHSCOPE_PURE_PYTHON"  # "1": never use the accelerator (comparisons, debugging)


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
    words = pa.array(cols["words"], pa.string())
    kinds = {kind: _Kind(cols[kind], cols["words"], words) for kind in ("events", "memory", "flows", "threads")}
    tables = {"events": kinds["events"].complete(cols["input_shapes_texts"], cols["input_types_texts"]),
              "memory": kinds["memory"].memory(), "flows": kinds["flows"].flows(), "threads": kinds["threads"].threads()}
    return ScannedEvents(tables, cols["has_counters"], cols["n_events"])


class _Kind:
    """The scanner's columns of one kind of event (one value per event of that kind), as Arrow."""

    def __init__(self, cols: dict[str, Any], words: list[str], word_array: pa.Array) -> None:
        self.cols, self.n, self.words, self.word_array = cols, cols["n"], words, word_array

    def _numbers(self, key: str, dtype: type[np.generic], arrow: pa.DataType) -> pa.Array:
        """A number column, null where the scanner's ``<key>_ok`` is 0."""
        ok = np.frombuffer(self.cols[f"{key}_ok"], np.uint8)
        values = np.frombuffer(self.cols[key], dtype)
        return pa.array(values, arrow) if ok.all() else pa.array(values, arrow, mask=ok == 0)

    def _ints(self, key: str) -> pa.Array:
        return self._numbers(key, np.int64, pa.int64())

    def _floats(self, key: str) -> pa.Array:
        return self._numbers(key, np.float64, pa.float64())

    def _codes(self, key: str) -> pa.Array:
        return pa.array(np.frombuffer(self.cols[key], np.int32), pa.int32())

    def _values(self, key: str, rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, list[Any] | None]:
        """(kinds, int values, and the Python values when some are strings: ints, words, None)."""
        kind = np.frombuffer(self.cols[f"{key}_ok"], np.uint8)
        values = np.frombuffer(self.cols[key], np.int64)
        if rows is not None:
            kind, values = kind[rows], values[rows]
        if not (kind == 2).any():
            return kind, values, None
        return kind, values, [None if k == 0 else int(v) if k == 1 else self.words[v] for k, v in zip(kind, values)]

    def _ids(self, key: str, rows: np.ndarray | None = None) -> pa.Array:
        """pid/tid as trace_columns encodes them: ints, unless some are strings ("Spans")."""
        kind, values, mixed = self._values(key, rows)
        return int_ids(pa.array(values, pa.int64(), mask=kind == 0)) if mixed is None else small_dict(mixed)

    def _stream(self) -> pa.Array:
        """args.stream as trace_columns reads it: ints, with text as ``int(v, 0)`` (ROCm's "0x0")."""
        kind, values, mixed = self._values("stream", None)
        return pa.array(values, pa.int64(), mask=kind == 0) if mixed is None else lenient_ints(mixed)

    def _text(self, key: str) -> pa.Array:
        """name or cat, dictionary-encoded in order of first use with null as "" (trace_columns._encode)."""
        dictionary = self.word_array.take(self._codes(f"{key}_words"))
        return pa.DictionaryArray.from_arrays(self._codes(key), dictionary)

    def complete(self, shapes: list[bytes], types: list[bytes]) -> pa.Table:
        if not self.n:
            return empty_table(EVENT_SCHEMA)
        ext, ext_lc = self._ints("external_id"), self._ints("external_id_lc")
        if ext_lc.null_count < len(ext_lc):  # older torch writes "external id"; "External id" wins
            ext = pc.coalesce(ext, ext_lc)
        return pa.Table.from_arrays([
            self._text("name"), self._text("cat"), self._floats("ts"), self._floats("dur"),
            self._ids("pid"), self._ids("tid"), self._ints("correlation"), ext, self._ints("device"),
            self._stream(),
            text_dictionary(self._codes("input_shapes"), shapes, True),
            text_dictionary(self._codes("input_types"), types, False),
            self._ints("nbytes"), self._ints("sequence"), self._ints("fwd_tid"),
        ], schema=EVENT_SCHEMA)

    def memory(self) -> pa.Table:
        if not self.n:
            return empty_table(MEMORY_SCHEMA)
        return pa.Table.from_arrays([
            self._floats("ts"), self._ints("device_type"), self._ints("device_id"), self._ints("addr"),
            self._ints("mem_bytes"), self._ints("total_allocated"), self._ints("total_reserved"),
            self._ids("pid"), self._ids("tid"),
        ], schema=MEMORY_SCHEMA)

    def flows(self) -> pa.Table:
        if not self.n:
            return empty_table(FLOW_SCHEMA)
        ph = np.frombuffer(self.cols["ph"], np.uint8)
        distinct, first = np.unique(ph, return_index=True)
        order = distinct[np.argsort(first)]  # the ph letters in order of first use, as trace_columns._encode orders them
        index = np.zeros(256, np.int32)
        index[order] = np.arange(len(order), dtype=np.int32)
        ph_text = pa.DictionaryArray.from_arrays(pa.array(index[ph], pa.int32()),
                                                 pa.array([chr(c) for c in order], pa.string()))
        return pa.Table.from_arrays([
            id_text(self._ints("id")), self._text("cat"), ph_text, self._floats("ts"), self._ids("pid"), self._ids("tid"),
        ], schema=FLOW_SCHEMA)

    def threads(self) -> pa.Table:
        names = np.frombuffer(self.cols["name_word"], np.int32)
        labels = np.frombuffer(self.cols["arg_name_word"], np.int32)
        words = self.words
        keep = [i for i in range(self.n) if labels[i] >= 0 and names[i] >= 0
                and words[names[i]] in ("process_name", "thread_name")]
        if not keep:
            return empty_table(THREAD_SCHEMA)
        rows = np.array(keep, np.int64)
        kind = ["process" if words[names[i]] == "process_name" else "thread" for i in keep]
        return pa.Table.from_arrays([self._ids("pid", rows), self._ids("tid", rows), small_dict(kind),
                                     pa.array([words[labels[i]] for i in keep], pa.string())], schema=THREAD_SCHEMA)
