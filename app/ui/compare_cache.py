"""Bounded Streamlit caches for the Compare page: sides, comparisons, advisor diffs (UI layer).

Built on ``app.ui.cache`` (runs, traces and trace analyses are shared with the Run page). Keys
carry the runs' file signatures, so a run that changes is compared again on the next rerun.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import streamlit as st

from app.analysis.compare import CompareOptions, Comparison, diff_sides
from app.analysis.compare_inputs import CompareSide, assemble_run_side
from app.analysis.compare_tables import OpGrouping
from app.ui.cache import cached_run, cached_trace_analysis, cached_traces, run_signature

__all__ = ["cached_side", "cached_comparison", "cached_findings_diff", "options_key"]


@st.cache_resource(max_entries=16, ttl=900, show_spinner=False)
def _side(path: str, sig: tuple[float, ...]) -> CompareSide:
    return assemble_run_side(cached_run(path), lambda p: (tuple(cached_traces(p)), cached_trace_analysis(p)))


def cached_side(run_dir: str | os.PathLike[str]) -> CompareSide:
    """A run as a comparison side (run data, traces, analysis, module tree), cached."""
    return _side(str(run_dir), run_signature(run_dir))


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
def _findings_diff(base: str, cand: str, sig: tuple[Any, ...]) -> Any:
    from app.analysis.compare_advice import diff_side_advice

    return diff_side_advice(cached_side(base), cached_side(cand))


def cached_findings_diff(baseline: Path, candidate: Path) -> Any:
    """The advisor's resolved / remaining / new findings between two runs (a FindingsDiff)."""
    return _findings_diff(str(baseline), str(candidate), (run_signature(baseline), run_signature(candidate)))
