"""The store's catalog index: one SQLite row per run folder with the manifest signature it was computed from (data layer, stdlib only).

The Runs page and ``torchscope ls`` list a store of 10,000 runs from this file instead of reading
10,000 manifests and metrics files (docs/catalog.md). Each entry keeps the ``stat`` signature of
the run's manifest (mtime in ns, size, inode) taken *before* the run was read, so a reader that
finds another signature recomputes the entry: an index is a cache, never trusted blindly.

- Format: SQLite in WAL mode (readers never block the one writer, several processes may write;
  ``busy_timeout`` waits for another writer's transaction instead of failing). A JSON-lines log
  would need its own compaction and locking; Parquet cannot be updated one row at a time.
- An index that SQLite cannot read (not a database, malformed, wrong ``INDEX_FORMAT`` or rules
  digest) is deleted and rebuilt by the caller: :meth:`CatalogIndex.open` returns a fresh one.
- A store that cannot be written (a read-only share) gets its index in the user's cache folder
  (``$TORCHSCOPE_CACHE/catalog/``) instead: :func:`catalog_index_path`.

- Each entry's ``ls --json`` record is also kept as printed, in the printed order (the ``printed``
  table), with the store folder's stamp in ``meta``: app.workspace.printed_listing prints a store
  where nothing changed from it alone.

This module only stores and returns entries; which rows they hold and when one is stale is the
workspace's (app.workspace.catalog_listing).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from app.data.change_journal import JournalState

__all__ = ["INDEX_FORMAT", "INDEX_DIR", "INDEX_FILE", "LS_SNAPSHOT_FILE", "Signature", "NO_FILE", "IndexEntry", "ListingEntry",
           "CatalogIndex", "catalog_index_path"]

# Bumped when the table layout changes; the rows' own rules (which step time, which final value) are
# versioned by the digest the workspace passes to CatalogIndex.open.
INDEX_FORMAT = 4  # 2: the signature covers metrics.jsonl and system.jsonl; 3: and the run folder's inode;
# 4: the printed table and the store folder's stamp (app.workspace.printed_listing)
# Inside the store: a dot-folder, which run listings skip (runformat.list_runs, tb-profiler scans).
INDEX_DIR = ".torchscope"
INDEX_FILE = "catalog.sqlite3"
# Beside the index inside the store: the last `ls --json` document with its key, written and read by
# app.workspace.ls_snapshot (which spells the same name); deleted with every write of entries.
LS_SNAPSHOT_FILE = "ls-json.snapshot"
_CACHE_ENV = "TORCHSCOPE_CACHE"  # the same variable as app.data.trace_cache.CACHE_ENV
_BUSY_MS = 5_000

# (st_mtime_ns, st_size, st_ino) of a run's manifest, then of its metrics.jsonl and its system.jsonl
# (NO_FILE for one that is missing): everything a catalog row is computed from but the traces folder,
# so a finished run whose metrics change without its manifest changing is read again; last the run
# folder's own inode (from the store's directory listing, no stat), so a folder deleted and another
# copied in under the same name is read again without its files being stat-ed.
Signature = tuple[int, int, int, int, int, int, int, int, int, int]
NO_FILE = (-1, -1, -1)
_SIG_COLUMNS = ("mtime_ns", "size", "ino", "metrics_mtime_ns", "metrics_size", "metrics_ino", "system_mtime_ns",
                "system_size", "system_ino", "dir_ino")
_SIG_SELECT = ", ".join(_SIG_COLUMNS)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    folder TEXT PRIMARY KEY,
    mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL, ino INTEGER NOT NULL,   -- run.json
    metrics_mtime_ns INTEGER NOT NULL, metrics_size INTEGER NOT NULL, metrics_ino INTEGER NOT NULL,
    system_mtime_ns INTEGER NOT NULL, system_size INTEGER NOT NULL, system_ino INTEGER NOT NULL,
    dir_ino INTEGER NOT NULL,      -- the run folder's inode (from the store's listing)
    manifest_status TEXT,          -- as written in run.json (a running run's status is checked every listing)
    steps_source TEXT,
    started_at REAL,               -- sort key: epoch seconds, NULL when unknown
    listing_level INTEGER NOT NULL, -- 1: the manifest could not be read (a listing problem), 0: a row
    row_json TEXT,                 -- the catalog row (app.workspace.catalog_rows) without its path
    record_text TEXT,              -- its `ls --json` record, indented as printed, up to its "path"
    problems_json TEXT NOT NULL,
    name TEXT, status TEXT, tags TEXT, grp TEXT,
    config_json TEXT, finals_json TEXT
);
-- What `ls --json` prints of each entry, stored in the order it prints them (newest start first,
-- unknown starts last, ties by folder name descending), so that a listing where nothing changed
-- is one scan of this table (app.workspace.printed_listing). One row per row of runs.
CREATE TABLE IF NOT EXISTS printed (
    sort_key REAL NOT NULL,        -- runs.started_at, NO_START when unknown
    folder TEXT NOT NULL,
    base BLOB, cut INTEGER,        -- the store's path prefix in out (JSON-escaped) and its byte offset
    out BLOB,                      -- the record as printed (NULL: no record)
    listing_level INTEGER NOT NULL,
    problems TEXT,                 -- the problems as JSON strings, one a line (NULL: none)
    live INTEGER NOT NULL,         -- 1: recorded as running, or steps "in trace": checked by every listing
    PRIMARY KEY (sort_key DESC, folder DESC)
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS printed_folder ON printed (folder);
CREATE INDEX IF NOT EXISTS printed_problems ON printed (folder) WHERE problems IS NOT NULL;
CREATE INDEX IF NOT EXISTS printed_live ON printed (folder) WHERE live;
"""
_PRINTED_COLUMNS = ("sort_key", "folder", "base", "cut", "out", "listing_level", "problems", "live")
NO_START = -1e300  # the sort key of an unknown start (printed last); known starts are within ±9.2e9
# A new index file's page size: the printed table is read whole by a listing where nothing changed,
# and 64 KiB pages read its 6 MB (10,000 runs) ~4× faster than SQLite's default 4 KiB.
_PAGE_SIZE = 65536
_COLUMNS = ("folder", *_SIG_COLUMNS, "manifest_status", "steps_source", "started_at", "listing_level",
            "row_json", "record_text", "problems_json", "name", "status", "tags", "grp", "config_json", "finals_json")


def catalog_index_path(store_root: str | os.PathLike[str]) -> Path:
    """Where the index of the local store ``store_root`` lives: ``<root>/.torchscope/catalog.sqlite3``,
    or, when the store cannot be written, a file named by the store's resolved path in the user's
    cache folder. The one seam for remote stores: they point it at their local mirror."""
    root = Path(store_root)
    inside = root / INDEX_DIR / INDEX_FILE
    if inside.exists() or os.access(root, os.W_OK):
        return inside
    import hashlib  # only here: a listing of a writable store does not load OpenSSL for it

    env = os.environ.get(_CACHE_ENV)
    cache = Path(env).expanduser() if env else Path.home() / ".cache" / "torchscope"
    digest = hashlib.sha256(str(root.resolve()).encode("utf-8", "surrogateescape")).hexdigest()[:24]
    return cache / "catalog" / f"{digest}.sqlite3"


class IndexEntry(NamedTuple):
    """What is stored for one run folder (see the table's comments above). A NamedTuple, not a
    dataclass: ``dataclasses`` costs ``ls --json`` ~15 ms of imports (inspect), 2 % of the peer loop."""

    folder: str
    signature: Signature
    manifest_status: str | None
    steps_source: str | None
    started_at: float | None
    listing_level: bool
    row: Mapping[str, Any] | None
    record_text: str | None
    problems: tuple[str, ...]
    config: Mapping[str, Any] | None = None
    finals: Mapping[str, Any] | None = None
    # (base, cut, out) of the record as ``ls --json`` prints it (app.workspace.printed_listing.printed_parts),
    # with the problems as JSON strings one a line (printed_listing.problem_items; "" when none)
    printed: tuple[bytes, int, bytes] | None = None
    problem_items: str = ""

    def printed_values(self) -> tuple[Any, ...]:
        base, cut, out = self.printed if self.printed is not None else (None, None, None)
        live = self.manifest_status == "running" or self.steps_source == "in trace"
        return (NO_START if self.started_at is None else self.started_at, self.folder, base, cut, out,
                int(self.listing_level), self.problem_items or None, int(live))

    def values(self) -> tuple[Any, ...]:
        row = self.row or {}
        return (self.folder, *self.signature, self.manifest_status, self.steps_source, self.started_at,
                int(self.listing_level), _dumps(dict(row)) if self.row is not None else None, self.record_text,
                _dumps(list(self.problems)), row.get("name"), row.get("status"), row.get("tags"), row.get("group"),
                _dumps(dict(self.config)) if self.config is not None else None,
                _dumps(dict(self.finals)) if self.finals is not None else None)


class ListingEntry(NamedTuple):
    """The few columns a listing reads for every run (no row, no record text)."""

    signature: Signature
    manifest_status: str | None
    steps_source: str | None
    started_at: float | None
    status: str | None = None  # the status the row shows (a run recorded as running: running or crashed)


def _dumps(value: Any) -> str:
    # Non-finite floats and huge integers as JSON allows them in Python (NaN, 1e400 → Infinity):
    # the index holds what the row held, the front ends clean it as before.
    return json.dumps(value, default=str)


class CatalogIndex:
    """An open index file. Raises nothing on reads of a broken file: see :meth:`open`."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn
        self.committed_state: JournalState | None = None  # the journal state the last write() stored
        self.committed_generation: int | None = None  # the generation after it (None: another writer wrote)
        self.read_stamp: str | None = None  # the store folder's stamp as listing_and_state read it
        self._stamp_read = False

    @classmethod
    def open(cls, path: str | os.PathLike[str], rules: str) -> CatalogIndex | None:
        """The index at ``path``, created when missing and emptied when its format or ``rules``
        digest differ; a file SQLite cannot read is deleted and made anew. None when no index can
        be opened there (a read-only folder, a locked file past the busy timeout)."""
        path = Path(path)
        for attempt in range(2):
            try:
                return cls._open(path, rules)
            except sqlite3.OperationalError as e:
                if _is_busy(e) or attempt or not path.exists():
                    return None
                _delete(path)
            except sqlite3.DatabaseError:  # not a database, malformed: rebuild
                if attempt:
                    return None
                _delete(path)
            except OSError:
                return None
        return None

    @classmethod
    def _open(cls, path: Path, rules: str) -> CatalogIndex:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, timeout=_BUSY_MS / 1000, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout={_BUSY_MS}")
            conn.execute(f"PRAGMA page_size={_PAGE_SIZE}")  # takes effect only in a new, empty file
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            want = {"format": str(INDEX_FORMAT), "rules": rules}
            if any(meta.get(k) != v for k, v in want.items()):
                with _transaction(conn):  # another layout or other rules: nothing of it is kept
                    conn.execute("DROP TABLE IF EXISTS runs")
                    conn.execute("DROP TABLE IF EXISTS snapshot")
                    conn.execute("DROP TABLE IF EXISTS printed")
                    conn.execute("DELETE FROM meta")  # the journal position belonged to those entries
                    with contextlib.suppress(OSError):
                        (path.parent / LS_SNAPSHOT_FILE).unlink()
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            conn.execute(statement)
                    conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", list(want.items()))
                _resize_pages(conn)
            # A cheap check that the table pages are readable; a malformed page raises DatabaseError here.
            conn.execute("SELECT count(*) FROM runs").fetchone()
        except BaseException:
            conn.close()
            raise
        return cls(path, conn)

    def close(self) -> None:
        self._conn.close()

    def listing(self) -> dict[str, ListingEntry] | None:
        """Folder → what a listing compares; None when the file turns out unreadable."""
        try:
            cur = self._conn.execute(f"SELECT folder, {_SIG_SELECT}, manifest_status, steps_source, started_at, "
                                     "status FROM runs")
            new = ListingEntry._make
            return {r[0]: new((r[1:11], r[11], r[12], r[13], r[14])) for r in cur}
        except sqlite3.DatabaseError:
            return None

    def listing_with_records(self) -> tuple[dict[str, ListingEntry], dict[str, tuple[bool, str | None, str]]] | None:
        """:meth:`listing` and :meth:`records` in one pass over the table (what ``ls --json`` reads)."""
        try:
            cur = self._conn.execute(f"SELECT folder, {_SIG_SELECT}, manifest_status, steps_source, started_at, "
                                     "status, listing_level, record_text, problems_json FROM runs")
            new = ListingEntry._make
            listing: dict[str, ListingEntry] = {}
            records: dict[str, tuple[bool, str | None, str]] = {}
            for r in cur:
                listing[r[0]] = new((r[1:11], r[11], r[12], r[13], r[14]))
                records[r[0]] = (bool(r[15]), r[16], r[17])
            return listing, records
        except sqlite3.DatabaseError:
            return None

    def records(self) -> dict[str, tuple[bool, str | None, str]] | None:
        """Folder → (listing-level problem, record text, problems JSON) of every entry; None when unreadable."""
        try:
            cur = self._conn.execute("SELECT folder, listing_level, record_text, problems_json FROM runs")
            return {f: (bool(lvl), text, probs) for f, lvl, text, probs in cur}
        except sqlite3.DatabaseError:
            return None

    def rows(self, folders: Iterable[str] | None = None) -> dict[str, tuple[bool, dict[str, Any] | None, list[str]]] | None:
        """Folder → (listing-level problem, catalog row, problems) of ``folders`` (every entry when
        None); None when unreadable. An entry whose JSON does not parse is left out (recomputed)."""
        try:
            if folders is None:
                got = list(self._conn.execute("SELECT folder, listing_level, row_json, problems_json FROM runs"))
            else:
                wanted = list(folders)
                got = []
                for i in range(0, len(wanted), 500):
                    part = wanted[i:i + 500]
                    got += self._conn.execute("SELECT folder, listing_level, row_json, problems_json FROM runs "
                                              f"WHERE folder IN ({','.join('?' * len(part))})", part).fetchall()
        except sqlite3.DatabaseError:
            return None
        out: dict[str, tuple[bool, dict[str, Any] | None, list[str]]] = {}
        for folder, lvl, row_json, probs in got:
            try:
                row = json.loads(row_json) if row_json is not None else None
                problems = json.loads(probs)
            except (TypeError, ValueError):
                continue
            if (row is None or isinstance(row, dict)) and isinstance(problems, list):
                out[folder] = (bool(lvl), row, [str(p) for p in problems])
        return out

    def query_rows(self) -> list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]] | None:
        """(folder, row, config, final values) of every run with a row, for queries across runs."""
        try:
            got = self._conn.execute("SELECT folder, row_json, config_json, finals_json FROM runs "
                                     "WHERE row_json IS NOT NULL").fetchall()
        except sqlite3.DatabaseError:
            return None
        out = []
        for folder, row_json, config_json, finals_json in got:
            try:
                row, config, finals = (json.loads(x) if x else {} for x in (row_json, config_json, finals_json))
            except ValueError:
                continue
            if isinstance(row, dict) and isinstance(config, dict) and isinstance(finals, dict):
                out.append((folder, row, config, finals))
        return out

    def listing_and_state(self, *, with_records: bool
                          ) -> tuple[Any, JournalState | None, int] | None:
        """(:meth:`listing_with_records` or :meth:`listing`, :meth:`journal_state`, :meth:`generation`)
        read in one read transaction, so that the entries and the journal position they hold belong
        together; None when the file turns out unreadable."""
        try:
            self._conn.execute("BEGIN")
            try:
                got = self.listing_with_records() if with_records else self.listing()
                state = self.journal_state()
                generation = self.generation()
                stamp = self._conn.execute("SELECT value FROM meta WHERE key = 'folders_stamp'").fetchone()
                self.read_stamp, self._stamp_read = (stamp[0] if stamp else None), True
            finally:
                self._conn.execute("COMMIT")
        except sqlite3.DatabaseError:
            return None
        return None if got is None else (got, state, generation)

    def generation(self) -> int:
        """How many writes changed entries (a snapshot is kept only for the generation it was made from)."""
        try:
            got = self._conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
            return int(got[0]) if got is not None else 0
        except (sqlite3.DatabaseError, ValueError):
            return -1

    def journal_state(self) -> JournalState | None:
        """How far the store's change journal was consumed by the listing that wrote these entries;
        None when unknown (a new index: the next listing checks every run)."""
        try:
            meta = dict(self._conn.execute("SELECT key, value FROM meta WHERE key IN "
                                           "('journal_token', 'journal_offset')").fetchall())
            return JournalState(meta["journal_token"], int(meta["journal_offset"]))
        except (sqlite3.DatabaseError, KeyError, ValueError):
            return None

    def run_if_current(self, state: JournalState, generation: int, fn: Callable[[], None]) -> bool:
        """Run ``fn`` under the write lock if the stored journal state and generation are still these."""
        try:
            with _transaction(self._conn):
                if self.journal_state() != state or self.generation() != generation:
                    return False
                fn()
        except sqlite3.DatabaseError:
            return False
        return True

    def write(self, entries: Iterable[IndexEntry], removed: Iterable[str] = (), *,
              journal: tuple[JournalState | None, JournalState] | None = None,
              compact: Callable[[JournalState], JournalState | None] | None = None,
              generation: int | None = None, stamp: str | None = None) -> bool:
        """Store ``entries`` and forget the ``removed`` folders in one transaction (the snapshot is
        dropped with any change); False when the index could not be written (another writer held
        it past the busy timeout, a full disk): the listing is still right, only not remembered.

        ``journal``: (the state the entries were read with, the state consumed now): stored in the
        same transaction, only when the stored state is still the first (compare and set: another
        listing that moved it on keeps its position). ``compact``: called with the new state inside
        the transaction (the journal replaced by an empty one: app.data.change_journal.compact);
        the state it returns is stored instead. ``generation``: the one the entries were read
        with; ``committed_generation`` is then the generation after this write, or None when
        another listing wrote meanwhile (this listing's whole-store view is then not kept).
        ``stamp``: the store folder's stamp, taken before the listing listed it, when after this
        write every sub-folder of the store is a run with an entry (app.workspace.printed_listing);
        None deletes the stored one."""
        entries = list(entries)
        values = [e.values() for e in entries]
        printed = [e.printed_values() for e in entries]
        gone = [(f,) for f in removed]
        same_stamp = self._stamp_read and stamp == self.read_stamp
        if not values and not gone and same_stamp and \
                (journal is None or (journal[0] == journal[1] and compact is None)):
            self.committed_state = journal[1] if journal is not None else None
            self.committed_generation = generation
            return True
        committed = None
        self.committed_generation = None
        try:
            with _transaction(self._conn):
                now = self.generation()
                if values or gone:
                    self._conn.executemany(f"INSERT OR REPLACE INTO runs ({', '.join(_COLUMNS)}) "
                                           f"VALUES ({', '.join('?' * len(_COLUMNS))})", values)
                    self._conn.executemany("DELETE FROM runs WHERE folder = ?", gone)
                    self._conn.executemany(f"INSERT OR REPLACE INTO printed ({', '.join(_PRINTED_COLUMNS)}) "
                                           f"VALUES ({', '.join('?' * len(_PRINTED_COLUMNS))})", printed)
                    self._conn.executemany("DELETE FROM printed WHERE folder = ?", gone)
                    with contextlib.suppress(OSError):
                        (self.path.parent / LS_SNAPSHOT_FILE).unlink()
                    self._conn.execute("INSERT OR REPLACE INTO meta VALUES ('generation', ?)", (str(now + 1),))
                    self.committed_generation = now + 1 if now == generation else None
                else:
                    self.committed_generation = now if now == generation else None
                if journal is not None and self.journal_state() == journal[0]:
                    new = journal[1]
                    if compact is not None:
                        new = compact(new) or new
                    if new != journal[0]:
                        self._conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                               [("journal_token", new.token), ("journal_offset", str(new.offset))])
                    committed = new
                if stamp is None:
                    self._conn.execute("DELETE FROM meta WHERE key = 'folders_stamp'")
                else:
                    self._conn.execute("INSERT OR REPLACE INTO meta VALUES ('folders_stamp', ?)", (stamp,))
        except (sqlite3.DatabaseError, OverflowError, ValueError):
            self.committed_state = None
            return False
        self.read_stamp, self._stamp_read = stamp, True
        self.committed_state = committed
        return True


def _resize_pages(conn: sqlite3.Connection) -> None:
    """Give an index emptied for another format the page size of a new one (a VACUUM outside WAL
    mode); left as it is when another process has the file open (a listing is then slower, not wrong)."""
    try:
        if conn.execute("PRAGMA page_size").fetchone()[0] == _PAGE_SIZE:
            return
        conn.execute("PRAGMA busy_timeout=0")
        if conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0].lower() == "delete":
            conn.execute(f"PRAGMA page_size={_PAGE_SIZE}")
            conn.execute("VACUUM")
    except sqlite3.OperationalError:
        pass
    finally:
        conn.execute(f"PRAGMA busy_timeout={_BUSY_MS}")
        if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            conn.execute("PRAGMA journal_mode=WAL")


class _transaction:
    """BEGIN IMMEDIATE … COMMIT (ROLLBACK on error): one writer at a time, readers go on."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, *_: object) -> None:
        self._conn.execute("COMMIT" if kind is None else "ROLLBACK")


def _is_busy(e: sqlite3.OperationalError) -> bool:
    text = str(e).lower()
    return "locked" in text or "busy" in text or "readonly" in text or "unable to open" in text


def _delete(path: Path) -> None:
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            p.unlink()
        except FileNotFoundError:
            pass
        except OSError:
            pass
