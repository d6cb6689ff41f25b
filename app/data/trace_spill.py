"""A trace table kept as lz4-compressed pieces while a trace is read, written out sorted in batches (data layer).

What bounds an ingest's memory. The parser (``trace_parse``) hands each decoded piece's table to a
``SpilledTable``, which appends it to a temporary file as an lz4-compressed Arrow IPC stream (~6×
smaller than the columns, and out of the process's memory) with its dictionary columns as indices
into one dictionary per column that grows as new values appear. At the end the sort keys alone are
decompressed (``ts_us``, and ``dur_us`` for complete events), cleaned and sorted exactly as
``trace._clean_events`` / ``trace._sorted`` do for a table in memory, and the sorted table is
produced ``BATCH_ROWS`` rows at a time, each column of a batch gathered from the pieces holding
its rows (one column of those pieces read and decompressed at a time), straight into the cache
file. So the peak is the sort keys (~28 bytes per event), one batch and one column of the pieces
it touches — never the whole table (docs/trace-engine.md, "Gigabyte traces").

The result is the same table as concatenating the pieces, unifying their dictionaries and
sorting (the unified dictionary lists values in the order they first appear, piece after piece,
as ``pa.Table.unify_dictionaries`` does; the sort is the same stable sort on the same keys):
``tests/data/test_trace_spill.py`` checks it on every shared trace.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["SpilledTable", "SortedSource", "BATCH_ROWS"]

BATCH_ROWS = 1 << 18  # rows of the sorted table built (and written) at a time
_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")
_INT32 = pa.int32()


class SpilledTable:
    """The pieces of one kind of table (events, memory, flows, threads), compressed."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema  # set again from the first piece (the parser's exact schema)
        self._file: IO[bytes] | None = None  # the compressed pieces, one after the other (deleted on close)
        self._pieces: list[tuple[int, int]] = []  # (offset, length) of each piece in the file
        self._size = 0
        self._starts: list[int] = [0]  # row offset of each piece, and the total at the end
        self._dicts: dict[int, dict[object, int]] = {}  # field → value → index in its dictionary
        self._plain: pa.Schema | None = None

    @property
    def num_rows(self) -> int:
        return self._starts[-1]

    def add(self, table: pa.Table) -> None:
        """Keep one piece's table (``table.schema`` must be the same for every piece)."""
        if not table.num_rows:
            return
        if self._plain is None:
            self.schema = table.schema
            self._dicts = {i: {} for i, f in enumerate(table.schema) if pa.types.is_dictionary(f.type)}
            self._plain = pa.schema([pa.field(f.name, _INT32) if i in self._dicts else f
                                     for i, f in enumerate(table.schema)])
        cols = [self._global_codes(i, col) if i in self._dicts else col for i, col in enumerate(table.columns)]
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self._plain, options=_OPTIONS) as w:
            w.write_table(pa.Table.from_arrays(cols, schema=self._plain))
        data = sink.getvalue()
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="torchscope-ingest-")  # noqa: SIM115 (closed by close())
        self._file.write(memoryview(data))
        self._pieces.append((self._size, data.size))
        self._size += data.size
        self._starts.append(self._starts[-1] + table.num_rows)

    def close(self) -> None:
        """Delete the pieces' file (also done when the object is freed)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def _piece(self, p: int) -> pa.Buffer:
        assert self._file is not None
        self._file.flush()
        offset, size = self._pieces[p]
        return pa.py_buffer(os.pread(self._file.fileno(), size, offset))

    def _global_codes(self, field: int, col: pa.ChunkedArray) -> pa.ChunkedArray:
        """The column's dictionary indices, mapped into the column's dictionary for the whole file."""
        memo = self._dicts[field]
        out = []
        for chunk in col.chunks:
            words = chunk.dictionary.to_pylist()
            remap = pa.array([memo.setdefault(w, len(memo)) for w in words], _INT32)
            out.append(pc.take(remap, chunk.indices))
        return pa.chunked_array(out, _INT32)

    def dictionary(self, field: int) -> pa.Array:
        return pa.array(list(self._dicts[field]), self.schema.field(field).type.value_type)

    def column(self, field: int, pieces: Iterator[int] | list[int] | None = None) -> pa.Array:
        """One column (dictionary fields: global indices) of the given pieces (default all), as one array."""
        wanted = range(len(self._pieces)) if pieces is None else pieces
        opts = pa.ipc.IpcReadOptions(included_fields=[field])
        chunks: list[pa.Array] = []
        for p in wanted:
            table = pa.ipc.open_stream(self._piece(p), options=opts).read_all()
            chunks += table.column(0).chunks
        typ = self._plain.field(field).type if self._plain is not None else self.schema.field(field).type
        return pa.concat_arrays(chunks) if chunks else pa.array([], typ)

    def sorted_source(self, path: Path, warnings: list[str], *, clean: bool) -> SortedSource:
        """The table sorted as the in-memory path sorts it; ``clean`` (complete events): events
        without ``ts`` dropped and bad ``dur`` set to 0, with the same warnings, added now."""
        return SortedSource(self, path, warnings, clean=clean)

    def to_table(self) -> pa.Table:
        """The pieces as one table in memory, in file order (for a cache that cannot be written)."""
        if not self._pieces:
            return self.schema.empty_table()
        cols = []
        for i in range(len(self.schema)):
            col = self.column(i)
            cols.append(pa.DictionaryArray.from_arrays(col, self.dictionary(i)) if i in self._dicts else col)
        return pa.Table.from_arrays(cols, schema=self.schema)


class SortedSource:
    """A ``SpilledTable`` in the order of the cleaned table, built ``BATCH_ROWS`` rows at a time
    (``trace_cache.BatchSource``)."""

    def __init__(self, spilled: SpilledTable, path: Path, warnings: list[str], *, clean: bool) -> None:
        self.spilled = spilled
        self.schema = spilled.schema
        names = spilled.schema.names
        self._keys: dict[int, pa.Array] = {}
        n = spilled.num_rows
        if n == 0 or "ts_us" not in names:  # nothing to sort (threads): file order
            self._rows = np.arange(n, dtype=np.int64)
            return
        ts = spilled.column(names.index("ts_us"))
        ids = pa.array(np.arange(n, dtype=np.int32 if n < 2**31 else np.int64))  # half the memory of int64
        if ts.null_count:
            valid = pc.is_valid(ts)
            ts, ids = ts.filter(valid), ids.filter(valid)
        keys = {"ts_us": ts}
        sort_keys = [("ts_us", "ascending")]
        if clean:
            keys["dur_us"] = self._clean_dur(spilled.column(names.index("dur_us")), valid if len(ts) < n else None,
                                             n - len(ts), path, warnings)
            sort_keys.append(("dur_us", "descending"))
        del ts
        order = pc.sort_indices(pa.table(keys), sort_keys=sort_keys)
        self._rows = ids.take(order).to_numpy()
        del ids
        for k in list(keys):  # one sorted copy at a time, each unsorted column dropped as it goes
            self._keys[names.index(k)] = keys.pop(k).take(order)

    @staticmethod
    def _clean_dur(dur: pa.Array, valid: pa.Array | None, dropped: int, path: Path, warnings: list[str]) -> pa.Array:
        """``dur_us`` of the events kept, missing/negative/NaN set to 0, with trace._clean_events'
        warnings in its order."""
        if valid is not None:
            dur = dur.filter(valid)
            warnings.append(f"{path}: skipped {dropped:,} complete events without a timestamp 'ts'")
        bad = pc.sum(pc.or_kleene(pc.is_null(dur), pc.less(dur, 0))).as_py() or 0
        nan = pc.sum(pc.is_nan(dur.fill_null(0.0))).as_py() or 0
        if bad or nan:
            warnings.append(f"{path}: {bad + nan:,} events have a missing, negative or invalid 'dur'; counted as 0 µs")
            dur = pc.if_else(pc.or_kleene(pc.is_nan(dur.fill_null(-1.0)), pc.less(dur.fill_null(-1.0), 0)), 0.0, dur)
        return dur

    @property
    def num_rows(self) -> int:
        return len(self._rows)

    def batches(self) -> Iterator[pa.RecordBatch]:
        sp = self.spilled
        starts = np.asarray(sp._starts, dtype=np.int64)
        dicts = {i: sp.dictionary(i) for i in sp._dicts}
        for lo in range(0, len(self._rows), BATCH_ROWS):
            rows = self._rows[lo:lo + BATCH_ROWS].astype(np.int64)
            piece = np.searchsorted(starts, rows, side="right") - 1
            touched = np.unique(piece)
            sizes = starts[touched + 1] - starts[touched]
            base = np.concatenate(([0], np.cumsum(sizes)[:-1]))
            local = pa.array(base[np.searchsorted(touched, piece)] + (rows - starts[piece]))
            cols = []
            for i in range(len(self.schema)):
                if i in self._keys:
                    cols.append(self._keys[i].slice(lo, len(rows)))
                    continue
                col = sp.column(i, touched.tolist()).take(local)
                cols.append(pa.DictionaryArray.from_arrays(col, dicts[i]) if i in dicts else col)
            yield pa.RecordBatch.from_arrays(cols, schema=self.schema)

    def to_table(self) -> pa.Table:
        """The sorted table in memory (for a cache that cannot be written)."""
        batches = list(self.batches())
        return pa.Table.from_batches(batches, schema=self.schema) if batches else self.schema.empty_table()
