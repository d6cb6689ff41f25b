"""The run store as the Runs page sees it, cached per run (UI layer: st.cache_data wrappers).

Each run's summary row is cached under its files' modification times, so a store of 1,000 runs
re-reads only the runs that changed since the last rerun (manifests are listed each time; that
is one small JSON file per run). A torch-tb-profiler log folder given as the store is mirrored
into a read-only store of symlinked runs (see app.data.tbprofiler.mirror_tb_folder).
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

from app.data import runs as runs_data
from app.workspace import cached_steps
from app.data import store_rows, tbprofiler
from app.ui.cache import run_signature
from profiler_agent import runformat as rf

__all__ = ["StoreView", "cached_store_view", "clear_store_caches", "resolve_store_root"]


@dataclass(frozen=True)
class StoreView:
    """The runs to list: the store's own and, for a tb-profiler folder, its mirrored runs."""

    store: runs_data.StoreTable
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
            if not stale or now - checked < IN_TRACE_RECHECK_S:
                return row, problems
            row = dict(row)
            cached_steps.fill_steps_from_traces(row)
            value = (row, problems, now)
        else:
            try:
                row, problems = store_rows.load_run_row(path)
                cached_steps.fill_steps_from_traces(row)
                value = (row, problems, now)
            except rf.RunFormatError as e:
                value = (None, [str(e)], now)
        with self._lock:
            self._data[key] = value
            while len(self._data) > self._max:
                self._data.popitem(last=False)
        return value[0], value[1]

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


_ROWS = _RowCache()


def _summary(path: str, sig: tuple[float, ...]) -> tuple[dict[str, Any] | None, list[str]]:
    return _ROWS.get(path, sig)


@st.cache_data(max_entries=4, ttl=30, show_spinner=False)
def _mirror(root: str, sig: tuple[Any, ...]) -> str | None:
    mirror = tbprofiler.mirror_tb_folder(root)
    return str(mirror) if mirror else None


def _tb_signature(root: Path) -> tuple[Any, ...]:
    subs = tbprofiler.find_tb_runs(root)
    return tuple((str(s), s.stat().st_mtime_ns) for s in subs)


def _rows(root: Path) -> tuple[list[dict[str, Any]], list[str]]:
    listing = rf.list_runs(root)
    rows: list[dict[str, Any]] = []
    problems = list(listing.problems)
    for path, _ in listing.runs:
        row, msgs = _summary(str(path), run_signature(path))
        problems.extend(msgs)
        if row is not None:
            rows.append(row)
    return rows, problems


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
    rows, problems = _rows(root)
    mirror: Path | None = None
    sig: tuple[Any, ...] = ()
    if root.is_dir():
        sig = _tb_signature(root)
        if sig:
            found = _mirror(str(root), sig)
            mirror = Path(found) if found else None
    # The tb sub-folders are listed through the mirror, not as "not a run folder" problems; the
    # other folders that are not runs say why (no trace files, or files that are not traces).
    tb_runs = [Path(s) for s, _ in sig] if mirror is not None else []
    problems = tbprofiler.explain_store_problems(problems, tb_runs)
    if mirror is not None:
        more, more_problems = _rows(mirror)
        rows += more
        problems += more_problems
    store = runs_data.store_from_rows(root, rows, problems, mirror=mirror)
    return StoreView(store=store, mirror=mirror)


def clear_store_caches() -> None:
    """Forget cached summaries (after editing, archiving or deleting runs)."""
    _ROWS.clear()
    with _VIEWS_LOCK:
        _VIEWS.clear()


def resolve_store_root() -> Path:
    """The store chosen in the sidebar (session_state ``root``), else $TORCHSCOPE_RUNS, else ./runs."""
    value = st.session_state.get("root")
    return rf.layout.resolve_root(value or None)
