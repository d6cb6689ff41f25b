"""A store listed through its catalog index: stat the runs the change journal names, read only those that changed (workspace layer).

``torchscope ls`` and the Runs page list a store through here (app.workspace.catalog). The runs
the store's change journal names since the index's last listing (app.data.change_journal), the
folders without an entry or whose inode changed, and the runs recorded as running are ``stat``-ed
(their manifest, metrics.jsonl and system.jsonl: app.workspace.signatures.scan_store); every run
is when the journal cannot say what changed, or with ``full_check`` (``ls --refresh``). A
signature is compared with the one its index entry was computed from (app.data.catalog_index);
only runs whose signature differs, that have no entry, that are recorded as running and now show
another status (crashed: a stale heartbeat, a gone process; checked from the manifest alone) or
whose steps are still "in trace" (the trace analysis may have appeared) are read again, and the
index is updated in one transaction with the journal position consumed. Entries of folders that
are gone are dropped. docs/catalog.md has the rules.

This module imports only the standard library and the index at load time: ``ls --json`` of a
store whose index is current never imports pandas, the analysis or pyarrow (the benchmark's goal,
benchmarks/catalog_index.py). Rows to recompute bring those in. The ``ls --json`` records and the
listing snapshot are app.workspace.catalog_records.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from app.data.catalog_index import CatalogIndex, IndexEntry, ListingEntry, Signature, catalog_index_path
from app.data.change_journal import COMPACT_BYTES, JournalState, Tail, compact, read_tail
from app.workspace.printed_listing import printed_parts, problem_items
from app.workspace.signatures import (
    Folders,
    Scan,
    list_store,
    open_index,
    path_prefix,
    rules_digest,
    scan_store,
)
from profiler_agent.runformat import layout

__all__ = ["Scan", "Refreshed", "rules_digest", "scan_store", "refresh", "PATH_SENTINEL", "PATH_JSON", "RUNNING",
           "IN_TRACE", "not_a_run_problem", "rows_of", "tb_mirror", "explain", "compute_entry", "add_record_texts",
           "ordered_by_start", "path_prefix", "open_index", "MirrorOf"]

RUNNING = "running"
IN_TRACE = "in trace"

# The record text is stored with this value as its path; the listing puts the path in at read time,
# so an index stays right for a store named another way (a relative --root, a symlink).
PATH_SENTINEL = "\u0000torchscope-path\u0000"
PATH_JSON = json.dumps(PATH_SENTINEL)


def not_a_run_problem(folder: Path) -> str:
    """runformat.list_runs' message for a sub-folder without a manifest (same text)."""
    return f"{folder}: not a run folder (no {layout.MANIFEST}); skipped"


class Refreshed:
    """A scan checked against the index: which entries are current, and the recomputed ones.

    ``known``: the index's entries as read before; ``records``: their ``ls --json`` records, read
    in the same pass (``with_records``); ``reused``: folders whose stored entry is current;
    ``computed``: the recomputed entries; ``stale_in_trace``: rows whose steps wait "in trace";
    ``rechecked``: runs recorded as running whose files did not change and whose shown status was
    checked again (from their manifest alone)."""

    def __init__(self, scan: Scan, index: CatalogIndex | None, known: Mapping[str, ListingEntry] | None = None,
                 records: Mapping[str, tuple[bool, str | None, str]] | None = None) -> None:
        self.scan = scan
        self.index = index
        self.known: Mapping[str, ListingEntry] = known if known is not None else {}
        self.records = records
        self.reused: set[str] = set()
        self.computed: dict[str, IndexEntry] = {}
        self.stale_in_trace: list[str] = []
        self.rechecked: list[str] = []
        self.journal: Tail | None = None  # the change journal's tail as read (None: no index)
        self.journal_before: JournalState | None = None  # the state the entries were read with
        self.journal_state: JournalState | None = None  # the state stored with this listing's entries
        self.generation: int | None = None  # the index's generation after them (None: another listing wrote)

    def close(self) -> None:
        if self.index is not None:
            self.index.close()


def _started_key(value: Any) -> float | None:
    # store_from_rows' rule: a number within what pandas' timestamps hold, else unknown (sorted last).
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        f = float(value)
    except OverflowError:
        return None
    return f if abs(f) < 9.2e9 else None


def compute_entry(folder: str, path: Path, sig: Signature, *, now: float | None) -> IndexEntry:
    """The index entry of one run, read from its files (the signature was taken before)."""
    from app.workspace import cached_steps
    from app.workspace.catalog_rows import load_run_entry
    from profiler_agent import runformat as rf

    try:
        manifest_status = None
        entry = load_run_entry(path, now=now)
    except rf.RunFormatError as e:  # unreadable manifest: a listing problem, as list_runs gives it
        return IndexEntry(folder, sig, None, None, None, True, None, None, (str(e),))
    except (ValueError, TypeError, OverflowError, RecursionError) as e:
        # The last guard of "one bad run never hides the others" (app.workspace.catalog.load_catalog_row).
        msg = f"{path}: skipped, a value in it could not be read ({type(e).__name__}: {e})"
        return IndexEntry(folder, sig, None, None, None, False, None, None, (msg,))
    row = entry.row
    cached_steps.fill_steps_from_traces(row)
    manifest_status = RUNNING if row.get("status") in (RUNNING, "crashed") else row.get("status")
    stored = {k: v for k, v in row.items() if k != "path"}
    return IndexEntry(folder, sig, manifest_status, row.get("steps_source"), _started_key(row.get("started_at")),
                      False, stored, None, tuple(entry.problems), entry.config, entry.finals)


def refresh(root: str | os.PathLike[str] | None, *, now: float | None = None, reindex: bool = False,
            use_index: bool = True, with_records: bool = False, scan: Scan | None = None,
            full_check: bool = False, listed: tuple[Path, Folders] | None = None,
            stamp: str | None = None) -> Refreshed:
    """Bring the store's index up to date (see the module docstring) and say which entries are current.

    The runs stat-ed are those the store's change journal names since the index's last listing
    (app.data.change_journal), those added, replaced or recorded as running; every run is stat-ed
    when the journal cannot say (no position stored, another journal, a line that does not parse),
    with ``full_check`` (``ls --refresh``: edits made by other tools) or ``reindex`` (every run read
    again). ``scan``: a scan already made (every run stat-ed); ``listed``: the store's listing
    already made (signatures.list_folders), with ``stamp``, the store folder's stamp taken before it
    (signatures.list_store). Raises RunStoreNotFoundError."""
    if scan is None:
        if listed is None:
            found, folders, stamp = list_store(root)
            listed = (found, folders)
        found = listed[0]
    else:
        found, stamp = scan.root, None
    index, known, records, stored, generation = _read_index(found, use_index=use_index, reindex=reindex,
                                                            with_records=with_records)
    # The journal is read after the entries: a line appended after that read is seen now or next time.
    tail = read_tail(found, stored) if index is not None else None
    if scan is None:
        trust = tail is not None and not (tail.full or full_check or reindex)
        if trust and tail is not None and tail.folders:
            # A line naming no folder of the store: a run deleted since, or a torn line glued to the
            # next writer's (whose run it then hides): check every run.
            trust = tail.folders <= {name for name, _ in listed[1]}  # type: ignore[index]
        scan = scan_store(found, listed=listed, known=known if trust else None,
                          changed=tail.folders if trust and tail is not None else None)
    out = Refreshed(scan=scan, index=index, known=known, records=records)
    out.journal = tail
    out.journal_before = stored
    todo: list[str] = []
    for folder, sig in scan.signatures.items():
        hit = known.get(folder)
        if hit is None or hit.signature != sig:
            todo.append(folder)
        elif hit.manifest_status == RUNNING and _status_now(scan.root / folder, now) != hit.status:
            todo.append(folder)  # its files did not change, but the clock or its process did: crashed
        elif hit.steps_source == IN_TRACE:
            out.stale_in_trace.append(folder)
        else:
            out.reused.add(folder)
        if hit is not None and hit.manifest_status == RUNNING and hit.signature == sig:
            out.rechecked.append(folder)
    for folder in todo:
        out.computed[folder] = compute_entry(folder, scan.root / folder, scan.signatures[folder], now=now)
    if out.stale_in_trace and index is not None:
        _recheck_in_trace(out, index)
    gone = [f for f in known if f not in scan.signatures]
    add_record_texts(scan.root, out.computed)
    prefix = path_prefix(scan.root)
    for folder, e in out.computed.items():  # what `ls --json` prints of them (app.workspace.printed_listing)
        parts = printed_parts(folder, e.record_text, PATH_JSON, prefix) if e.record_text is not None else None
        out.computed[folder] = e._replace(printed=parts, problem_items=problem_items(e.problems))
    if scan.not_runs:
        stamp = None  # the stamp says every sub-folder is a run with an entry
    if index is not None:
        moved = (stored, tail.state) if tail is not None else None
        big = tail is not None and not tail.pending and tail.state.offset == tail.end and \
            (tail.end > COMPACT_BYTES or tail.state.token == "!")
        index.write(out.computed.values(), gone, journal=moved,
                    compact=(lambda state: compact(found, state)) if big else None, generation=generation,
                    stamp=stamp)
        out.journal_state = index.committed_state
        out.generation = index.committed_generation
    return out


def _read_index(found: Path, *, use_index: bool, reindex: bool, with_records: bool
                ) -> tuple[CatalogIndex | None, Mapping[str, ListingEntry],
                           Mapping[str, tuple[bool, str | None, str]] | None, JournalState | None, int | None]:
    """(the open index or None, its entries, their record texts when asked, the journal state and
    the generation they were written with), read in one transaction; an index whose pages turn
    out unreadable is deleted and made anew (empty)."""
    index = open_index(found) if use_index else None
    if index is None:
        return None, {}, None, None, None
    generation = index.generation()
    if reindex:
        return index, {}, None, None, generation
    got = index.listing_and_state(with_records=with_records)
    if got is None:  # readable header, unreadable pages: start again
        index.close()
        _remove_index(catalog_index_path(found))
        index = open_index(found)
        return index, {}, None, None, index.generation() if index is not None else None
    listing, stored, generation = got
    if isinstance(listing, tuple):
        return index, listing[0], listing[1], stored, generation
    return index, listing, None, stored, generation


def _status_now(run_dir: Path, now: float | None) -> str | None:
    """The status a run recorded as running shows now (runformat.effective_status: crashed once its
    heartbeat went stale or its process is gone), read from its manifest alone; None when it cannot
    be read (the entry is then recomputed, which says why)."""
    from profiler_agent import runformat as rf

    try:
        return str(rf.effective_status(rf.read_manifest(run_dir), now=now))
    except (rf.RunFormatError, ValueError, TypeError, OverflowError, RecursionError):
        return None


def _remove_index(path: Path) -> None:
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            p.unlink()
        except OSError:
            pass


def _recheck_in_trace(out: Refreshed, index: CatalogIndex) -> None:
    """Rows whose steps were "in trace": filled from the trace analysis cache when it has them now
    (cached_steps), then recomputed entries; the others stay as stored."""
    from app.workspace import cached_steps

    rows = index.rows(out.stale_in_trace) or {}
    for folder in out.stale_in_trace:
        got = rows.get(folder)
        if got is None or got[1] is None:
            out.computed[folder] = compute_entry(folder, out.scan.root / folder, out.scan.signatures[folder], now=None)
            continue
        row = dict(got[1])
        row["path"] = str(out.scan.root / folder)
        if cached_steps.fill_steps_from_traces(row):
            out.computed[folder] = compute_entry(folder, out.scan.root / folder, out.scan.signatures[folder], now=None)
        else:
            out.reused.add(folder)


def add_record_texts(root: Path, computed: dict[str, IndexEntry]) -> None:
    """Fill each computed row's ``ls --json`` record text, through the same pandas conversion
    ``ls`` always used (app.data.runs.store_from_rows and store_records), in one batch."""
    with_rows = {f: e for f, e in computed.items() if e.row is not None}
    if not with_rows:
        return
    from app.data import runs as runs_data

    rows = [{**e.row, "path": f} for f, e in with_rows.items() if e.row is not None]
    records = runs_data.store_records(runs_data.store_from_rows(root, rows, []))
    for rec in records:
        folder = str(rec["path"])
        text = json.dumps({**rec, "path": PATH_SENTINEL}, indent=2, allow_nan=False, default=str)
        e = with_rows[folder]
        computed[folder] = IndexEntry(e.folder, e.signature, e.manifest_status, e.steps_source, e.started_at,
                                      e.listing_level, e.row, text, e.problems, e.config, e.finals)


def ordered_by_start(folders: Iterable[str], started: Callable[[str], float | None]) -> list[str]:
    """Newest start first, ties and unknown starts in listing order (store_from_rows' stable sort)."""
    listed = list(folders)
    known = [f for f in listed if started(f) is not None]
    unknown = [f for f in listed if started(f) is None]
    known.sort(key=lambda f: -(started(f) or 0.0))
    return known + unknown


def rows_of(done: Refreshed) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """(catalog rows in listing order with their paths, listing problems, row problems) of a
    refreshed scan: the stored rows of the current entries and the recomputed ones."""
    scan = done.scan
    stored = (done.index.rows() if done.index is not None and done.reused else None) or {}
    rows: list[dict[str, Any]] = []
    listing_problems: list[str] = []
    row_problems: list[str] = []
    for folder in scan.folders:
        if folder not in scan.signatures:
            listing_problems.append(not_a_run_problem(scan.root / folder))
            continue
        entry = done.computed.get(folder)
        if entry is not None:
            level, row, probs = entry.listing_level, entry.row, list(entry.problems)
        elif folder in stored:
            level, row, probs = stored[folder]
        else:  # dropped by another process meanwhile
            entry = done.computed[folder] = compute_entry(folder, scan.root / folder, scan.signatures[folder], now=None)
            level, row, probs = entry.listing_level, entry.row, list(entry.problems)
        (listing_problems if level else row_problems).extend(probs)
        if row is not None:
            rows.append({**row, "path": str(scan.root / folder)})
    return rows, listing_problems, row_problems


# (store root, its tb-profiler sub-folders) -> the mirror store, or None (app.workspace.catalog.MirrorLoader)
MirrorOf = Callable[[Path, list[Path]], "Path | None"]


def tb_mirror(scan: Scan, mirror_of: MirrorOf | None) -> tuple[list[Path], Path | None]:
    """(tb-profiler sub-folders, their mirror store) of a scanned store; only folders without a
    manifest can be tb-profiler runs, so a store of runs alone costs nothing here."""
    if not scan.not_runs:
        return [], None
    from app.data import tbprofiler

    tb_runs = tbprofiler.find_tb_runs(scan.root)
    if not tb_runs:
        return [], None
    if mirror_of is None:
        return tb_runs, tbprofiler.mirror_tb_folder(scan.root)
    return tb_runs, mirror_of(scan.root, tb_runs)


def explain(problems: list[str], scan: Scan, tb_runs: list[Path], mirror: Path | None) -> list[str]:
    """The store's problems with the "not a run folder" ones said why (tbprofiler.explain_store_problems)."""
    if not scan.not_runs:
        return problems
    from app.data import tbprofiler

    return tbprofiler.explain_store_problems(problems, scan.not_runs, tb_runs if mirror is not None else [])
