"""``torchscope ls --json``'s records from the catalog index, and the whole-listing snapshot (workspace layer).

The stored record texts of app.workspace.catalog_listing's refreshed scan, newest first, joined
without re-encoding; a listing that depends on nothing but the manifests' signatures is kept as a
snapshot and printed again while no signature changes (docs/catalog.md). Standard library only at
load time, like catalog_listing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from app.data.catalog_index import INDEX_DIR, INDEX_FILE, catalog_index_path
from app.data.change_journal import JournalState
from app.workspace import ls_snapshot
from app.workspace.catalog_listing import (
    IN_TRACE,
    PATH_JSON,
    RUNNING,
    MirrorOf,
    Refreshed,
    Scan,
    add_record_texts,
    compute_entry,
    explain,
    not_a_run_problem,
    open_index,
    ordered_by_start,
    path_prefix,
    refresh,
    tb_mirror,
)
from app.workspace.signatures import Folders, list_store

__all__ = ["RecordItem", "record_texts", "RecordListing", "list_store_records", "list_store_json", "runs_json_text"]


RecordItem = tuple[str, str, "float | None"]  # (record text, steps source, start in epoch seconds)


def record_texts(done: Refreshed) -> tuple[list[RecordItem], list[str], list[str]]:
    """(``ls --json`` records newest first, listing problems in folder order, row problems in
    folder order) of a refreshed scan, without pandas when nothing changed."""
    scan = done.scan
    if done.records is not None:
        stored = done.records
    else:
        stored = (done.index.records() if done.index is not None and done.reused else None) or {}
    sources = done.known
    started: dict[str, float | None] = {}
    texts: dict[str, str] = {}
    steps_source: dict[str, str] = {}
    listing_problems: list[str] = []
    row_problems: list[str] = []
    missing: list[str] = []
    for folder in scan.folders:
        if folder not in scan.signatures:
            listing_problems.append(not_a_run_problem(scan.root / folder))
            continue
        entry = done.computed.get(folder)
        if entry is not None:
            level, text, probs = entry.listing_level, entry.record_text, list(entry.problems)
            start, source = entry.started_at, entry.steps_source
        elif folder in stored and folder in sources:
            level, text, probs_json = stored[folder]
            probs = json.loads(probs_json) if probs_json != "[]" else []
            start, source = sources[folder].started_at, sources[folder].steps_source
        else:
            missing.append(folder)
            continue
        (listing_problems if level else row_problems).extend(str(p) for p in probs)
        if text is not None:
            texts[folder] = text
            started[folder] = start
            steps_source[folder] = source or ""
    if missing:  # another process dropped them between our two reads: compute them now
        for folder in missing:
            done.computed[folder] = compute_entry(folder, scan.root / folder, scan.signatures[folder], now=None)
        add_record_texts(scan.root, done.computed)
        return record_texts(done)
    out: list[RecordItem] = []
    base = path_prefix(scan.root)
    for folder in ordered_by_start(texts, started.get):
        head, _, tail = texts[folder].rpartition(PATH_JSON)
        out.append((head + json.dumps(base + folder) + tail, steps_source[folder], started[folder]))
    return out, listing_problems, row_problems


class RecordListing(NamedTuple):
    """``ls --json``'s runs as printed record texts, newest first, with their steps sources."""

    root: Path
    records: list[str]
    steps_sources: list[str]
    problems: list[str]
    mirror: Path | None
    cacheable: bool = False  # depends only on the scanned signatures (list_store_json's snapshot)
    journal_state: JournalState | None = None  # the change journal's state stored with the entries
    generation: int | None = None  # the index's generation they were stored in


def list_store_records(root: str | os.PathLike[str] | None = None, *, now: float | None = None,
                       reindex: bool = False, mirror_of: MirrorOf | None = None,
                       scan: Scan | None = None, full_check: bool = False,
                       listed: tuple[Path, Folders] | None = None, stamp: str | None = None) -> RecordListing:
    """The store's (and its tb-profiler mirror's) runs as ``ls --json`` records: the same runs,
    order and problems as app.workspace.catalog.load_catalog. ``full_check``: stat every run's
    files instead of trusting the change journal (``ls --refresh``). Raises RunStoreNotFoundError."""
    done = refresh(root, now=now, reindex=reindex, with_records=True, scan=scan, full_check=full_check,
                   listed=listed, stamp=stamp)
    try:
        items, listing_p, row_p = record_texts(done)
        cacheable = _cacheable(done)
    finally:
        done.close()
    scan = done.scan
    tb_runs, mirror = tb_mirror(scan, mirror_of)
    problems = explain(listing_p + row_p, scan, tb_runs, mirror)
    if mirror is not None:
        more = refresh(mirror, now=now, reindex=reindex, with_records=True)
        try:
            m_items, m_listing, m_rows = record_texts(more)
        finally:
            more.close()
        # one order over both stores, as store_from_rows sorts the rows of both together
        both = items + m_items
        items = [both[int(i)] for i in ordered_by_start([str(i) for i in range(len(both))], lambda i: both[int(i)][2])]
        problems += m_listing + m_rows
    return RecordListing(root=scan.root, records=[t for t, _, _ in items], steps_sources=[s for _, s, _ in items],
                         problems=problems, mirror=mirror, cacheable=cacheable and mirror is None,
                         journal_state=done.journal_state, generation=done.generation)


def _cacheable(done: Refreshed) -> bool:
    """Whether the listing depends on nothing but the scanned signatures: no run recorded as
    running (its status follows the clock), none whose steps wait "in trace", no journal line
    left to check again (younger than its grace time) and no sub-folder that is not a run."""
    if done.stale_in_trace or done.scan.not_runs or done.journal is None or done.journal.pending:
        return False
    entries = [*done.computed.values()]
    if any(e.manifest_status == RUNNING or e.steps_source == IN_TRACE for e in entries):
        return False
    return not any(done.known[f].manifest_status == RUNNING for f in done.reused if f in done.known)


def runs_json_text(records: list[str]) -> str:
    """The ``"runs"`` array of ``ls --json`` from its record texts, indented as ``json.dumps(doc, indent=2)``."""
    if not records:
        return "[]"
    return "[\n" + ",\n".join("    " + text.replace("\n", "\n    ") for text in records) + "\n  ]"


# (store root, the "runs" array as printed, problems) -> the whole `ls --json` document (app.cli.ls_cmd)
Document = Callable[[Path, bytes, list[str]], bytes]


def list_store_json(root: str | os.PathLike[str] | None = None, *, reindex: bool = False,
                    full_check: bool = False, document: Document | None = None,
                    root_text: str | None = None) -> tuple[Path, bytes, list[str]]:
    """(store root, the ``"runs"`` array of ``ls --json`` as UTF-8 bytes, problems), the same as
    :func:`list_store_records`. ``full_check``: ``ls --refresh``. ``document`` and ``root_text`` (the
    ``--root`` value as given: app.workspace.ls_snapshot.root_value): when the listing depends on
    nothing but the entries (no run recorded as running, ...: RecordListing.cacheable), also keep
    the whole document for ``ls --json``'s check before imports (app.workspace.ls_snapshot), as
    long as no other listing wrote entries meanwhile. A store where nothing changed is printed
    from the index before this is called (app.workspace.printed_listing). Raises RunStoreNotFoundError."""
    found, folders, stamp = list_store(root)
    listing = list_store_records(root, reindex=reindex, full_check=full_check, listed=(found, folders), stamp=stamp)
    runs_text = runs_json_text(listing.records).encode("utf-8", "surrogateescape")
    state, generation = listing.journal_state, listing.generation
    if (document is not None and root_text is not None and listing.cacheable and state is not None
            and generation is not None and catalog_index_path(found) == found / INDEX_DIR / INDEX_FILE):
        # (an index in the user's cache: the store is not ours to write)
        index = open_index(found)
        if index is not None:
            doc = document(found, runs_text, listing.problems)
            position = (state.token, state.offset)
            try:
                index.run_if_current(state, generation, lambda: ls_snapshot.write_snapshot(
                    str(found), root_text, folders, position, doc))
            finally:
                index.close()
    return listing.root, runs_text, listing.problems
