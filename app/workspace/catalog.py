"""The run catalog: every run of a store as one row, and why the other folders were skipped (workspace layer).

``torchscope ls`` and the Runs page (app/ui/store.py) both list a store through :func:`load_catalog`,
so they show the same runs, in the same order, with the same problem messages:

- one row per run (app.workspace.catalog_rows), its steps filled from the trace analysis cache
  when the run has no metrics (app.workspace.cached_steps);
- the torch-tb-profiler sub-folders of the store listed through their read-only mirror
  (app.data.tbprofiler.mirror_tb_folder);
- each "not a run folder" problem replaced by why the folder was skipped (no trace files, or files
  that are not traces), and dropped for the tb-profiler sub-folders, which are listed as runs.

Both go through the store's catalog index (app.workspace.catalog_listing, app.data.catalog_index;
docs/catalog.md): a run is read only when its manifest changed since its row was stored. The UI
passes its cached mirror (app/ui/store.py). ``load_row`` (tests, and stores that must not be
indexed) lists the old way: every run read through that loader.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.data import tbprofiler
from app.data.runs import StoreTable, store_from_rows
from app.workspace import cached_steps, catalog_listing
from app.workspace.catalog_rows import load_run_row
from profiler_agent import runformat as rf

__all__ = ["CatalogRow", "RowLoader", "MirrorLoader", "load_catalog_row", "list_rows", "tb_runs_of",
           "mirror_tb_store", "load_catalog", "list_catalog_rows"]

# (row, or None for a folder whose manifest cannot be read; problem messages of this run)
CatalogRow = tuple[dict[str, Any] | None, list[str]]
RowLoader = Callable[[Path], CatalogRow]
# (store root, its tb-profiler sub-folders) -> the mirror store, or None
MirrorLoader = Callable[[Path, list[Path]], Path | None]


def load_catalog_row(run_dir: Path, *, now: float | None = None) -> CatalogRow:
    """The catalog row of one run with its steps filled from the trace analysis cache when they
    are "in trace", and its problems; (None, [why]) when the manifest cannot be read."""
    try:
        row, problems = load_run_row(run_dir, now=now)
    except rf.RunFormatError as e:  # changed between listing and reading
        return None, [str(e)]
    except (ValueError, TypeError, OverflowError, RecursionError) as e:
        # The reader validates what it reads; this is the last guard of "one bad run never hides
        # the others": a value it let through that still breaks a row costs that run only.
        return None, [f"{run_dir}: skipped, a value in it could not be read ({type(e).__name__}: {e})"]
    cached_steps.fill_steps_from_traces(row)
    return row, problems


def list_rows(root: str | os.PathLike[str] | None, load_row: RowLoader = load_catalog_row
              ) -> tuple[Path, list[dict[str, Any]], list[str], list[Path]]:
    """(store root, rows, problems, sub-folders that are not runs) of the runs directly under
    ``root``, in listing order.

    Raises RunStoreNotFoundError when the store does not exist."""
    listing = rf.list_runs(root)
    rows: list[dict[str, Any]] = []
    problems = list(listing.problems)
    for path, _ in listing.runs:
        row, msgs = load_row(path)
        problems.extend(msgs)
        if row is not None:
            rows.append(row)
    return listing.root, rows, problems, listing.not_runs


def tb_runs_of(root: Path) -> list[Path]:
    """The torch-tb-profiler sub-folders of the store ``root`` (listed through a mirror)."""
    return tbprofiler.find_tb_runs(root) if root.is_dir() else []


def mirror_tb_store(root: Path, tb_runs: list[Path]) -> Path | None:
    """The read-only mirror store of the tb-profiler sub-folders ``tb_runs`` of ``root`` (made or
    refreshed), or None when none can be made (the default MirrorLoader)."""
    return tbprofiler.mirror_tb_folder(root)


def list_catalog_rows(root: str | os.PathLike[str] | None = None, *, mirror_of: MirrorLoader = mirror_tb_store,
                      now: float | None = None, reindex: bool = False, full_check: bool = False
                      ) -> tuple[Path, list[dict[str, Any]], list[str], Path | None]:
    """(store root, rows of the store and of its tb-profiler mirror in listing order, problems,
    mirror) through the catalog index (``full_check``: every run's files stat-ed, not only those
    the change journal names). Raises RunStoreNotFoundError."""
    done = catalog_listing.refresh(root, now=now, reindex=reindex, full_check=full_check)
    try:
        rows, listing_p, row_p = catalog_listing.rows_of(done)
    finally:
        done.close()
    tb_runs, mirror = catalog_listing.tb_mirror(done.scan, mirror_of)
    problems = catalog_listing.explain(listing_p + row_p, done.scan, tb_runs, mirror)
    if mirror is not None:
        more = catalog_listing.refresh(mirror, now=now, reindex=reindex, full_check=full_check)
        try:
            m_rows, m_listing, m_row_p = catalog_listing.rows_of(more)
        finally:
            more.close()
        rows += m_rows
        problems += m_listing + m_row_p
    return done.scan.root, rows, problems, mirror


def load_catalog(root: str | os.PathLike[str] | None = None, *, load_row: RowLoader | None = None,
                 mirror_of: MirrorLoader = mirror_tb_store, now: float | None = None,
                 reindex: bool = False, full_check: bool = False) -> StoreTable:
    """Every run of the store ``root`` (default $TORCHSCOPE_RUNS or ./runs) and of its tb-profiler
    mirror, newest first, with the store's problems (see the module docstring).

    Raises RunStoreNotFoundError when the store does not exist; an unreadable run becomes a
    problem message and the others are still listed.
    """
    if load_row is None:
        found_root, rows, problems, mirror = list_catalog_rows(root, mirror_of=mirror_of, now=now, reindex=reindex,
                                                               full_check=full_check)
        return store_from_rows(found_root, rows, problems, mirror=mirror)
    found_root, rows, problems, not_runs = list_rows(root, load_row)
    tb_runs = tb_runs_of(found_root)
    mirror = mirror_of(found_root, tb_runs) if tb_runs else None
    problems = tbprofiler.explain_store_problems(problems, not_runs, tb_runs if mirror is not None else [])
    if mirror is not None:
        _, more, more_problems, _ = list_rows(mirror, load_row)
        rows += more
        problems += more_problems
    return store_from_rows(found_root, rows, problems, mirror=mirror)
