"""Everything ``torchscope analyze`` reports about a set of traces, in one object (analysis layer).

``analyze_traces(traces)`` computes steps (both breakdowns), ops, kernels and memory peaks once,
from TraceTables only: it reads no file and no cache. Loading the traces and caching the tables
is the workspace's (app.workspace.traces); the CLI document is app.presentation.analyze_json.
``StepAnalysis`` is the part the Run page's Overview shows (STEP_TABLES: steps, memory peaks,
what a rank summary needs), computed without the op, kernel and breakdown tables.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pandas as pd

from app.analysis.memory.events import compute_memory_peaks
from app.analysis.trace.breakdown import compute_breakdown
from app.analysis.trace.categories import unknown_category_notes
from app.analysis.trace.distributed import compute_overlap, compute_rank_skew
from app.analysis.trace.kernels import compute_kernel_table
from app.analysis.trace.ops import compute_op_table
from app.analysis.trace.ranks import compute_collective_table, rank_summary, summaries_from_tables
from app.analysis.trace.steps import compute_steps
from app.data.trace import TraceTables, known_rank

__all__ = ["TraceAnalysis", "StepAnalysis", "analyze_traces", "compute_analysis_tables", "analysis_from_tables",
           "steps_from_tables", "ANALYSIS_TABLES", "STEP_TABLES", "ANALYSIS_VERSION", "ANALYSIS_MODULES"]

# Bump when what analyze_traces computes changes. The workspace's cache of the tables
# (app.workspace.traces) is also keyed by a digest of ANALYSIS_MODULES' source.
ANALYSIS_VERSION = 2
ANALYSIS_TABLES = ("steps", "breakdown", "ops", "kernels", "memory_peaks", "rank_skew", "overlap", "collectives",
                   "notes")
# The tables of a StepAnalysis: the Overview's steps and memory peaks, the warnings, and what a rank
# summary reads. A subset of ANALYSIS_TABLES computed by the same functions, so the numbers are the same.
STEP_TABLES = ("steps", "memory_peaks", "overlap", "collectives", "notes")
# The analysis modules whose code the tables depend on (module names under app.analysis).
ANALYSIS_MODULES = ("trace.steps", "trace.breakdown", "trace.ops", "trace.kernels", "memory.events",
                    "trace.distributed", "trace.summary", "trace.categories", "trace.intervals", "trace.step_spans",
                    "trace.step_views", "trace.event_tree", "trace.op_modules", "trace.ranks")


def _rank_rows(steps: pd.DataFrame, overlap: pd.DataFrame, collectives: pd.DataFrame) -> list[dict[str, Any]]:
    """Per rank: step time, breakdown, straggler score and cause (app.analysis.trace.ranks.rank_summary)."""
    if steps.empty:
        return []
    colls = collectives if len(collectives.columns) else compute_collective_table([], steps)
    return rank_summary(summaries_from_tables(steps, overlap, colls))


@dataclass(frozen=True)
class StepAnalysis:
    """The part of a TraceAnalysis the Run page's Overview shows (STEP_TABLES): the traces with their
    warnings, the step table, memory peaks, and the per-rank summary; the same tables as the
    TraceAnalysis of the same traces, without its op, kernel and breakdown tables."""

    traces: list[dict[str, Any]]
    steps: pd.DataFrame
    memory_peaks: pd.DataFrame
    overlap: pd.DataFrame
    collectives: pd.DataFrame
    from_cache: bool = field(default=False, compare=False)

    @cached_property
    def rank_summary(self) -> list[dict[str, Any]]:
        """Per rank: step time, breakdown, straggler score and cause (app.analysis.trace.ranks.rank_summary)."""
        return _rank_rows(self.steps, self.overlap, self.collectives)


@dataclass(frozen=True)
class TraceAnalysis:
    """Results of analyze_traces; tables are pandas DataFrames, ``memory`` is keyed by device."""

    traces: list[dict[str, Any]]
    steps: pd.DataFrame
    breakdown: pd.DataFrame
    ops: pd.DataFrame
    kernels: pd.DataFrame
    memory_peaks: pd.DataFrame
    rank_skew: pd.DataFrame  # per step number: slowest/fastest rank (empty for one rank)
    overlap: pd.DataFrame  # per (rank, step): computation/communication overlap (empty without kernels)
    from_cache: bool = field(default=False, compare=False)  # the tables were read from the analysis cache
    # per rank, its collective calls (app.analysis.trace.ranks.COLLECTIVE_COLUMNS)
    collectives: pd.DataFrame = field(default_factory=pd.DataFrame, compare=False)

    @cached_property
    def rank_summary(self) -> list[dict[str, Any]]:
        """Per rank: step time, breakdown, straggler score and cause (app.analysis.trace.ranks.rank_summary)."""
        return _rank_rows(self.steps, self.overlap, self.collectives)

    @property
    def memory(self) -> dict[str, dict[str, Any]]:
        """``{device: {peak_allocated_bytes, peak_reserved_bytes}}`` (None when unknown, with
        ``peak_source`` when the allocated peak is not the allocator's: app.analysis.memory.events);
        with several ranks the key is ``rank<R>/<device>``."""
        multi = self.memory_peaks["rank"].nunique() > 1
        out: dict[str, dict[str, Any]] = {}
        for r in self.memory_peaks.itertuples(index=False):
            key = f"rank{r.rank}/{r.device}" if multi else str(r.device)
            out[key] = {"peak_allocated_bytes": _int_or_none(r.peak_allocated_bytes),
                        "peak_reserved_bytes": _int_or_none(r.peak_reserved_bytes)}
            source = getattr(r, "peak_source", "allocator")
            if source != "allocator":
                out[key]["peak_source"] = str(source)
        return out


def _int_or_none(v: Any) -> int | None:
    return None if v is None or v != v else int(v)


# How each table other than ``steps`` is computed, from the traces and their step table.
_TABLES: dict[str, Callable[[list[TraceTables], pd.DataFrame], pd.DataFrame]] = {
    "breakdown": compute_breakdown,
    "ops": lambda traces, steps: compute_op_table(traces),  # shares of the whole profiled window (ops.py)
    "kernels": lambda traces, steps: compute_kernel_table(traces),
    "memory_peaks": lambda traces, steps: compute_memory_peaks(traces),
    "rank_skew": lambda traces, steps: compute_rank_skew(steps),
    "overlap": compute_overlap,
    "collectives": compute_collective_table,
    "notes": lambda traces, steps: _analysis_notes(traces, steps),
}


def compute_analysis_tables(traces: Sequence[TraceTables], names: Sequence[str] = ANALYSIS_TABLES, *,
                            known: Mapping[str, pd.DataFrame] | None = None) -> dict[str, pd.DataFrame]:
    """The tables ``names`` (of ANALYSIS_TABLES; all by default) of ``traces``, computed from their
    events, except those in ``known`` (the same traces' tables computed before, e.g. read back from
    a cache), which are taken as they are. Raises KeyError for a name not in ANALYSIS_TABLES."""
    traces = list(traces)
    known = known or {}
    steps = known["steps"] if "steps" in known else compute_steps(traces)
    out = {"steps": steps}
    for name in names:
        if name != "steps":
            out[name] = known[name] if name in known else _TABLES[name](traces, steps)
    return {name: out[name] for name in names}


def _analysis_notes(traces: Sequence[TraceTables], steps: pd.DataFrame) -> pd.DataFrame:
    """Per rank, what the analysis could not count (unknown event categories), and steps that
    several traces of the rank record (two captures of one rank), as warnings."""
    rows = [{"rank": int(t.rank), "message": m} for t in traces for m in unknown_category_notes(t.events)]
    rows += [{"rank": r, "message": m} for r, m in _repeated_steps(traces, steps)]
    return pd.DataFrame(rows, columns=["rank", "message"])


def _repeated_steps(traces: Sequence[TraceTables], steps: pd.DataFrame) -> list[tuple[int, str]]:
    """(rank, sentence) for each rank whose step numbers occur more than once: the windows of one
    job record different iterations, so these are traces of different jobs or runs (or a copy).
    Ranks that traces without rank information were given are left out (load_traces warns of those:
    they may be different ranks of one job)."""
    if steps.empty or not {"rank", "step"} <= set(steps.columns):
        return []
    dup = steps[steps.duplicated(["rank", "step"], keep=False)]
    guessed = {int(t.rank) for t in traces if known_rank(t.path, t.meta) is None}
    out = []
    for rank, g in dup.groupby("rank", sort=True):
        if int(rank) in guessed:
            continue
        names = ", ".join(t.path.name for t in traces if int(t.rank) == int(rank))
        numbers = sorted(set(g["step"].astype(int)))
        where = f"step {numbers[0]} is" if len(numbers) == 1 else f"steps {numbers[0]}–{numbers[-1]} are"
        out.append((int(rank), f"rank {int(rank)}: {where} recorded by more than one trace ({names}); "
                    "one job's windows record different steps, so these are captures of different runs and "
                    "their steps are counted together: analyze them one at a time, or compare two with "
                    "torchscope diff A B"))
    return out


def analyze_traces(traces: Sequence[TraceTables]) -> TraceAnalysis:
    """Compute steps, breakdown, ops, kernels and memory peaks of TraceTables (one per rank)."""
    return analysis_from_tables(traces, compute_analysis_tables(traces))


def _trace_infos(traces: Sequence[TraceTables], notes: pd.DataFrame | None) -> list[dict[str, Any]]:
    """Path, rank, event count and warnings (the trace's recoveries, then the analysis notes) per trace."""
    by_rank: dict[int, list[str]] = {}
    for r in (notes.itertuples(index=False) if notes is not None else ()):
        by_rank.setdefault(int(r.rank), []).append(str(r.message))
    return [{"path": str(t.path), "rank": int(t.rank), "events": int(t.n_events),
             "warnings": [*t.warnings, *by_rank.pop(int(t.rank), [])]} for t in traces]


def analysis_from_tables(traces: Sequence[TraceTables], tables: Mapping[str, pd.DataFrame], *,
                         from_cache: bool = False) -> TraceAnalysis:
    """The TraceAnalysis of ``traces`` whose ANALYSIS_TABLES are ``tables`` (computed, or read back
    from a cache by the workspace: ``from_cache``)."""
    return TraceAnalysis(
        traces=_trace_infos(traces, tables.get("notes")),
        steps=tables["steps"], breakdown=tables["breakdown"], ops=tables["ops"], kernels=tables["kernels"],
        memory_peaks=tables["memory_peaks"], rank_skew=tables["rank_skew"], overlap=tables["overlap"],
        from_cache=from_cache, collectives=tables.get("collectives", pd.DataFrame()),
    )


def steps_from_tables(traces: Sequence[TraceTables], tables: Mapping[str, pd.DataFrame], *,
                      from_cache: bool = False) -> StepAnalysis:
    """The StepAnalysis of ``traces`` whose STEP_TABLES (or all ANALYSIS_TABLES) are ``tables``."""
    return StepAnalysis(traces=_trace_infos(traces, tables.get("notes")), steps=tables["steps"],
                        memory_peaks=tables["memory_peaks"], overlap=tables["overlap"],
                        collectives=tables["collectives"], from_cache=from_cache)
