"""The Compare page's Memory tab: peak (with what it measures), step-aligned timelines, memory by
category, largest allocations of the CUDA snapshots (UI layer)."""
from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path

import pandas as pd
import streamlit as st

from app.analysis.compare.comparison import Comparison
from app.analysis.compare.memory import compute_step_aligned_memory, diff_largest_allocations
from app.analysis.compare.memory_categories import MemoryCategoryComparison
from app.analysis.memory.peak import peak_description, peak_quantity
from app.charts.compare import make_memory_overlay_figure
from app.charts.compare_memory import make_memory_category_figure
from app.charts.memory import byte_unit
from app.errors import TorchscopeError
from app.presentation.units import format_value
from app.workspace.artifacts import load_snapshot
from app.workspace.memory import load_memory_categories
from profiler_agent.runformat import layout

__all__ = ["NO_CATEGORIES_HELP", "CategoryBars", "cached_memory_categories", "render_memory_tab"]


class CategoryBars(StrEnum):
    """What the memory-by-category bars show (the values of the "Bars show" radio)."""

    AT_PEAK = "at_peak"
    OWN_PEAK = "own_peak"


_CATEGORY_BARS = {CategoryBars.AT_PEAK: "each category at the moment of the total peak",
                  CategoryBars.OWN_PEAK: "each category's own peak"}

NO_CATEGORIES_HELP = (
    "Neither run has a memory timeline, so memory cannot be split by category (parameters, gradients, "
    "optimizer state, activations, temporaries, ...). Record both runs with "
    "`torchscope run --memory-timeline --name NAME -- python train.py ...` (or "
    "`profiler_agent.Run(..., memory_timeline=True)` in the API): each profiler window then also "
    "exports torch.profiler's memory timeline into the run's `memory/` folder. It records Python "
    "stacks in the profiled steps and its export takes a while (seconds to minutes for a big window)."
)

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~$])")


def _labels(cmp: Comparison) -> tuple[str, str]:
    b, c = cmp.baseline.label, cmp.candidate.label
    return b, (c if c != b else f"{c} (candidate)")


def _timelines_signature(run_dir: Path | None) -> tuple[tuple[str, float, int], ...]:
    if run_dir is None:
        return ()
    out = []
    for p in layout.list_memory_timeline_files(run_dir):
        try:
            s = p.stat()
        except OSError:
            continue
        out.append((p.name, s.st_mtime, s.st_size))
    return tuple(out)


@st.cache_data(max_entries=16, ttl=900, show_spinner=False)
def _categories(base: str | None, cand: str | None, sig: tuple[object, ...]) -> MemoryCategoryComparison:
    return load_memory_categories(base, cand)


def cached_memory_categories(cmp: Comparison) -> MemoryCategoryComparison:
    """Per-category memory of both runs (``load_memory_categories``), cached by the timelines'
    names, times and sizes."""
    dirs = [s.run.path if s.run is not None else None for s in (cmp.baseline, cmp.candidate)]
    sig = tuple(_timelines_signature(d) for d in dirs)
    return _categories(*(str(d) if d is not None else None for d in dirs), sig)


def _render_peak(cmp: Comparison) -> None:
    mem_a, mem_b = cmp.peak_memory  # run labels are never put into Markdown (user text)
    st.markdown(f"**Peak memory — {peak_quantity(mem_a.source)}**: {format_value(mem_a.bytes, 'bytes')} → "
                f"{format_value(mem_b.bytes, 'bytes')} — verdict **{cmp.memory_verdict}**")
    caption = f"{peak_description(mem_a.source).capitalize()} (`{mem_a.source}`)."
    for role, m in (("baseline", mem_a), ("candidate", mem_b)):
        if m.own_source and m.own_source != mem_a.source:
            caption += (f" The {role} alone would be measured by {peak_quantity(m.own_source)}; the other run "
                        f"lacks that, so both are compared by {peak_quantity(mem_a.source)}.")
    st.caption(caption)


def _category_table(table: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, object]]:
    cols = ["baseline_bytes", "candidate_bytes", "delta_bytes", "baseline_peak_bytes", "candidate_peak_bytes",
            "peak_delta_bytes"]
    biggest = pd.to_numeric(table[cols].stack(), errors="coerce").abs().max() if len(table) else 0
    div, unit = byte_unit(float(biggest) if pd.notna(biggest) else 0.0)
    out = pd.DataFrame({"category": table["category"].astype(str)})
    for c in cols:
        out[c] = pd.to_numeric(table[c], errors="coerce").astype(float) / div
    out["ratio"] = pd.to_numeric(table["ratio"], errors="coerce").astype(float)
    out["peak_ratio"] = pd.to_numeric(table["peak_ratio"], errors="coerce").astype(float)
    fmt = "%.3f" if unit != "B" else "%.0f"
    config: dict[str, object] = {
        "baseline_bytes": st.column_config.NumberColumn(f"baseline at peak ({unit})", format=fmt,
                                                        help="held by the category when the total was highest"),
        "candidate_bytes": st.column_config.NumberColumn(f"candidate at peak ({unit})", format=fmt),
        "delta_bytes": st.column_config.NumberColumn(f"Δ at peak ({unit})", format=fmt,
                                                     help="candidate − baseline; empty when a run has no timeline"),
        "ratio": st.column_config.NumberColumn("ratio at peak", format="%.3f", help="candidate / baseline"),
        "baseline_peak_bytes": st.column_config.NumberColumn(f"baseline own peak ({unit})", format=fmt,
                                                             help="the most the category held at any time"),
        "candidate_peak_bytes": st.column_config.NumberColumn(f"candidate own peak ({unit})", format=fmt),
        "peak_delta_bytes": st.column_config.NumberColumn(f"Δ own peak ({unit})", format=fmt),
        "peak_ratio": st.column_config.NumberColumn("ratio own peak", format="%.3f"),
    }
    order = ["category", "baseline_bytes", "candidate_bytes", "delta_bytes", "ratio", "baseline_peak_bytes",
             "candidate_peak_bytes", "peak_delta_bytes", "peak_ratio"]
    return out[order], config


def _render_categories(cmp: Comparison) -> None:
    st.subheader("Memory by category")
    cats = cached_memory_categories(cmp)
    for note in cats.notes:  # may name files of the run: shown as inert text
        st.caption(_MD_SPECIAL.sub(r"\\\1", note))
    if not cats.available:
        st.info(NO_CATEGORIES_HELP)
        return
    b, c = _labels(cmp)
    what = st.radio("Bars show", list(CategoryBars), horizontal=True, key="compare_memory_categories_view",
                    format_func=_CATEGORY_BARS.__getitem__)
    st.plotly_chart(make_memory_category_figure(cats.table, b, c, at_peak=what == CategoryBars.AT_PEAK), width="stretch",
                    key="compare_memory_categories_fig")
    shown, config = _category_table(cats.table)
    st.dataframe(shown, hide_index=True, width="stretch", column_config=config,
                 key="compare_memory_categories_table")
    used = [f"{role}: {len(p.files)} timeline(s) of rank {p.rank}" for role, p in
            (("baseline", cats.baseline), ("candidate", cats.candidate)) if p is not None]
    pre = [f"{role} {format_value(p.preexisting_bytes, 'bytes')}" for role, p in
           (("baseline", cats.baseline), ("candidate", cats.candidate)) if p is not None]
    st.caption("From torch.profiler's memory timeline of the profiled steps (`--memory-timeline`); "
               + "; ".join(used) + ". 'total' is the total peak; at-peak values add up to it; a category's own "
               "peak can come at another moment. Categories are torch's (tensors it could not classify are "
               "'unknown'). The total counts memory that existed before the profiled window (torch lists it as "
               f"preexisting: {', '.join(pre)}), so it is larger than the peak above, which counts only memory "
               "allocated while the profiler ran (by exactly that much in a job's first window).")


def _snapshots_diff(cmp: Comparison) -> pd.DataFrame | None:
    a, b = cmp.baseline.run, cmp.candidate.run
    if a is None or b is None or not a.snapshot_files or not b.snapshot_files:
        return None

    return diff_largest_allocations(load_snapshot(a.snapshot_files[-1], folder=a.path),
                                    load_snapshot(b.snapshot_files[-1], folder=b.path))


def render_memory_tab(cmp: Comparison) -> None:
    """Peak (with its quantity), aligned timelines, categories, snapshot allocations; each part
    says how to get its data when a run lacks it."""
    b, c = _labels(cmp)
    _render_peak(cmp)
    timelines = {}
    for label, side in ((b, cmp.baseline), (c, cmp.candidate)):
        if side.analysis is not None and side.traces:
            timelines[label] = compute_step_aligned_memory(side.traces, side.analysis.steps)
    if any(len(t) for t in timelines.values()):
        st.plotly_chart(make_memory_overlay_figure(timelines), width="stretch", key="compare_memory_fig")
    else:
        st.info("No allocator events in the traces (record with profile_memory=True to see memory over a step).")
    try:
        _render_categories(cmp)
    except TorchscopeError as e:
        st.warning(f"Memory categories could not be compared: {e}")
    try:
        alloc = _snapshots_diff(cmp)
    except TorchscopeError as e:
        st.warning(f"Allocator snapshots could not be compared: {e}")
        return
    if alloc is not None:
        st.subheader("Largest allocations by source line")
        st.dataframe(alloc, hide_index=True, width="stretch")
