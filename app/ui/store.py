"""The run store as the Runs page sees it: app.workspace.catalog with bounded caches (UI layer).

The catalog (rows, the tb-profiler mirror, the problem messages) is the workspace's, the same as
``torchscope ls``. Here each run's row is cached under its files' modification times, so a store
of 1,000 runs re-reads only the runs that changed since the last rerun (manifests are listed each
time; that is one small JSON file per run), and the mirror under its sub-folders' times.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamlit as st

from app.data.runs import StoreTable
from app.workspace import cached_steps, catalog
from app.workspace.signatures import file_signature, run_signature
from profiler_agent import runformat as rf

__all__ = ["StoreView", "cached_store_view", "clear_store_caches", "resolve_store_root"]


@dataclass(frozen=True)
class StoreView:
    """The runs to list: the store's own and, for a tb-profiler folder, its mirrored runs."""

    store: StoreTable
    mirror: Path | None  # read-only mirror store, when the root holds tb-profiler runs


# A row whose steps are still "in trace" looks for the trace analysis again after this long: the
# analysis appears when the run is opened, without any file the row's signature watches changing.
IN_TRACE_RECHECK_S = 5.0


class _RowCache:
    """Bounded LRU of catalog rows keyed by (run folder, file signature), shared by all sessions.

    A plain dict rather than st.cache_data: with 1,000 runs, Streamlit's per-call argument
    hashing cost more than reading the rows (benchmarks/page_render.py).
    """

    def __init__(self, max_entries: int = 10_000) -> None:
        self._data: OrderedDict[
            tuple[str, tuple[float, ...]], tuple[dict[str, Any] | None, list[str], float]
        ] = OrderedDict()
        self._max = max_entries
        self._lock = threading.Lock()

    def get(self, path: str, sig: tuple[float, ...]) -> tuple[dict[str, Any] | None, list[str]]:
        key = (path, sig)
        now = time.monotonic()
        with self._lock:
            hit = self._data.get(key)
            if hit is not None:
                self._data.move_to_end(key)
        if hit is not None:
            row, problems, checked = hit
            stale = row is not None and row.get("steps_source") == cached_steps.STEPS_IN_TRACE
            if row is None or not stale or now - checked < IN_TRACE_RECHECK_S:
                return row, problems
            refreshed = dict(row)
            cached_steps.fill_steps_from_traces(refreshed)
            value: tuple[dict[str, Any] | None, list[str], float] = (refreshed, problems, now)
        else:
            loaded, problems = catalog.load_catalog_row(Path(path))
            value = (loaded, problems, now)
        with self._lock:
            self._data[key] = value
            while len(self._data) > self._max:
                self._data.popitem(last=False)
        return value[0], value[1]

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


_ROWS = _RowCache()


def _cached_row(path: Path) -> catalog.CatalogRow:
    """The catalog's RowLoader, served from the bounded row cache."""
    return _ROWS.get(str(path), run_signature(path))


@st.cache_data(max_entries=4, ttl=30, show_spinner=False)
def _mirror(root: str, sig: tuple[tuple[str, float], ...]) -> str | None:
    mirror = catalog.mirror_tb_store(Path(root), [Path(s) for s, _ in sig])
    return str(mirror) if mirror else None


def _cached_mirror(root: Path, tb_runs: list[Path]) -> Path | None:
    """The catalog's MirrorLoader, cached by the tb-profiler sub-folders' modification times."""
    found = _mirror(str(root), tuple((str(s), file_signature(s)[0]) for s in tb_runs))
    return Path(found) if found else None


# Store views younger than this are reused as they are: every widget click reruns a page, and
# listing 1,000 manifests on each click would be felt (benchmarks/page_render.py).
VIEW_MAX_AGE_S = 2.0
_VIEWS: dict[str, tuple[float, StoreView]] = {}
_VIEWS_LOCK = threading.Lock()


def cached_store_view(root: str | os.PathLike[str], *, max_age_s: float = VIEW_MAX_AGE_S) -> StoreView:
    """Summary rows of every run under ``root`` (newest first) and the store's problems.

    A view computed less than ``max_age_s`` ago is reused. Raises RunStoreNotFoundError when
    ``root`` does not exist.
    """
    key = str(root)
    with _VIEWS_LOCK:
        hit = _VIEWS.get(key)
    if hit is not None and time.monotonic() - hit[0] < max_age_s:
        return hit[1]
    view = _compute_store_view(Path(root))
    with _VIEWS_LOCK:
        _VIEWS[key] = (time.monotonic(), view)
        if len(_VIEWS) > 16:
            _VIEWS.pop(next(iter(_VIEWS)))
    return view


def _compute_store_view(root: Path) -> StoreView:
    store = catalog.load_catalog(root, load_row=_cached_row, mirror_of=_cached_mirror)
    return StoreView(store=store, mirror=store.mirror)


def clear_store_caches() -> None:
    """Forget cached summaries (after editing, archiving or deleting runs)."""
    _ROWS.clear()
    with _VIEWS_LOCK:
        _VIEWS.clear()


def resolve_store_root() -> Path:
    """The store chosen in the sidebar (session_state ``root``), else $TORCHSCOPE_RUNS, else ./runs."""
    value = st.session_state.get("root")
    return rf.layout.resolve_root(value or None)
