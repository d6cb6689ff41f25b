"""The run store as the Runs page sees it: app.workspace.catalog with bounded caches (UI layer).

The catalog (rows, the tb-profiler mirror, the problem messages) is the workspace's, the same as
``torchscope ls``, listed through the store's catalog index: a rerun stats each manifest and reads
only the runs that changed (docs/catalog.md). A view is reused for VIEW_MAX_AGE_S, and past that
while the store's index vouches that nothing changed (app.workspace.printed_listing.unchanged_token);
the mirror is cached under its sub-folders' times.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import streamlit as st

from app.data.runs import StoreTable
from app.workspace import catalog, catalog_query
from app.workspace.printed_listing import unchanged_token
from app.workspace.signatures import file_signature
from profiler_agent import runformat as rf

__all__ = ["StoreView", "cached_store_view", "cached_runs_table", "clear_store_caches", "resolve_store_root"]


@dataclass(frozen=True)
class StoreView:
    """The runs to list: the store's own and, for a tb-profiler folder, its mirrored runs, with
    the values the Runs page's filters offer (computed once per view, not on every rerun)."""

    store: StoreTable
    mirror: Path | None  # read-only mirror store, when the root holds tb-profiler runs
    statuses: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    memo: dict[object, object] = field(default_factory=dict, compare=False, hash=False)


@st.cache_data(max_entries=4, ttl=30, show_spinner=False)
def _mirror(root: str, sig: tuple[tuple[str, float], ...]) -> str | None:
    mirror = catalog.mirror_tb_store(Path(root), [Path(s) for s, _ in sig])
    return str(mirror) if mirror else None


def _cached_mirror(root: Path, tb_runs: list[Path]) -> Path | None:
    """The catalog's MirrorLoader, cached by the tb-profiler sub-folders' modification times."""
    found = _mirror(str(root), tuple((str(s), file_signature(s)[0]) for s in tb_runs))
    return Path(found) if found else None


# Store views younger than this are reused as they are: every widget click reruns a page, and
# stat-ing 10,000 manifests on each click would be felt (benchmarks/catalog_index.py). An older one
# is reused while the store's index vouches that nothing changed since it was listed (its token,
# taken before the listing, is the same): listing 10,000 runs again from the index and building
# their table costs ~0.5 s, the token ~1 ms.
VIEW_MAX_AGE_S = 2.0
# root -> (when it was listed or last vouched for, monotonic s; the view; the store's token before it was listed)
_VIEWS: dict[str, tuple[float, StoreView, str | None]] = {}
_VIEWS_LOCK = threading.Lock()


def cached_store_view(root: str | os.PathLike[str], *, max_age_s: float = VIEW_MAX_AGE_S) -> StoreView:
    """Summary rows of every run under ``root`` (newest first) and the store's problems.

    A view computed less than ``max_age_s`` ago is reused, and an older one while the store's
    unchanged token is still the one taken before it was listed (no run added, removed, replaced or
    changed through the run format's writers since; a store with a running run has no token).
    Raises RunStoreNotFoundError when ``root`` does not exist.
    """
    key = str(root)
    with _VIEWS_LOCK:
        hit = _VIEWS.get(key)
    if hit is not None and time.monotonic() - hit[0] < max_age_s:
        return hit[1]
    token = unchanged_token(key)  # before any listing: a change during it gives another token next time
    if hit is not None and token is not None and token == hit[2]:
        with _VIEWS_LOCK:
            _VIEWS[key] = (time.monotonic(), hit[1], token)
        return hit[1]
    view = _compute_store_view(Path(root))
    with _VIEWS_LOCK:
        _VIEWS[key] = (time.monotonic(), view, token)
        if len(_VIEWS) > 16:
            _VIEWS.pop(next(iter(_VIEWS)))
    return view


def _compute_store_view(root: Path) -> StoreView:
    store = catalog.load_catalog(root, mirror_of=_cached_mirror)
    table = store.table
    tags = sorted({t.strip() for cell in table["tags"].dropna() for t in str(cell).split(",") if t.strip()})
    groups = sorted({str(g) for g in table["group"].dropna() if str(g)})
    return StoreView(store=store, mirror=store.mirror, statuses=tuple(sorted(table["status"].dropna().unique())),
                     tags=tuple(tags), groups=tuple(groups))


_TABLES: dict[str, tuple[float, pd.DataFrame]] = {}


def cached_runs_table(root: str | os.PathLike[str], *, max_age_s: float = VIEW_MAX_AGE_S) -> pd.DataFrame:
    """The queries' table of every run of the store (app.workspace.catalog_query.load_runs_table),
    reused for ``max_age_s``. Raises RunStoreNotFoundError."""
    key = str(root)
    with _VIEWS_LOCK:
        hit = _TABLES.get(key)
    if hit is not None and time.monotonic() - hit[0] < max_age_s:
        return hit[1]
    table = catalog_query.load_runs_table(root)
    with _VIEWS_LOCK:
        _TABLES[key] = (time.monotonic(), table)
        if len(_TABLES) > 4:
            _TABLES.pop(next(iter(_TABLES)))
    return table


def clear_store_caches() -> None:
    """Forget cached store views (after editing, archiving or deleting runs)."""
    with _VIEWS_LOCK:
        _TABLES.clear()
        _VIEWS.clear()


def resolve_store_root() -> Path:
    """The store chosen in the sidebar (session_state ``root``), else $TORCHSCOPE_RUNS, else ./runs."""
    value = st.session_state.get("root")
    return rf.layout.resolve_root(value or None)
