"""Columnar cache of ingested traces: Arrow IPC files keyed by (path, size, mtime, format) (data layer).

A trace inside a run (``<run>/traces/``) is cached in ``<run>/.cache/``; any other trace, or a
run folder that cannot be written, goes to ``$TORCHSCOPE_CACHE`` or ``~/.cache/torchscope``.
The key changes when the file changes (size or mtime) or when CACHE_VERSION is bumped, so a stale
entry is never read; entries are written to a temporary folder and renamed into place, so a
reader never sees half an entry. Deleting a cache folder is always safe.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from app.data.safe_io import UnsafePath, resolve_inside
from app.data.trace_kinds import TABLES
from profiler_agent.runformat import layout

if TYPE_CHECKING:  # pyarrow is imported where tables are read or written: reading an entry's
    import pyarrow as pa  # metadata (a warm `analyze`) needs none of it

    from app.data.trace_envelope import TraceFields

__all__ = ["CACHE_VERSION", "CACHE_ENV", "TABLES", "SUFFIX", "BatchSource", "CachedTrace", "cache_entry_dir", "read_cached",
           "read_cached_meta", "read_cached_table", "write_cached", "default_cache_dir", "read_entry_document",
           "write_entry_document"]

# Bump when the parser, the kept fields or the table schemas change.
CACHE_VERSION = 7  # 7: bad input read element by element (entries made by 6 may hold fewer events)
CACHE_ENV = "TORCHSCOPE_CACHE"
SUFFIX = ".arrow"  # Arrow IPC file format (Feather v2), lz4-compressed buffers
_META = "meta.json"
_SUB = "traces"
# lz4-compressed Arrow IPC: of Parquet (lz4, zstd, snappy, none) and IPC (lz4, none), the cheapest
# to write and read here (100 MB trace: events written in 31 ms vs 158 ms as lz4 Parquet, read in
# 15 vs 37 ms; 4.6 vs 4.1 MB on disk).
_COMPRESSION = "lz4"


@dataclass(frozen=True)
class CachedTrace:
    tables: dict[str, pa.Table]
    meta: TraceFields
    warnings: list[str]
    n_events: int


def default_cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "torchscope"


def _writable(folder: Path) -> bool:
    probe = folder
    while not probe.exists():
        probe = probe.parent
    return os.access(probe, os.W_OK)


def _inside_run(run: Path, entry: Path) -> bool:
    """False when the run's ``.cache`` (or a folder in it) is a link out of the run: entries are
    written (and stale ones removed) only inside the run; such a run's traces are cached in the
    default folder instead."""
    try:
        resolve_inside(run, entry)
    except UnsafePath:
        return False
    return True


def _hash(text: str, n: int) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogateescape")).hexdigest()[:n]


def _key(path: Path) -> str:
    st = path.stat()
    return _hash(f"{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\0{CACHE_VERSION}", 16)


def _stem(path: Path) -> str:
    """Entry-name prefix shared by every version of one file's entry (stale ones are removed)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in path.name)[:80]
    return f"{safe}-{_hash(str(path.resolve()), 8)}-"


def cache_entry_dir(path: Path, cache_dir: Path | None = None) -> Path:
    """Return the folder that holds (or will hold) the cached tables of ``path``."""
    name = f"{_stem(path)}{_key(path)}"
    if cache_dir is None:
        parent = path.resolve().parent
        run_cache = parent.parent / layout.CACHE_DIR
        if parent.name == layout.TRACES_DIR and _writable(run_cache) and _inside_run(parent.parent,
                                                                                    run_cache / _SUB / name):
            cache_dir = run_cache
        else:
            cache_dir = default_cache_dir()
    return Path(cache_dir) / _SUB / name


def read_cached(entry: Path, columns: dict[str, list[str]] | None = None) -> CachedTrace | None:
    """Return the cached tables, or None when there is no complete, readable entry."""
    meta_file = entry / _META
    if not meta_file.is_file():
        return None
    import pyarrow as pa

    try:
        doc = json.loads(meta_file.read_text(encoding="utf-8"))
        if doc.get("cache_version") != CACHE_VERSION:
            return None
        tables = {name: _read(entry / f"{name}{SUFFIX}", (columns or {}).get(name)) for name in TABLES}
    except (OSError, ValueError, pa.ArrowException):
        return None  # a damaged entry is rebuilt, never trusted
    return CachedTrace(tables, doc.get("meta", {}), doc.get("warnings", []), int(doc.get("n_events", 0)))


def read_cached_meta(entry: Path) -> CachedTrace | None:
    """Return an entry's metadata with no table read yet (``tables`` is empty), or None when the
    entry is missing, incomplete or of another version. Tables are then read one at a time by
    ``read_cached_table``, only when used."""
    try:
        doc = json.loads((entry / _META).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("cache_version") != CACHE_VERSION:
        return None
    if not all((entry / f"{name}{SUFFIX}").is_file() for name in TABLES):
        return None
    return CachedTrace({}, doc.get("meta", {}), doc.get("warnings", []), int(doc.get("n_events", 0)))


def read_cached_table(entry: Path, name: str, columns: list[str] | None = None) -> pa.Table | None:
    """Return one table of an entry, or None when it cannot be read (removed, damaged)."""
    import pyarrow as pa

    try:
        return _read(entry / f"{name}{SUFFIX}", columns)
    except (OSError, ValueError, pa.ArrowException):
        return None


def _read(path: Path, columns: list[str] | None) -> pa.Table:
    import pyarrow as pa

    with pa.OSFile(str(path), "rb") as src:  # read into memory: nothing keeps the file open
        table = pa.ipc.open_file(src).read_all()
    return table.select(columns) if columns is not None else table


class BatchSource(Protocol):
    """A table written a record batch at a time (``trace_spill``: a big trace's sorted tables are
    never whole in memory)."""

    schema: Any  # pa.Schema (pyarrow is not imported at module level here)

    def batches(self) -> Iterator[Any]: ...  # pa.RecordBatch


def _write(table: pa.Table | BatchSource, path: Path) -> None:
    import pyarrow as pa

    options = pa.ipc.IpcWriteOptions(compression=_COMPRESSION)  # made here: takes the current default pool
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema, options=options) as w:
        if isinstance(table, pa.Table):
            w.write_table(table)
        else:
            for batch in table.batches():
                w.write_batch(batch)


def write_cached(entry: Path, tables: Mapping[str, pa.Table | BatchSource], meta: TraceFields,
                 warnings: list[str], n_events: int) -> bool:
    """Write an entry atomically and remove older entries of the same file; return False (and
    leave nothing behind) if the folder is not writable. A table may be a ``BatchSource``."""
    import pyarrow as pa

    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
    except OSError:
        return False
    try:
        for name in TABLES:
            _write(tables[name], tmp / f"{name}{SUFFIX}")
        doc = {"cache_version": CACHE_VERSION, "meta": meta, "warnings": warnings, "n_events": n_events}
        (tmp / _META).write_text(json.dumps(doc, default=str), encoding="utf-8")
        if entry.exists():
            shutil.rmtree(entry, ignore_errors=True)
        os.replace(tmp, entry)
    except (OSError, pa.ArrowException):
        shutil.rmtree(tmp, ignore_errors=True)
        return False
    stem = entry.name[: entry.name.rfind("-") + 1]
    for old in entry.parent.glob(f"{stem}*"):
        if old != entry and old.is_dir():  # the file changed or the format moved on
            shutil.rmtree(old, ignore_errors=True)
    return True


_DOC_PREFIX = "document-"
_MAX_DOCS = 8  # documents kept per entry (one per --rank / path named); the oldest go first


def read_entry_document(entry: Path, key: str) -> str | None:
    """A text stored in ``entry`` under ``key`` (``write_entry_document``), or None."""
    try:
        return (entry / f"{_DOC_PREFIX}{key}.json").read_text(encoding="utf-8")
    except (OSError, ValueError):
        return None


def write_entry_document(entry: Path, key: str, text: str) -> bool:
    """Store ``text`` in the trace cache entry ``entry`` under ``key``, atomically; False when the
    entry is gone (its file changed: never re-created) or cannot be written."""
    if not (entry / _META).is_file():
        return False
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=entry)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, entry / f"{_DOC_PREFIX}{key}.json")
    except OSError:
        return False
    try:
        docs = sorted(entry.glob(f"{_DOC_PREFIX}*.json"), key=lambda p: p.stat().st_mtime_ns)
        for old in docs[:-_MAX_DOCS]:
            old.unlink(missing_ok=True)
    except OSError:
        pass
    return True
