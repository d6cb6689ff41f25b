"""A comparison of a candidate with a baseline: verdicts, breakdown, ops, kernels, config (analysis layer).

``diff_sides(baseline, candidate)`` answers: is the candidate faster (the headline: step time,
or time per sample / token when the work per step differs, over the steady-state steps, with
the interval method of compare_headline and an ``inconclusive`` verdict when contention differs),
by how much, why (breakdown, operator and kernel deltas per typical profiled step, with their
step-to-step spread) and at what cost (peak memory, loss and other logged metrics). Every verdict
and table is documented in docs/compare.md; ``compare_json.comparison_to_json`` gives the
``torchscope diff --json`` document.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pandas as pd

from app.analysis.compare import steps as cs
from app.analysis.compare.contention import ContentionCheck, check_contention
from app.analysis.compare.estimators import RUN_TO_RUN_MARGIN
from app.analysis.compare.headline import Headline, HeadlineQuantity, HeadlineVerdict, compute_headline
from app.analysis.compare.latency import compute_latency_rows
from app.analysis.compare.machine_load import MachineLoad, compute_machine_load, load_warning
from app.analysis.compare.many_runs import diff_config
from app.analysis.compare.metrics import compare_metrics
from app.analysis.compare.options import CompareOptions
from app.analysis.compare.side import CompareSide
from app.analysis.compare.step_section import compute_step_section, follow_headline, no_interval_reason
from app.analysis.compare.step_sets import StepSet
from app.analysis.compare.step_sets import sign_note as _sign_note
from app.analysis.compare.step_sets import step_sets as _step_sets
from app.analysis.compare.tables import diff_breakdown, diff_kernels, diff_ops, profiled_step_count
from app.analysis.compare.verdict_table import (
    VERDICT_COLUMNS,
    compute_verdict_table,
    memory_verdict,
    safe_ratio,
)
from app.analysis.model.graph_diff import diff_module_trees
from app.analysis.stats.ratio import RatioEstimate, Verdict
from app.analysis.trace.step_window import StepWindow, typical_steps

__all__ = ["CompareOptions", "Comparison", "StepSet", "VERDICT_COLUMNS", "diff_sides", "no_interval_reason",
           "with_op_tables"]


_NO_CONTENTION = ContentionCheck()  # frozen: one shared default is safe
_EMPTY_HEADLINE = Headline(quantity=HeadlineQuantity.STEP_TIME, baseline=None, candidate=None, ratio=None, ci95=None,
                           verdict=HeadlineVerdict.INCONCLUSIVE, method="", replicates={"baseline": 1, "candidate": 1})


@dataclass(frozen=True)
class Comparison:
    """The result of ``diff_sides``; tables are pandas DataFrames, documented in docs/compare.md."""

    baseline: CompareSide
    candidate: CompareSide
    options: CompareOptions
    step_source: tuple[str, str]
    step_times: tuple[pd.DataFrame, pd.DataFrame]
    step_time: RatioEstimate | None
    step_verdict: Verdict | HeadlineVerdict  # INCONCLUSIVE when contention differs
    throughput: RatioEstimate | None
    throughput_unit: str
    throughput_verdict: Verdict | HeadlineVerdict  # INCONCLUSIVE when contention differs
    peak_memory: tuple[cs.PeakMemory, cs.PeakMemory]
    memory_verdict: Verdict
    verdicts: pd.DataFrame
    metrics: pd.DataFrame
    breakdown: pd.DataFrame
    ops: pd.DataFrame
    kernels: pd.DataFrame
    config: pd.DataFrame
    modules: pd.DataFrame
    profiled_steps: tuple[int, int]
    notes: list[str] = field(default_factory=list)
    # Profiled steps the breakdown averages (evaluation steps and outliers left out, see
    # app.analysis.trace.step_window); (0, 0) without traces.
    breakdown_steps: tuple[int, int] = (0, 0)
    # Machine load during each run (system samples) and a caution when it may explain the
    # step-time verdict (app.analysis.compare.machine_load); "" when none.
    machine_load: tuple[MachineLoad | None, MachineLoad | None] = (None, None)
    load_warning: str = ""
    # The verdict the page colour, the text's first line and the gates judge (compare_headline).
    headline: Headline = _EMPTY_HEADLINE
    contention: ContentionCheck = _NO_CONTENTION
    # "headline": the steady-state steps the headline uses; "deltas": the typical profiled steps
    # the waterfall and the op and kernel deltas average (evaluation steps and stalls left out).
    step_sets: dict[str, StepSet] = field(default_factory=dict)
    # Why the waterfall's mean profiled step moves the other way than the headline ("" when not).
    sign_note: str = ""
    # Inference runs: latency per sample at p50/p90/p99 (compare_latency; also verdict-table rows).
    latency: pd.DataFrame | None = None

    @property
    def memory_ratio(self) -> float | None:
        a, b = self.peak_memory
        return safe_ratio(b.bytes, a.bytes)


@dataclass(frozen=True)
class _TraceDeltas:
    """What the traces of both sides say: breakdown over the typical profiled steps, op and kernel deltas."""

    breakdown: pd.DataFrame
    breakdown_steps: tuple[int, int]
    ops: pd.DataFrame
    kernels: pd.DataFrame
    notes: list[str]


def _windows(a: CompareSide, b: CompareSide) -> tuple[StepWindow, StepWindow]:
    """Each side's typical profiled steps (app.analysis.trace.step_window)."""
    wa, wb = (typical_steps(getattr(s.analysis, "steps", None), s.run.metrics if s.run is not None else None,
                            s.windows) for s in (a, b))
    return wa, wb


def _trace_deltas(baseline: CompareSide, candidate: CompareSide, o: CompareOptions, op_tables: bool) -> _TraceDeltas:
    a, b = baseline.analysis, candidate.analysis
    if a is None or b is None:
        empty = pd.DataFrame()
        return _TraceDeltas(empty, (0, 0), empty, empty, ["breakdown, operators and kernels need traces on both sides"])
    wa, wb = _windows(baseline, candidate)
    notes = [f"{role}: {w.note}" for role, w in (("baseline", wa), ("candidate", wb)) if w.note]
    ops, kernels = _op_kernel_deltas(baseline, candidate, o, (wa, wb)) if op_tables else (pd.DataFrame(), pd.DataFrame())
    return _TraceDeltas(breakdown=diff_breakdown(wa.steps, wb.steps), breakdown_steps=(wa.count, wb.count),
                        ops=ops, kernels=kernels, notes=notes)


def _op_kernel_deltas(baseline: CompareSide, candidate: CompareSide, o: CompareOptions,
                      windows: tuple[StepWindow, StepWindow]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The operator and kernel deltas over each side's typical profiled steps (sides with traces)."""
    a, b = baseline.analysis, candidate.analysis
    wa, wb = windows
    traces = {"baseline_traces": baseline.traces, "candidate_traces": candidate.traces}
    return (diff_ops(a, b, grouping=o.op_grouping, **traces, baseline_kept=wa.steps, candidate_kept=wb.steps),
            diff_kernels(a, b, **traces, baseline_kept=wa.steps, candidate_kept=wb.steps))


def with_op_tables(c: Comparison) -> Comparison:
    """``c`` with its operator and kernel deltas, for a Comparison made by ``diff_sides(...,
    op_tables=False)``: the same Comparison as ``diff_sides(...)`` of the same sides and options."""
    if c.baseline.analysis is None or c.candidate.analysis is None:
        return c
    ops, kernels = _op_kernel_deltas(c.baseline, c.candidate, c.options, _windows(c.baseline, c.candidate))
    return dataclasses.replace(c, ops=ops, kernels=kernels)


def _replicate_tables(side: CompareSide, first: pd.DataFrame, warmup: int | None) -> list[pd.DataFrame]:
    """Step tables of every run of the side (the first run's is already computed, with its traces)."""
    if len(side.replicates) < 2:
        return [first]
    rest = [cs.compute_step_times(CompareSide(label=side.label, path=r.path, kind=side.kind, run=r), warmup)[0]
            for r in side.replicates[1:]]
    return [first, *rest]


def _machine_load(side: CompareSide) -> MachineLoad | None:
    return compute_machine_load(side.run.system, side.run.manifest) if side.run is not None else None


def diff_sides(baseline: CompareSide, candidate: CompareSide, options: CompareOptions | None = None, *,
               op_tables: bool = True) -> Comparison:
    """Compare ``candidate`` with ``baseline``; see the module docstring and docs/compare.md.

    Never raises for missing data: a quantity one side lacks gets verdict ``n/a`` and a note
    (the headline: ``inconclusive`` with its reason). ``op_tables=False`` leaves ``ops`` and
    ``kernels`` empty (the Compare page's first load, whose first tab does not show them; the
    costliest part of a comparison): ``with_op_tables`` adds them later.
    """
    o = options or CompareOptions()
    section = compute_step_section(baseline, candidate, o)
    notes: list[str] = list(section.notes)
    if section.est is None:
        notes.append("no step times on one side (neither step_time_s metrics nor ProfilerStep events)")
    labels = (baseline.label, candidate.label)
    replicated = (_replicate_tables(baseline, section.tables[0], o.warmup_steps),
                  _replicate_tables(candidate, section.tables[1], o.warmup_steps))
    loads = (_machine_load(baseline), _machine_load(candidate))
    contention = check_contention(replicated, loads, labels)
    headline = compute_headline(replicated[0], replicated[1], contention, o)
    section = follow_headline(section, headline)
    mem = cs.compute_peak_memory(baseline, candidate)
    mem_verdict = memory_verdict(mem, o)
    metrics = compare_metrics(baseline, candidate, o)
    # Only a difference needs confirming: a "same" verdict is not made less true by contention.
    # When contention made the headline inconclusive, its reason is the caution (said once).
    judged = (section.verdict in (Verdict.FASTER, Verdict.SLOWER)
              or headline.verdict in (HeadlineVerdict.FASTER, HeadlineVerdict.SLOWER))
    caution = contention.reason if contention.inconclusive else \
        load_warning(loads[0], loads[1], labels) if judged else ""
    deltas = _trace_deltas(baseline, candidate, o, op_tables)
    notes = ([caution] if caution else []) + notes + deltas.notes
    sets = _step_sets(headline, deltas.breakdown_steps, replicated)
    note = _sign_note(deltas.breakdown, headline, sets)
    if note:
        notes.append(note)
    manifests = [s.run.manifest if s.run is not None else None for s in (baseline, candidate)]
    a, b = baseline.analysis, candidate.analysis
    latency = compute_latency_rows(replicated[0], replicated[1], confidence=o.confidence, resamples=o.resamples,
                                   seed=o.seed, threshold=max(o.threshold, RUN_TO_RUN_MARGIN)) \
        if headline.quantity == HeadlineQuantity.LATENCY_PER_SAMPLE else []
    return Comparison(
        baseline=baseline, candidate=candidate, options=o,
        step_source=section.sources, step_times=section.tables,
        step_time=section.est, step_verdict=section.verdict,
        throughput=section.tp, throughput_unit=section.tp_unit, throughput_verdict=section.tp_verdict,
        peak_memory=mem, memory_verdict=mem_verdict,
        verdicts=compute_verdict_table(section, mem, mem_verdict, metrics, headline, latency), metrics=metrics,
        breakdown=deltas.breakdown, breakdown_steps=deltas.breakdown_steps, machine_load=loads, load_warning=caution,
        ops=deltas.ops, kernels=deltas.kernels,
        config=diff_config(manifests, [baseline.label, candidate.label]),
        modules=diff_module_trees(baseline.module_tree, candidate.module_tree),
        profiled_steps=(profiled_step_count(a) if a is not None else 0, profiled_step_count(b) if b is not None else 0),
        notes=notes + [f"baseline: {p}" for p in baseline.problems] + [f"candidate: {p}" for p in candidate.problems],
        headline=headline, contention=contention, step_sets=sets, sign_note=note,
        latency=pd.DataFrame(latency, columns=VERDICT_COLUMNS) if latency else None,
    )
