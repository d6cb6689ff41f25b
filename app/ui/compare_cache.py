"""Bounded Streamlit caches for the Compare page: sides, comparisons, advisor diffs (UI layer).

Built on ``app.ui.cache`` (runs, traces and trace analyses are shared with the Run page). Keys
carry the runs' file signatures, so a run that changes is compared again on the next rerun.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import streamlit as st

from app.analysis.compare.comparison import CompareOptions, Comparison, diff_sides
from app.workspace.sides import CompareSide, assemble_run_side
from app.analysis.compare.tables import OpGrouping
from app.ui.cache import cached_run, cached_trace_analysis, cached_traces, run_signature

__all__ = ["cached_side", "cached_group_side", "cached_comparison", "cached_side_comparison",
           "cached_findings_diff", "options_key", "SideRef"]


@st.cache_resource(max_entries=16, ttl=900, show_spinner=False)
def _side(path: str, sig: tuple[float, ...]) -> CompareSide:
    return assemble_run_side(cached_run(path), lambda p: (tuple(cached_traces(p)), cached_trace_analysis(p)))


def cached_side(run_dir: str | os.PathLike[str]) -> CompareSide:
    """A run as a comparison side (run data, traces, analysis, module tree), cached."""
    return _side(str(run_dir), run_signature(run_dir))


def _group_side_uncached(name: str, root: str, members: tuple[str, ...]) -> CompareSide:
    from app.workspace import sides as compare_inputs

    load_group_side = getattr(compare_inputs, "load_group_side", None)
    if load_group_side is not None:
        side = load_group_side(name, root)
        # "group fast", so a group never reads like a run of the same name in the headline and tables.
        return side if side.label.startswith("group ") else dataclasses.replace(side, label=f"group {side.label}")
    # Analysis code without groups: the newest run stands for the group, its replicates attached
    # when the side can hold them, and the label says it is a group.
    side = cached_side(members[0])
    changes: dict[str, Any] = {"label": f"group {name}"}
    if any(f.name == "replicates" for f in dataclasses.fields(side)):
        changes["replicates"] = tuple(cached_run(p) for p in members)
    else:
        changes["problems"] = (*side.problems, f"group {name} has {len(members)} run(s); this version compares "
                               f"its newest run only ({side.run.manifest.name if side.run else side.label})")
    return dataclasses.replace(side, **changes)


@st.cache_resource(max_entries=8, ttl=900, show_spinner=False)
def _group_side(name: str, root: str, members: tuple[str, ...], sig: tuple[Any, ...]) -> CompareSide:
    return _group_side_uncached(name, root, members)


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


@st.cache_resource(max_entries=16, ttl=900, show_spinner=False)
def _comparison(base: str, cand: str, sig: tuple[Any, ...], opts: tuple[Any, ...]) -> Comparison:
    options = CompareOptions(warmup_steps=opts[0], threshold=opts[1], resamples=opts[2], seed=opts[3],
                             confidence=opts[4], op_grouping=OpGrouping(opts[5]))
    return diff_sides(cached_side(base), cached_side(cand), options)


def cached_comparison(baseline: Path, candidate: Path, options: CompareOptions) -> Comparison:
    """``diff_sides`` of two runs, cached by their file signatures and the options."""
    sig = (run_signature(baseline), run_signature(candidate))
    return _comparison(str(baseline), str(candidate), sig, options_key(options))


@st.cache_resource(max_entries=16, ttl=900, show_spinner=False)
def _side_comparison(base: SideRef, cand: SideRef, sig: tuple[Any, ...], opts: tuple[Any, ...]) -> Comparison:
    options = CompareOptions(warmup_steps=opts[0], threshold=opts[1], resamples=opts[2], seed=opts[3],
                             confidence=opts[4], op_grouping=OpGrouping(opts[5]))
    return diff_sides(_resolve(base), _resolve(cand), options)


def cached_side_comparison(baseline: SideRef, candidate: SideRef, options: CompareOptions) -> Comparison:
    """``diff_sides`` of two sides, each a run or a replicate group (SideRef), cached by the file
    signatures of every run involved and the options."""
    if baseline[0] == "run" and candidate[0] == "run":
        return cached_comparison(Path(baseline[1]), Path(candidate[1]), options)
    sig = (_ref_signature(baseline), _ref_signature(candidate))
    return _side_comparison(baseline, candidate, sig, options_key(options))


@st.cache_resource(max_entries=16, ttl=900, show_spinner=False)
def _findings_diff(base: str, cand: str, sig: tuple[Any, ...]) -> Any:
    from app.analysis.compare.advice import diff_side_advice

    return diff_side_advice(cached_side(base), cached_side(cand))


def cached_findings_diff(baseline: Path, candidate: Path) -> Any:
    """The advisor's resolved / remaining / new findings between two runs (a FindingsDiff)."""
    return _findings_diff(str(baseline), str(candidate), (run_signature(baseline), run_signature(candidate)))
