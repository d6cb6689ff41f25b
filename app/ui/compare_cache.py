"""Bounded Streamlit caches for the Compare page: sides, comparisons, advisor diffs (UI layer).

Built on ``app.ui.cache`` (runs, traces and trace analyses are shared with the Run page). Keys
carry the runs' file signatures, so a run that changes is compared again on the next rerun.
"""
from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import streamlit as st

from app.analysis.compare.comparison import CompareOptions, Comparison, diff_sides, with_op_tables
from app.analysis.compare.side import CompareSide
from app.analysis.compare.tables import OpGrouping
from app.analysis.trace.summary import TraceAnalysis
from app.data.trace import TraceTables
from app.ui.cache import cached_run, cached_trace_analysis, cached_traces, run_signature
from app.workspace.sides import assemble_run_side, load_group_side

if TYPE_CHECKING:  # the advisor is imported when its diff is first asked for (the Advisor tab), not with the page
    from app.analysis.advisor import FindingsDiff

__all__ = ["cached_side", "cached_group_side", "cached_comparison", "cached_side_comparison",
           "prefetch_side_comparison", "cached_findings_diff", "options_key", "SideRef"]


def _cached_side_traces(path: Path) -> tuple[tuple[TraceTables, ...], TraceAnalysis]:
    """The workspace's TraceLoader for a run side, served from the Run page's caches."""
    return tuple(cached_traces(path)), cached_trace_analysis(path)


@st.cache_resource(max_entries=16, ttl=900, show_spinner=False)
def _side(path: str, sig: tuple[float, ...]) -> CompareSide:
    return assemble_run_side(cached_run(path), _cached_side_traces)


def cached_side(run_dir: str | os.PathLike[str]) -> CompareSide:
    """A run as a comparison side (run data, traces, analysis, module tree), cached."""
    return _side(str(run_dir), run_signature(run_dir))


@st.cache_resource(max_entries=8, ttl=900, show_spinner=False)
def _group_side(name: str, root: str, members: tuple[str, ...], sig: tuple[Any, ...]) -> CompareSide:
    side = load_group_side(name, root)
    # "group fast", so a group never reads like a run of the same name in the headline and tables.
    return side if side.label.startswith("group ") else dataclasses.replace(side, label=f"group {side.label}")


def cached_group_side(name: str, root: str | os.PathLike[str], members: Sequence[str | os.PathLike[str]]) -> CompareSide:
    """The replicate group ``name`` of the store ``root`` as one side (``members``: its run folders,
    newest first), cached by the members' file signatures."""
    paths = tuple(str(p) for p in members)
    return _group_side(name, str(root), paths, tuple(run_signature(p) for p in paths))


# One side of the page's comparison: ("run", run folder) or ("group", name, store root, member folders).
SideRef = tuple[Any, ...]


def _resolve(ref: SideRef) -> CompareSide:
    if ref[0] == "group":
        return cached_group_side(ref[1], ref[2], ref[3])
    return cached_side(ref[1])


def _ref_signature(ref: SideRef) -> tuple[Any, ...]:
    if ref[0] == "group":
        return tuple(run_signature(p) for p in ref[3])
    return run_signature(ref[1])


def options_key(options: CompareOptions) -> tuple[Any, ...]:
    """CompareOptions as a tuple of plain values (a cache key)."""
    return (options.warmup_steps, options.threshold, options.resamples, options.seed, options.confidence,
            str(options.op_grouping))


def _options(opts: tuple[Any, ...]) -> CompareOptions:
    return CompareOptions(warmup_steps=opts[0], threshold=opts[1], resamples=opts[2], seed=opts[3],
                          confidence=opts[4], op_grouping=OpGrouping(opts[5]))


# A comparison is kept twice: without its op and kernel deltas (what the page's first load and
# its first tab need: the costliest part of diff_sides left out) and, built on that one, whole.
@st.cache_resource(max_entries=16, ttl=900, show_spinner=False)
def _comparison(base: str, cand: str, sig: tuple[Any, ...], opts: tuple[Any, ...], op_tables: bool) -> Comparison:
    if op_tables:
        return with_op_tables(_comparison(base, cand, sig, opts, False))
    return diff_sides(cached_side(base), cached_side(cand), _options(opts), op_tables=False)


def cached_comparison(baseline: Path, candidate: Path, options: CompareOptions, *,
                      op_tables: bool = True) -> Comparison:
    """``diff_sides`` of two runs, cached by their file signatures and the options; with
    ``op_tables=False`` without the operator and kernel deltas (empty tables)."""
    sig = (run_signature(baseline), run_signature(candidate))
    return _comparison(str(baseline), str(candidate), sig, options_key(options), op_tables)


@st.cache_resource(max_entries=16, ttl=900, show_spinner=False)
def _side_comparison(base: SideRef, cand: SideRef, sig: tuple[Any, ...], opts: tuple[Any, ...],
                     op_tables: bool) -> Comparison:
    if op_tables:
        return with_op_tables(_side_comparison(base, cand, sig, opts, False))
    return diff_sides(_resolve(base), _resolve(cand), _options(opts), op_tables=False)


def cached_side_comparison(baseline: SideRef, candidate: SideRef, options: CompareOptions, *,
                           op_tables: bool = True) -> Comparison:
    """``diff_sides`` of two sides, each a run or a replicate group (SideRef), cached by the file
    signatures of every run involved and the options; ``op_tables=False``: without the operator
    and kernel deltas (empty tables), which the whole comparison then adds to the same one."""
    if baseline[0] == "run" and candidate[0] == "run":
        return cached_comparison(Path(baseline[1]), Path(candidate[1]), options, op_tables=op_tables)
    sig = (_ref_signature(baseline), _ref_signature(candidate))
    return _side_comparison(baseline, candidate, sig, options_key(options), op_tables)


def _prefetch(baseline: SideRef, candidate: SideRef, options: CompareOptions) -> None:
    try:
        cached_side_comparison(baseline, candidate, options)
    except Exception:  # noqa: BLE001 - the tab that shows the deltas computes them again and shows why
        pass


def prefetch_side_comparison(baseline: SideRef, candidate: SideRef, options: CompareOptions) -> threading.Thread:
    """Start computing the whole ``cached_side_comparison`` (op and kernel deltas included) in a
    daemon thread, once the page is drawn: the Operators or Kernels tab opened next finds it
    cached, or waits for that thread's result. Returns the thread; the page does not wait."""
    thread = threading.Thread(target=_prefetch, args=(baseline, candidate, options), daemon=True,
                              name="torchscope-comparison-prefetch")
    thread.start()
    return thread


@st.cache_resource(max_entries=16, ttl=900, show_spinner=False)
def _findings_diff(base: str, cand: str, sig: tuple[Any, ...]) -> FindingsDiff:
    from app.analysis.compare.advice import diff_side_advice

    diff: FindingsDiff = diff_side_advice(cached_side(base), cached_side(cand))  # analysis types it Any today
    return diff


def cached_findings_diff(baseline: Path, candidate: Path) -> FindingsDiff:
    """The advisor's resolved / remaining / new findings between two runs (a FindingsDiff)."""
    return _findings_diff(str(baseline), str(candidate), (run_signature(baseline), run_signature(candidate)))
