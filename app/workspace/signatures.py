"""File signatures: what must change for a cached load or a catalog entry to be redone (workspace layer).

- ``run_signature``, ``file_signature``: what the UI's in-memory caches are keyed by.
- ``list_folders``, ``scan_store``: a store's run folders with the signature of each (``stat`` of
  run.json, metrics.jsonl and system.jsonl, and the folder's inode: ``app.data.catalog_index.Signature``),
  which the catalog index compares with the one each entry was computed from
  (app.workspace.catalog_listing); given the index's entries and the folders the change journal
  names, only those runs are stat-ed.
- ``rules_digest``, ``open_index``: the code an index was made by (app.workspace.printed_listing), and the index.

Standard library only at load time (no dataclasses either): ``ls --json`` of an indexed store runs
through here, and every millisecond of imports is 0.1 % of the peer loop of benchmarks/catalog_index.py.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from app.data.catalog_index import NO_FILE, CatalogIndex, ListingEntry, Signature, catalog_index_path
from app.workspace.ls_snapshot import store_folders
from app.workspace.printed_listing import rules_digest, store_stamp
from profiler_agent.runformat import errors as rf_errors
from profiler_agent.runformat import layout

__all__ = ["run_signature", "file_signature", "Folders", "list_folders", "list_store", "Scan", "scan_store", "path_prefix",
           "rules_digest", "open_index"]


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def run_signature(run_dir: str | os.PathLike[str]) -> tuple[float, ...]:
    """Modification times of the files whose change must invalidate the run's cached data."""
    p = Path(run_dir)
    traces = layout.list_trace_files(p)
    return (
        _mtime(p / layout.MANIFEST),
        _mtime(p / layout.METRICS),
        _mtime(p / layout.SYSTEM),
        float(len(traces)),
        max((_mtime(t) for t in traces), default=0.0),
    )


def file_signature(path: str | os.PathLike[str]) -> tuple[float, int]:
    """(mtime, size) of a file, or (0, -1) when it is missing: part of a cache key."""
    try:
        st_ = Path(path).stat()
    except OSError:
        return (0.0, -1)
    return (st_.st_mtime, st_.st_size)


def path_prefix(root: Path) -> str:
    """What ``str(root / name)`` puts before ``name`` (pathlib drops a leading "./"), as a string:
    joining 10,000 pathlib paths costs more than the stat calls."""
    text = str(root)
    return "" if text == "." else os.path.join(text, "")


class Scan:
    """The run folders of a store, in listing order (name descending), with their signatures.

    ``signatures``: folder -> Signature, for the folders with a manifest; ``not_runs``: the others."""

    __slots__ = ("folders", "not_runs", "root", "signatures")

    def __init__(self, root: Path, folders: list[str], signatures: dict[str, Signature],
                 not_runs: list[Path]) -> None:
        self.root = root
        self.folders = folders
        self.signatures = signatures
        self.not_runs = not_runs


Folders = list[tuple[str, int]]  # (run folder name, its inode), name descending: the store's listing


def list_folders(root: str | os.PathLike[str] | None) -> tuple[Path, Folders]:
    """The store ``root`` (default $TORCHSCOPE_RUNS or ./runs) and its sub-folders but dot-folders,
    each with its inode, from one directory listing (no stat: ``DirEntry`` has both).

    Raises RunStoreNotFoundError (the messages of runformat.list_runs)."""
    found, folders, _ = list_store(root)
    return found, folders


def list_store(root: str | os.PathLike[str] | None) -> tuple[Path, Folders, str | None]:
    """:func:`list_folders` and the store folder's stamp taken just before the listing
    (app.workspace.printed_listing.store_stamp; None when too recent to be kept)."""
    found = layout.resolve_root(root)
    if not found.exists():
        raise rf_errors.RunStoreNotFoundError(
            f"{found}: run store not found (create it by recording a run, or pass --root)")
    if not found.is_dir():
        raise rf_errors.RunStoreNotFoundError(f"{found}: is a file, expected a run store folder")
    stamp = store_stamp(str(found))
    return found, store_folders(str(found)), stamp  # the same list as ls --json's check before imports


def scan_store(root: str | os.PathLike[str] | None, *, listed: tuple[Path, Folders] | None = None,
               known: Mapping[str, ListingEntry] | None = None, changed: Iterable[str] | None = None) -> Scan:
    """The store's run folders with their signatures: one ``stat`` of each run's manifest,
    metrics.jsonl and system.jsonl, taken before anything of the run is read.

    With ``known`` (the index's entries) and ``changed`` (the folders the change journal names:
    app.data.change_journal), only the runs that need it are stat-ed: those named, those without an
    entry or whose folder's inode differs from it (added, replaced), and those recorded as running;
    every other run keeps its entry's signature. ``listed``: the store's listing, already made
    (list_folders). Raises RunStoreNotFoundError (the messages of runformat.list_runs)."""
    found, folders = listed if listed is not None else list_folders(root)
    names = [name for name, _ in folders]
    sigs: dict[str, Signature] = {}
    not_runs: list[Path] = []
    base = path_prefix(found)
    manifest, metrics, system = (os.sep + n for n in (layout.MANIFEST, layout.METRICS, layout.SYSTEM))
    stat = os.stat
    trusted = known if known is not None else {}
    named = frozenset(changed or ())
    # One loop, no helper calls: a full check is 30,000 stat calls for 10,000 runs.
    for name, dir_ino in folders:
        hit = trusted.get(name)
        if hit is not None and hit.signature[9] == dir_ino and hit.manifest_status != "running" \
                and name not in named:
            sigs[name] = hit.signature
            continue
        folder = base + name
        try:
            m = stat(folder + manifest)
        except (OSError, ValueError):
            not_runs.append(found / name)
            continue
        if (m.st_mode & 0o170000) != 0o100000:  # not a regular file: no run there
            not_runs.append(found / name)
            continue
        try:
            x = stat(folder + metrics)
            xs = (x.st_mtime_ns, x.st_size, x.st_ino)
        except (OSError, ValueError):
            xs = NO_FILE
        try:
            y = stat(folder + system)
            ys = (y.st_mtime_ns, y.st_size, y.st_ino)
        except (OSError, ValueError):
            ys = NO_FILE
        sigs[name] = (m.st_mtime_ns, m.st_size, m.st_ino) + xs + ys + (dir_ino,)  # 3 + 3 + 3 + 1 ints
    return Scan(found, names, sigs, not_runs)


def open_index(root: Path) -> CatalogIndex | None:
    """The store's index (created when missing, rebuilt when unreadable), or None when it cannot be had."""
    return CatalogIndex.open(catalog_index_path(root), rules_digest())
