"""Kineto/Chrome profiler traces as pandas tables, read once through a columnar cache (data layer).

``load_trace`` parses a trace file (``.json`` or ``.json.gz``, torch 1.8 → 2.x, CPU, CUDA, ROCm)
with the streaming parser in ``trace_parse``, cleans it (drops events without a timestamp,
clamps negative durations, sorts by time) and stores the tables as Arrow IPC files in the cache
(a trace above IN_MEMORY_BYTES in bounded memory: ``trace_spill``, the tables are never whole in
memory during the pass); the returned tables, like later calls, read those files when first used. ``load_traces`` accepts a run folder, a trace file or a
folder of traces (one file per rank/worker, or torch-tb-profiler's one sub-folder per run).
See docs/architecture.md "Trace tables" for the columns.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from app.data import tbprofiler, trace_cache
from app.data.safe_io import UnsafePath, resolve_inside
from app.data.trace_files import TRACE_SUFFIXES, find_trace_run_folders, rank_from_name, scan_trace_folder
from app.data.trace_kinds import TABLES, Progress
from app.errors import TraceError, UsageError
from profiler_agent.runformat import layout

# pandas, pyarrow and the parser are imported where they are used, not here: a trace opened from
# the cache whose analysis is cached too (a warm `torchscope analyze`) needs none of them, and
# pandas alone costs ~0.3 s and ~100 MB at start-up (docs/trace-engine.md, "A CLI that starts fast").
if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from app.data.trace_envelope import TraceFields
    from app.data.trace_parse import ParsedTrace
    from app.data.trace_spill import SpilledTable

__all__ = ["TraceTables", "TraceSet", "trace_rank", "known_rank", "load_trace", "load_traces", "start_split_parse", "list_trace_paths", "readable_trace_paths", "trace_run_folders", "rank_from_name",
           "Progress", "load_memory_timeline_raw"]


class TraceTables:
    """One trace file as tables; see docs/architecture.md "Trace tables" for every column.

    ``events``, ``memory``, ``flows``, ``counters`` and ``threads`` are DataFrames. A trace opened
    from the cache reads each of them from its cache file the first time it is used, so opening a
    trace whose analysis is cached too (``analyze_traces``) reads no event at all. ``cache_entry``
    is the cache folder the tables came from or were written to (None without a cache).
    """

    def __init__(self, path: Path, rank: int, meta: TraceFields, warnings: list[str],
                 events: pd.DataFrame | None = None, memory: pd.DataFrame | None = None,
                 flows: pd.DataFrame | None = None, counters: pd.DataFrame | None = None,
                 threads: pd.DataFrame | None = None, n_events: int = 0, from_cache: bool = False, *,
                 cache_entry: Path | None = None,
                 loader: Callable[[str], pd.DataFrame] | None = None) -> None:
        self.path = path
        self.rank = rank
        self.meta = meta
        self.warnings = warnings
        self.n_events = n_events  # events in the file, of every phase (the events table keeps only "X")
        self.from_cache = from_cache
        self.cache_entry = cache_entry
        self._tables: dict[str, pd.DataFrame | None] = {
            "events": events, "memory": memory, "flows": flows, "counters": counters, "threads": threads}
        self._loader = loader
        self._lock = threading.Lock()

    def _table(self, name: str) -> pd.DataFrame:
        df = self._tables[name]
        if df is None and self._loader is not None:
            with self._lock:  # two threads of the app asking at once read the file once
                df = self._tables[name]
                if df is None:
                    df = self._tables[name] = self._loader(name)
        return df

    @property
    def events(self) -> pd.DataFrame:
        return self._table("events")

    @property
    def memory(self) -> pd.DataFrame:
        return self._table("memory")

    @property
    def flows(self) -> pd.DataFrame:
        return self._table("flows")

    @property
    def counters(self) -> pd.DataFrame:
        return self._table("counters")

    @property
    def threads(self) -> pd.DataFrame:
        return self._table("threads")

    def __getstate__(self) -> dict[str, Any]:  # pickling (e.g. a cache) takes every table along
        for name in TABLES:
            self._table(name)
        state = dict(self.__dict__)
        state["_loader"] = None
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"TraceTables(path={str(self.path)!r}, rank={self.rank}, n_events={self.n_events})"


TraceSet: TypeAlias = Sequence[TraceTables]  # one trace or many (one per rank): always a sequence in analysis


def known_rank(path: Path, meta: TraceFields) -> int | None:
    """``distributedInfo.rank``, else the rank in the file name, else None (no rank information)."""
    info = meta.get("distributedInfo")
    if isinstance(info, dict):
        r = info.get("rank")
        if isinstance(r, int) and not isinstance(r, bool) and r >= 0:
            return r
    return rank_from_name(path.name)


def trace_rank(path: Path, meta: dict[str, Any]) -> int:
    """The rank load_traces gives the trace ``path`` whose metadata is ``meta`` (0 when unknown)."""
    found = known_rank(path, meta)
    return found if found is not None else 0


_rank = trace_rank


def _warn_unranked(traces: list[TraceTables]) -> None:
    """Traces without rank information all get rank 0; say so when that makes ranks collide.

    Distinct ranks are not invented (file order says nothing about ranks)."""
    if len(traces) < 2:
        return
    unranked = [t for t in traces if known_rank(t.path, t.meta) is None]
    zero = [t for t in traces if t.rank == 0]
    if not unranked or len(zero) < 2:
        return
    names = ", ".join(t.path.name for t in unranked)
    if len(unranked) > 1:
        msg = f"{len(unranked)} traces have no rank information and were all given rank 0: {names}"
    else:
        others = ", ".join(t.path.name for t in zero if t is not unranked[0])
        msg = f"1 trace has no rank information and was given rank 0: {names} (as {others})"
    for t in unranked:
        t.warnings.append(f"{t.path}: {msg}")


def _world_size(meta: TraceFields) -> int | None:
    info = meta.get("distributedInfo")
    ws = info.get("world_size") if isinstance(info, dict) else None
    return ws if isinstance(ws, int) and not isinstance(ws, bool) and ws > 0 else None


def _warn_world_sizes(traces: list[TraceTables]) -> None:
    """Say so when the traces record different world sizes (``distributedInfo.world_size``): they
    cannot be the ranks of one job. They are still read, with the warning on each one."""
    sizes: dict[int, list[str]] = {}
    for t in traces:
        ws = _world_size(t.meta)
        if ws is not None:
            sizes.setdefault(ws, []).append(t.path.name)
    if len(sizes) < 2:
        return
    said = "; ".join(f"{ws} ({', '.join(names)})" for ws, names in sorted(sizes.items()))
    for t in traces:
        if _world_size(t.meta) is not None:
            t.warnings.append(f"{t.path}: the traces record different world sizes: {said}; they are not the ranks "
                              "of one job (to compare two runs: torchscope diff A B)")


def load_memory_timeline_raw(path: str | os.PathLike[str]) -> pd.DataFrame:
    """``export_memory_timeline``'s raw records of ``path`` (app.data.trace_memory, imported when used)."""
    from app.data.trace_memory import load_memory_timeline_raw as load

    return load(path)


def _to_pandas(tables: dict[str, pa.Table], name: str) -> pd.DataFrame:
    """Convert and drop the Arrow table, freeing its buffers as columns are converted (peak memory)."""
    import pandas as pd
    import pyarrow as pa

    table = tables.pop(name)
    # Integer columns with nulls stay integers (Int64) instead of turning into floats.
    return table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get, ignore_metadata=True,
                           self_destruct=True, split_blocks=True)


def _clean_events(events: pa.Table, path: Path, warnings: list[str]) -> pa.Table:
    """Drop X events without a timestamp, clamp bad durations to 0, sort by (ts, -dur)."""
    import pyarrow.compute as pc

    n = events.num_rows
    if n == 0:
        return events
    if events["ts_us"].null_count:  # filtering copies every column: only when needed
        events = events.filter(pc.is_valid(events["ts_us"]))
    if events.num_rows < n:
        warnings.append(f"{path}: skipped {n - events.num_rows:,} complete events without a timestamp 'ts'")
    dur = events["dur_us"]
    bad = pc.sum(pc.or_kleene(pc.is_null(dur), pc.less(dur, 0))).as_py() or 0
    nan = pc.sum(pc.is_nan(dur.fill_null(0.0))).as_py() or 0
    if bad or nan:
        warnings.append(f"{path}: {bad + nan:,} events have a missing, negative or invalid 'dur'; counted as 0 µs")
        fixed = pc.if_else(pc.or_kleene(pc.is_nan(dur.fill_null(-1.0)), pc.less(dur.fill_null(-1.0), 0)), 0.0, dur)
        events = events.set_column(events.schema.get_field_index("dur_us"), "dur_us", fixed)
    # Parents before children at equal start times: sort by start, then longest first.
    order = pc.sort_indices(events, sort_keys=[("ts_us", "ascending"), ("dur_us", "descending")])
    return events.take(order)


def _sorted(table: pa.Table) -> pa.Table:
    import pyarrow.compute as pc

    if table.num_rows == 0 or "ts_us" not in table.column_names:
        return table
    if table["ts_us"].null_count:
        table = table.filter(pc.is_valid(table["ts_us"]))
    return table.take(pc.sort_indices(table, sort_keys=[("ts_us", "ascending")]))


def _ingest(path: Path, progress: Progress | None) -> trace_cache.CachedTrace:
    from app.data import trace_split
    from app.data.trace_parse import parse_trace_file

    # a child forked by start_split_parse may be parsing the file's tail already (trace_split)
    parsed = trace_split.take(path, progress) or parse_trace_file(path, progress)
    warnings = list(parsed.warnings)
    events, parsed.events = parsed.events, None  # the sorted copy replaces it: never hold both longer
    tables = {
        "events": _clean_events(events, path, warnings),
        "memory": _sorted(parsed.memory),
        "flows": _sorted(parsed.flows),
        "counters": _sorted(parsed.counters),
        "threads": parsed.threads,
    }
    if parsed.n_events == 0 and not warnings:
        warnings.append(f"{path}: the trace has no events")
    return trace_cache.CachedTrace(tables, parsed.meta, warnings, parsed.n_events)


def load_trace(path: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None,
               progress: Progress | None = None, use_cache: bool = True) -> TraceTables:
    """Return the tables of one trace file, from the cache when the file has not changed.

    Raises TraceError (naming the file and the problem) when nothing can be read from it.
    Recoverable problems (truncation, odd fields) are listed in ``warnings`` instead.
    """
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"{p}: no such trace file")
    entry = trace_cache.cache_entry_dir(p, Path(cache_dir) if cache_dir is not None else None)
    cached = trace_cache.read_cached_meta(entry) if use_cache else None
    if cached is not None:  # tables are read from the entry when first used
        if progress is not None:
            size = p.stat().st_size
            progress(size, size)
        return TraceTables(path=p, rank=trace_rank(p, cached.meta), meta=cached.meta, warnings=list(cached.warnings),
                           n_events=cached.n_events, from_cache=True, cache_entry=entry,
                           loader=_cached_loader(p, entry))
    with system_memory_pool():
        try:
            if use_cache:  # into the cache: whole (a small trace) or streamed, sorted batch by batch
                streamed = (_ingest_whole_into(p, entry, progress) if _fits_in_memory(p)
                            else _ingest_into(p, entry, progress))
                if isinstance(streamed, trace_cache.CachedTrace):
                    return TraceTables(path=p, rank=trace_rank(p, streamed.meta), meta=streamed.meta,
                                       warnings=list(streamed.warnings), n_events=streamed.n_events,
                                       from_cache=False, cache_entry=entry,
                                       loader=_cached_loader(p, entry, dict(streamed.tables)))
                cached = streamed[0]  # the cache could not be written: the tables are in memory
            else:
                cached = _ingest(p, progress)
        except OSError as e:
            raise TraceError(f"{p}: cannot be read: {e.strerror or e}") from None
        except MemoryError:
            raise TraceError(f"{p}: not enough memory to read this trace") from None
        t = dict(cached.tables)  # _to_pandas pops each table, so its Arrow buffers go as it is converted
        return TraceTables(
            path=p, rank=trace_rank(p, cached.meta), meta=cached.meta, warnings=list(cached.warnings),
            events=_to_pandas(t, "events"), memory=_to_pandas(t, "memory"), flows=_to_pandas(t, "flows"),
            counters=_to_pandas(t, "counters"), threads=_to_pandas(t, "threads"), n_events=cached.n_events,
            from_cache=False, cache_entry=None,
        )


# A trace of at most this many uncompressed bytes is read into the cache through memory (``_ingest``:
# the tables whole, cleaned, sorted, written in one go) instead of through compressed pieces
# (``_ingest_into``): the same tables, ~0.2 s of CPU less at 100 MB (no compression and no
# second read of every piece) for ~30 MB more at the ingest's peak, which an analysis of the trace
# exceeds anyway, since it holds the events as a DataFrame (benchmarks/README.md "Big traces").
# Above it the streamed path keeps the ingest's memory bounded (docs/trace-engine.md, "Gigabyte traces").
IN_MEMORY_BYTES = 128 << 20


def start_split_parse(path: Path) -> bool:
    """Before the caller's imports: when ``path`` is one big uncompressed trace file that the cache
    lacks, start parsing its tail in a forked child (app.data.trace_split); its next ``load_trace``
    parses only the head and joins the two (in memory up to IN_MEMORY_BYTES, streamed above). True
    when a child was started."""
    from app.data import trace_split

    if trace_cache.read_cached_meta(trace_cache.cache_entry_dir(path)) is not None:
        return False
    return trace_split.start(path, IN_MEMORY_BYTES)


def _fits_in_memory(path: Path) -> bool:
    """Whether ``path`` holds at most IN_MEMORY_BYTES of uncompressed trace. A gzip file's trailer
    holds its uncompressed size modulo 4 GiB; it is read only for a file small enough that its
    content cannot plausibly reach that (a trace compresses 5-20x)."""
    size = path.stat().st_size
    if size > IN_MEMORY_BYTES:
        return False
    if path.name.endswith(".gz"):
        if size > IN_MEMORY_BYTES // 8:
            return False
        with path.open("rb") as f:
            f.seek(max(0, size - 4))
            size = int.from_bytes(f.read(4), "little")
    return size <= IN_MEMORY_BYTES


def _ingest_whole_into(path: Path, entry: Path,
                       progress: Progress | None) -> trace_cache.CachedTrace | tuple[trace_cache.CachedTrace]:
    """``_ingest_into`` for a small trace (IN_MEMORY_BYTES): the tables are read into memory,
    cleaned and sorted, then written to the entry. Returns what ``_ingest_into`` returns."""
    cached = _ingest(path, progress)
    if trace_cache.write_cached(entry, cached.tables, cached.meta, cached.warnings, cached.n_events):
        # the events, which every analysis reads first, are kept rather than read back from the entry
        return trace_cache.CachedTrace({"events": cached.tables["events"]}, cached.meta, cached.warnings,
                                       cached.n_events)
    return (cached,)


def _ingest_into(path: Path, entry: Path,
                 progress: Progress | None) -> trace_cache.CachedTrace | tuple[trace_cache.CachedTrace]:
    """Parse ``path`` into the cache entry ``entry`` in bounded memory (app.data.trace_spill):
    the tables are kept compressed while the file is read, then sorted and written a batch at a
    time. Returns the entry's metadata (``tables`` empty: they are in the entry), or, when the
    entry cannot be written, ``(CachedTrace,)`` with the tables in memory.

    Same tables, warnings and metadata as ``_ingest`` (tests/data/test_trace_spill.py)."""
    from app.data import trace_split
    from app.data.trace_parse import parse_trace_file

    # a child forked by start_split_parse may be parsing the file's tail already (trace_split)
    parsed = trace_split.take_spilled(path, progress) or parse_trace_file(path, progress, spill=True)
    spilled = parsed.spilled
    assert spilled is not None
    try:
        return _write_spilled(path, entry, parsed, spilled)
    finally:
        for s in spilled.values():
            s.close()


def _write_spilled(path: Path, entry: Path, parsed: ParsedTrace,
                   spilled: dict[str, SpilledTable]) -> trace_cache.CachedTrace | tuple[trace_cache.CachedTrace]:
    warnings = list(parsed.warnings)
    sources: dict[str, Any] = {
        "events": spilled["events"].sorted_source(path, warnings, clean=True),
        "memory": spilled["memory"].sorted_source(path, warnings, clean=False),
        "flows": spilled["flows"].sorted_source(path, warnings, clean=False),
        "counters": _sorted(parsed.counters),
        "threads": spilled["threads"].sorted_source(path, warnings, clean=False),
    }
    if parsed.n_events == 0 and not warnings:
        warnings.append(f"{path}: the trace has no events")
    if trace_cache.write_cached(entry, sources, parsed.meta, warnings, parsed.n_events):
        return trace_cache.CachedTrace({}, parsed.meta, warnings, parsed.n_events)
    tables = {name: src if name == "counters" else src.to_table() for name, src in sources.items()}
    return (trace_cache.CachedTrace(tables, parsed.meta, warnings, parsed.n_events),)


_pool_lock = threading.Lock()
_pool_users = 0
_pool_saved: pa.MemoryPool | None = None


@contextmanager
def system_memory_pool() -> Iterator[None]:
    """Make Arrow allocate from the system allocator while inside; the previous default pool is
    restored when the last thread inside leaves (also on error).

    pyarrow's default pool (mimalloc in its wheels) keeps the pages an ingest frees for reuse, so
    every transient buffer of the pass adds to the process's peak: measured on the 20 MB benchmark
    trace, 67 MB above the imports with mimalloc and 33 MB with the system pool, at equal CPU time
    (benchmarks/README.md "Trace ingest"). Buffers remember their pool, so tables made inside are
    used and freed normally afterwards."""
    global _pool_users, _pool_saved
    import pyarrow as pa

    with _pool_lock:
        if _pool_users == 0:
            _pool_saved = pa.default_memory_pool()
            pa.set_memory_pool(pa.system_memory_pool())
        _pool_users += 1
    try:
        yield
    finally:
        with _pool_lock:
            _pool_users -= 1
            if _pool_users == 0 and _pool_saved is not None:
                pa.set_memory_pool(_pool_saved)
                _pool_saved = None


def _cached_loader(p: Path, entry: Path, held: dict[str, pa.Table] | None = None) -> Callable[[str], pd.DataFrame]:
    """Read one table of a cache entry (a table in ``held``, the entry's just written, is converted
    from memory instead, once); if the entry has gone since it was opened (the file changed, or the
    cache was cleaned), parse the file again and serve every table from that."""
    fresh: dict[str, pa.Table] = {}
    held = held if held is not None else {}

    def load(name: str) -> pd.DataFrame:
        with system_memory_pool():
            return _load(name)

    def _load(name: str) -> pd.DataFrame:
        if name in held:
            return _to_pandas(held, name)
        if name not in fresh:
            table = trace_cache.read_cached_table(entry, name)
            if table is not None:
                return _to_pandas({name: table}, name)
            if fresh:  # already converted once from this parse
                raise TraceError(f"{p}: table {name!r} is no longer available")
            try:
                fresh.update(_ingest(p, None).tables)
            except OSError as e:
                raise TraceError(f"{p}: cannot be read: {e.strerror or e}") from None
        return _to_pandas(fresh, name)

    return load


def _is_trace_name(name: str) -> bool:
    return not name.startswith(".") and name.endswith(TRACE_SUFFIXES)


def list_trace_paths(path: str | os.PathLike[str]) -> list[Path]:
    """Return the trace files that ``path`` designates (run folder, file, folder of traces).

    Raises UsageError when the path does not exist or holds no trace file.
    """
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise UsageError(f"{p}: no such file or folder")
    found = layout.list_trace_files(p)
    if not found and (p / layout.TRACES_DIR).is_dir():  # a run whose traces do not follow the name pattern
        found = sorted(f for f in (p / layout.TRACES_DIR).iterdir() if f.is_file() and _is_trace_name(f.name))
    if not found and (p / layout.MANIFEST).is_file():  # a run folder: its other .json files are not traces
        raise UsageError(f"{p}: this run has no profiler traces in '{layout.TRACES_DIR}/' "
                         "(was profiling enabled, and did a profiling window complete?)")
    if not found:
        found = _traces_in(p)
    if not found:  # torch-tb-profiler layout: one sub-folder per run, one file per worker
        for sub in _subfolders_with_traces(p):
            found += _traces_in(sub)
    if not found:
        runs = _run_folders(p)
        if runs:
            raise UsageError(f"{p} is a run store holding {len(runs)} run(s) ({', '.join(r.name for r in runs[:3])}"
                             f"{', ...' if len(runs) > 3 else ''}): pass one run folder, e.g. {runs[0]}")
        raise UsageError(f"{p}: no trace files (*.json, *.json.gz) in this folder, its '{layout.TRACES_DIR}/' "
                         "or its sub-folders")
    return found


def _traces_in(folder: Path) -> list[Path]:
    """The trace files of a folder, by content (app.data.trace_files: the definition import, the
    UI's log-folder mirror and diff use too): memory timelines and other JSON are left out."""
    return list(scan_trace_folder(folder).traces)


def _run_folders(folder: Path) -> list[Path]:
    try:
        return sorted(d for d in folder.iterdir() if d.is_dir() and (d / layout.MANIFEST).is_file())
    except OSError:
        return []


def _subfolders_with_traces(folder: Path) -> list[Path]:
    return find_trace_run_folders(folder)


def trace_run_folders(path: str | os.PathLike[str]) -> list[Path]:
    """Return the run sub-folders that ``list_trace_paths(path)`` reads together when ``path`` is
    a torch-tb-profiler log folder (one sub-folder per run, one trace file per worker), sorted by
    name; [] for a trace file, a run folder or a folder that holds trace files itself."""
    p = Path(path)
    if not p.is_dir() or (p / layout.MANIFEST).is_file() or (p / layout.TRACES_DIR).is_dir():
        return []
    return [] if _traces_in(p) else _subfolders_with_traces(p)


def load_traces(path: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None,
                progress: Progress | None = None, use_cache: bool = True) -> list[TraceTables]:
    """Return one TraceTables per trace file under ``path``, sorted by (rank, file name).

    ``progress(done_bytes, total_bytes)`` is called over all files together. Traces without rank
    information (no ``distributedInfo.rank``, no rank in the name) get rank 0; when that gives two
    traces rank 0, each of them carries a warning naming them.
    """
    paths, outside = _inside(Path(path), list_trace_paths(path))
    sizes = [f.stat().st_size for f in paths]
    total = sum(sizes)
    done = 0
    out = []
    for f, size in zip(paths, sizes):
        sub = None
        if progress is not None:
            base = done
            sub = lambda d, _t, base=base: progress(base + d, total)  # noqa: E731
        out.append(load_trace(f, cache_dir=cache_dir, progress=sub, use_cache=use_cache))
        done += size
    _warn_unranked(out)
    _warn_world_sizes(out)
    for t in out:
        t.warnings.extend(outside)
    out = sorted(out, key=lambda t: (t.rank, t.path.name))
    if out and Path(path).is_dir():
        out[0].warnings.extend(_skipped_trace_files(paths))
    return out


def _skipped_trace_files(paths: list[Path]) -> list[str]:
    """One message per file left out of the folders ``paths`` were read from that a user would
    take for a trace: an empty (0-byte) ``*.json[.gz]`` file, or one named ``*.pt.trace.json[.gz]``
    that is not a readable trace. Other JSON (configs, memory timelines) is left out silently."""
    out = []
    for folder in sorted({p.parent for p in paths}):
        for sk in scan_trace_folder(folder).skipped:
            if sk.reason == "the file is empty" or ".pt.trace." in sk.path.name:
                out.append(f"{sk.path}: skipped, {sk.reason}")
    return out


def readable_trace_paths(path: str | os.PathLike[str]) -> list[Path]:
    """The trace files ``load_traces(path)`` reads: ``list_trace_paths`` less links out of the folder."""
    return _inside(Path(path), list_trace_paths(path))[0]


def _inside(folder: Path, paths: list[Path]) -> tuple[list[Path], list[str]]:
    """The trace files of ``paths`` that stay inside ``folder`` (the run or folder the user named),
    and one message per file that is a link out of it (skipped). Raises TraceError when no file
    is left. A trace file named directly is read wherever it is; a run of the tb-profiler mirror
    the app builds may link into the tb log folder it mirrors (app.data.tbprofiler.mirrored_folder)."""
    if not folder.is_dir():
        return paths, []
    mirrored = tbprofiler.mirrored_folder(folder) if (folder / layout.MANIFEST).is_file() else None
    kept, outside = [], []
    for f in paths:
        try:
            try:
                resolve_inside(folder, f)
            except UnsafePath:
                if mirrored is None:
                    raise
                resolve_inside(mirrored, f)
        except UnsafePath as e:
            outside.append(f"{e} (skipped: a trace in a folder is read only from inside it)")
        else:
            kept.append(f)
    if not kept and outside:
        raise TraceError("; ".join(outside))
    return kept, outside
