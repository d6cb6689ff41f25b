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

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from app.analysis.compare import steps as cs
from app.analysis.compare.contention import ContentionCheck, check_contention
from app.analysis.compare.estimators import estimate_ratio
from app.analysis.compare.headline import Headline, HeadlineQuantity, HeadlineVerdict, compute_headline
from app.analysis.compare.side import CompareSide
from app.analysis.compare.step_sets import StepSet
from app.analysis.compare.step_sets import sign_note as _sign_note
from app.analysis.compare.step_sets import step_sets as _step_sets
from app.analysis.compare.machine_load import MachineLoad, compute_machine_load, load_warning
from app.analysis.compare.many_runs import diff_config
from app.analysis.compare.tables import OpGrouping, diff_breakdown, diff_kernels, diff_ops, profiled_step_count
from app.analysis.model.graph_diff import diff_module_trees
from app.analysis.trace.step_window import typical_steps
from app.analysis.stats.ratio import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    DEFAULT_THRESHOLD,
    Direction,
    RatioEstimate,
    Verdict,
    bootstrap_ratio_of_medians,
    classify_ratio,
)

__all__ = ["CompareOptions", "Comparison", "StepSet", "VERDICT_COLUMNS", "diff_sides", "no_interval_reason"]

VERDICT_COLUMNS = ["quantity", "unit", "baseline", "candidate", "ratio", "ci_lo", "ci_hi", "verdict", "note"]
_TIME_WORDS = {Verdict.BETTER: Verdict.FASTER, Verdict.WORSE: Verdict.SLOWER}
_MEMORY_WORDS = {Verdict.BETTER: Verdict.LESS, Verdict.WORSE: Verdict.MORE}


@dataclass(frozen=True)
class CompareOptions:
    """Knobs of a comparison; the defaults are the documented ones."""

    warmup_steps: int | None = None  # None: automatic (see compare_steps.auto_warmup)
    threshold: float = DEFAULT_THRESHOLD  # practical significance, as a fraction
    resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED
    confidence: float = 0.95
    op_grouping: OpGrouping = OpGrouping.NAME


_EMPTY_HEADLINE = Headline(quantity="step_time", baseline=None, candidate=None, ratio=None, ci95=None,
                           verdict="inconclusive", method="", replicates={"baseline": 1, "candidate": 1})


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
    contention: ContentionCheck = ContentionCheck()
    # "headline": the steady-state steps the headline uses; "deltas": the typical profiled steps
    # the waterfall and the op and kernel deltas average (evaluation steps and stalls left out).
    step_sets: dict[str, StepSet] = field(default_factory=dict)
    # Why the waterfall's mean profiled step moves the other way than the headline ("" when not).
    sign_note: str = ""

    @property
    def memory_ratio(self) -> float | None:
        a, b = self.peak_memory
        return _safe_ratio(b.bytes, a.bytes)


def _safe_ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or not den or not math.isfinite(num) or not math.isfinite(den):
        return None
    return float(num) / float(den)


def _bootstrap(a: np.ndarray, b: np.ndarray, o: CompareOptions) -> RatioEstimate | None:
    """Percentile bootstrap of the ratio of medians (logged metrics' final values)."""
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if len(a) == 0 or len(b) == 0:
        return None
    return bootstrap_ratio_of_medians(a, b, resamples=o.resamples, confidence=o.confidence, seed=o.seed)


def _speed_estimate(a: np.ndarray, b: np.ndarray, o: CompareOptions) -> RatioEstimate | None:
    """The headline's within-run method (estimate_ratio) on per-step times or rates, so the
    step-time and throughput rows state the same ratio and interval as a step-time headline."""
    a, b = a[np.isfinite(a) & (a > 0)], b[np.isfinite(b) & (b > 0)]
    if len(a) == 0 or len(b) == 0:
        return None
    return estimate_ratio(a, b, resamples=o.resamples, confidence=o.confidence, seed=o.seed)


def _follow_headline(steps: dict[str, Any], headline: Headline) -> None:
    """One verdict for one comparison: the step-time and throughput verdicts are the headline's
    whenever they measure the judged quantity (or its inverse); a step time that is not the
    judged quantity (samples per step differ) is not judged on its own."""
    verdict = HeadlineVerdict(headline.verdict)
    if headline.quantity == HeadlineQuantity.STEP_TIME:
        steps["verdict"] = steps["tp_verdict"] = verdict
        return
    # time per sample / token: step times are not comparable, throughput is the judged quantity's inverse
    steps["verdict"] = verdict  # diff --json step_time.verdict is the comparison's speed verdict
    steps["why"] = f"not judged on its own: the headline judges {headline.quantity_words}"
    if headline.quantity == HeadlineQuantity.TIME_PER_SAMPLE and steps["tp_unit"] == "samples_per_s":
        steps["tp_verdict"] = verdict


def _verdict_row(quantity: str, unit: str, est: RatioEstimate | None, verdict: Verdict, note: str = "") -> dict:
    if est is None:
        return {"quantity": quantity, "unit": unit, "baseline": np.nan, "candidate": np.nan, "ratio": np.nan,
                "ci_lo": np.nan, "ci_hi": np.nan, "verdict": str(verdict), "note": note}
    return {"quantity": quantity, "unit": unit, "baseline": est.baseline, "candidate": est.candidate,
            "ratio": est.ratio, "ci_lo": est.lo, "ci_hi": est.hi, "verdict": str(verdict), "note": note}


def _metric_keys(a: CompareSide, b: CompareSide) -> list[str]:
    if a.run is None or b.run is None:
        return []
    # Coordinates and settings, not outcomes: a schedule's lr is compared in the config diff.
    skip = {"step", "time", "rank", "step_time_s", "samples", "tokens", "profiled", "evaluation", "cpu_time_s",
            "contention", "steal", "lr", "learning_rate", "epoch", "compile", "compile_s"}
    keys = []
    for col in a.run.metrics.columns:
        if col in skip or col not in b.run.metrics.columns:
            continue
        if pd.to_numeric(a.run.metrics[col], errors="coerce").notna().any():
            keys.append(str(col))
    return keys


def _rank0(metrics: pd.DataFrame, key: str) -> np.ndarray:
    m = metrics
    if "rank" in m.columns and (m["rank"] == 0).any():
        m = m[m["rank"] == 0]
    if key not in m.columns:
        return np.array([])
    v = pd.to_numeric(m[key], errors="coerce").to_numpy(float, na_value=np.nan)
    return v[np.isfinite(v)]


def _run_finals(side: CompareSide, key: str) -> np.ndarray:
    """The final value (median of the final window) of ``key`` in each run of the side."""
    finals = [float(np.median(cs.final_window(v))) for v in (_rank0(r.metrics, key) for r in side.runs) if len(v)]
    return np.array(finals)


def _spread(values: np.ndarray) -> float:
    return float(np.std(values, ddof=1)) if len(values) >= 2 else np.nan


METRIC_COLUMNS = ["metric", "direction", "baseline_final", "candidate_final", "ratio", "ci_lo", "ci_hi", "verdict",
                  "baseline_best", "candidate_best", "window", "baseline_run_spread", "candidate_run_spread"]


def _compare_metrics(a: CompareSide, b: CompareSide, o: CompareOptions) -> pd.DataFrame:
    """One row per logged metric both runs have: final (last-window median) and best values.

    With replicates on both sides the final values, the ratio and its interval come from the
    runs' final values (one per run), so the interval covers run-to-run (seed) spread;
    ``*_run_spread`` is the standard deviation of the runs' final values (NaN for one run)."""
    rows = []
    for key in _metric_keys(a, b):
        va, vb = _rank0(a.run.metrics, key), _rank0(b.run.metrics, key)
        if len(va) == 0 or len(vb) == 0:
            continue
        direction = cs.metric_direction(key)
        fa, fb = _run_finals(a, key), _run_finals(b, key)
        replicated = len(fa) >= 2 and len(fb) >= 2
        wa, wb = (fa, fb) if replicated else (cs.final_window(va), cs.final_window(vb))
        positive = (wa > 0).all() and (wb > 0).all()
        est = _bootstrap(wa, wb, o) if positive else None
        verdict = classify_ratio(est.ratio, est.lo, est.hi, direction=direction, threshold=o.threshold) \
            if est is not None else Verdict.UNKNOWN
        best = np.min if direction is not Direction.HIGHER else np.max
        rows.append({"metric": key, "direction": str(direction),
                     "baseline_final": float(np.median(wa)), "candidate_final": float(np.median(wb)),
                     "ratio": est.ratio if est else np.nan, "ci_lo": est.lo if est else np.nan,
                     "ci_hi": est.hi if est else np.nan, "verdict": str(verdict),
                     "baseline_best": float(best(va)), "candidate_best": float(best(vb)),
                     "window": f"{len(fa)} runs/{len(fb)} runs" if replicated else f"{len(wa)}/{len(wb)}",
                     "baseline_run_spread": _spread(fa), "candidate_run_spread": _spread(fb)})
    return pd.DataFrame(rows, columns=METRIC_COLUMNS)


def no_interval_reason(est: RatioEstimate) -> str:
    """Why ``est`` has no confidence interval, in words ("1 step per side: no confidence interval")."""
    na, nb = est.n_baseline, est.n_candidate
    if na < 2 or nb < 2:
        counts = f"{na} step per side" if na == nb else f"{na} step(s) in the baseline, {nb} in the candidate"
        return f"{counts}: no confidence interval"
    return "a median of 0 on one side: no confidence interval"


def _interval_verdict(est: RatioEstimate | None, direction: Direction, o: CompareOptions) -> tuple[Verdict, str]:
    """(verdict, reason it is not judged) of a time or throughput estimate.

    faster/slower needs a bootstrap interval that excludes 1.0 and a ratio beyond the practical
    threshold; without an interval (fewer than 2 kept steps on a side) the verdict is ``same``
    and the reason says why, so a CI gate never fails on a single step."""
    if est is None:
        return Verdict.UNKNOWN, ""
    if not est.has_interval:
        if not math.isfinite(est.ratio) or est.ratio <= 0:
            return Verdict.UNKNOWN, ""
        return Verdict.SAME, f"{no_interval_reason(est)}, so no faster/slower verdict (ratio {est.ratio:.3f})"
    raw = classify_ratio(est.ratio, est.lo, est.hi, direction=direction, threshold=o.threshold)
    return _TIME_WORDS.get(raw, raw), ""  # BETTER/WORSE → FASTER/SLOWER; SAME, UNKNOWN as they are


def _step_section(a: CompareSide, b: CompareSide, o: CompareOptions) -> dict[str, Any]:
    ta, src_a = cs.compute_step_times(a, o.warmup_steps)
    tb, src_b = cs.compute_step_times(b, o.warmup_steps)
    notes = []
    if src_a != src_b:
        notes.append(f"step times come from {src_a} (baseline) and {src_b} (candidate); trace steps "
                     "include profiler overhead, so the ratio is less reliable")
    est = _speed_estimate(cs.kept_step_times(ta), cs.kept_step_times(tb), o)
    verdict, why = _interval_verdict(est, Direction.LOWER, o)
    if why:
        notes.append(f"step time: {why}")
    (tp_a, unit_a), (tp_b, unit_b) = cs.kept_throughput(ta), cs.kept_throughput(tb)
    if unit_a != unit_b:
        tp_a, tp_b, unit_a = 1.0 / cs.kept_step_times(ta), 1.0 / cs.kept_step_times(tb), "steps_per_s"
    tp = _speed_estimate(tp_a, tp_b, o)
    sa, sb = (float(np.nanmedian(t.loc[t["kept"].astype(bool), "samples"].to_numpy(float)))
              if t["kept"].astype(bool).any() and t["samples"].notna().any() else math.nan for t in (ta, tb))
    if unit_a == "samples_per_s" and math.isfinite(sa) and math.isfinite(sb) and sa != sb:
        notes.append(f"samples per step differ ({sa:g} vs {sb:g}): judge speed by throughput, not step time")
    tp_verdict, _ = _interval_verdict(tp, Direction.HIGHER, o)  # same steps: the step-time note covers it
    return {"tables": (ta, tb), "sources": (str(src_a), str(src_b)), "est": est, "verdict": verdict, "why": why,
            "tp": tp, "tp_unit": unit_a, "tp_verdict": tp_verdict, "notes": notes}


def _memory_verdict(mem: tuple[cs.PeakMemory, cs.PeakMemory], o: CompareOptions) -> Verdict:
    ratio = _safe_ratio(mem[1].bytes, mem[0].bytes)
    if ratio is None:
        return Verdict.UNKNOWN
    raw = classify_ratio(ratio, threshold=o.threshold)
    return _MEMORY_WORDS.get(raw, raw)


def _headline_row(h: Headline) -> dict:
    lo, hi = h.ci95 if h.ci95 else (np.nan, np.nan)
    return {"quantity": f"{h.quantity_words} (headline)", "unit": "s", "baseline": h.baseline if h.baseline else np.nan,
            "candidate": h.candidate if h.candidate else np.nan, "ratio": h.ratio if h.ratio else np.nan,
            "ci_lo": lo, "ci_hi": hi, "verdict": h.verdict, "note": h.method}


def _metric_note(r: Any) -> str:
    if "runs" not in str(r.window):
        return f"median of the last {r.window} values"
    return (f"median of the runs' final values ({r.window}); run-to-run sd {r.baseline_run_spread:.4g} / "
            f"{r.candidate_run_spread:.4g}")


def _verdict_table(steps: dict[str, Any], mem, mem_verdict: Verdict, metrics: pd.DataFrame,
                   headline: Headline) -> pd.DataFrame:
    rows = [_headline_row(headline)]
    if headline.quantity != HeadlineQuantity.STEP_TIME:  # a step-time headline already is this row
        rows.append(_verdict_row("step time (median)", "s", steps["est"], "",
                                 f"steady state, from {steps['sources'][0]}; {steps['why']}"))
    rows.append(_verdict_row("throughput (median)", steps["tp_unit"].replace("_per_", "/"), steps["tp"],
                             steps["tp_verdict"]))
    ratio = _safe_ratio(mem[1].bytes, mem[0].bytes)
    rows.append({"quantity": "peak memory", "unit": "bytes", "baseline": mem[0].bytes or np.nan,
                 "candidate": mem[1].bytes or np.nan, "ratio": ratio if ratio is not None else np.nan,
                 "ci_lo": np.nan, "ci_hi": np.nan, "verdict": str(mem_verdict),
                 "note": f"{mem[0].quantity} ({mem[0].source})" if mem[0].source != "none"
                 else "no memory quantity both sides have"})
    for r in metrics.itertuples(index=False):
        rows.append({"quantity": f"{r.metric} (final)", "unit": "", "baseline": r.baseline_final,
                     "candidate": r.candidate_final, "ratio": r.ratio, "ci_lo": r.ci_lo, "ci_hi": r.ci_hi,
                     "verdict": r.verdict, "note": _metric_note(r)})
        if r.direction != str(Direction.NONE):
            rows.append({"quantity": f"{r.metric} (best)", "unit": "", "baseline": r.baseline_best,
                         "candidate": r.candidate_best, "ratio": _safe_ratio(r.candidate_best, r.baseline_best)
                         or np.nan, "ci_lo": np.nan, "ci_hi": np.nan, "verdict": "", "note": r.direction + " is better"})
    return pd.DataFrame(rows, columns=VERDICT_COLUMNS)


@dataclass(frozen=True)
class _StepsOnly:
    """What diff_breakdown reads of a TraceAnalysis: its step table."""

    steps: pd.DataFrame


def _windows(a: CompareSide, b: CompareSide) -> list[Any]:
    """Each side's typical profiled steps (app.analysis.trace.step_window)."""
    return [typical_steps(getattr(s.analysis, "steps", None), s.run.metrics if s.run is not None else None)
            for s in (a, b)]


def _breakdown(windows: list[Any]) -> tuple[pd.DataFrame, tuple[int, int], list[str]]:
    """The per-step breakdown over each side's typical profiled steps, their counts and notes."""
    notes = [f"{role}: {w.note}" for role, w in zip(("baseline", "candidate"), windows, strict=True) if w.note]
    table = diff_breakdown(_StepsOnly(windows[0].steps), _StepsOnly(windows[1].steps))
    return table, (windows[0].count, windows[1].count), notes


def _replicate_tables(side: CompareSide, first: pd.DataFrame, warmup: int | None) -> list[pd.DataFrame]:
    """Step tables of every run of the side (the first run's is already computed, with its traces)."""
    if len(side.replicates) < 2:
        return [first]
    rest = [cs.compute_step_times(CompareSide(label=side.label, path=r.path, kind=side.kind, run=r), warmup)[0]
            for r in side.replicates[1:]]
    return [first, *rest]


def diff_sides(baseline: CompareSide, candidate: CompareSide, options: CompareOptions | None = None) -> Comparison:
    """Compare ``candidate`` with ``baseline``; see the module docstring and docs/compare.md.

    Never raises for missing data: a quantity one side lacks gets verdict ``n/a`` and a note
    (the headline: ``inconclusive`` with its reason).
    """
    o = options or CompareOptions()
    steps = _step_section(baseline, candidate, o)
    notes: list[str] = list(steps["notes"])
    if steps["est"] is None:
        notes.append("no step times on one side (neither step_time_s metrics nor ProfilerStep events)")
    labels = (baseline.label, candidate.label)
    replicated = (_replicate_tables(baseline, steps["tables"][0], o.warmup_steps),
                  _replicate_tables(candidate, steps["tables"][1], o.warmup_steps))
    loads = tuple(compute_machine_load(s.run.system, s.run.manifest) if s.run is not None else None
                  for s in (baseline, candidate))
    contention = check_contention(replicated, loads, labels)
    headline = compute_headline(replicated[0], replicated[1], contention, o)
    _follow_headline(steps, headline)
    mem = cs.compute_peak_memory(baseline, candidate)
    mem_verdict = _memory_verdict(mem, o)
    metrics = _compare_metrics(baseline, candidate, o)
    a, b = baseline.analysis, candidate.analysis
    have_traces = a is not None and b is not None
    if not have_traces:
        notes.append("breakdown, operators and kernels need traces on both sides")
    # Only a difference needs confirming: a "same" verdict is not made less true by contention.
    # When contention made the headline inconclusive, its reason is the caution (said once).
    judged = steps["verdict"] in (Verdict.FASTER, Verdict.SLOWER) or headline.verdict in ("faster", "slower")
    caution = contention.reason if contention.inconclusive else \
        load_warning(loads[0], loads[1], labels) if judged else ""
    if caution:
        notes.insert(0, caution)
    empty = pd.DataFrame()
    windows = _windows(baseline, candidate) if have_traces else None
    breakdown, breakdown_steps, window_notes = _breakdown(windows) if windows else (empty, (0, 0), [])
    notes += window_notes
    kept = dict(baseline_kept=windows[0].steps, candidate_kept=windows[1].steps) if windows else {}
    traces = dict(baseline_traces=baseline.traces, candidate_traces=candidate.traces)
    sets = _step_sets(headline, breakdown_steps, replicated)
    note = _sign_note(breakdown, headline, sets)
    if note:
        notes.append(note)
    manifests = [s.run.manifest if s.run is not None else None for s in (baseline, candidate)]
    return Comparison(
        baseline=baseline, candidate=candidate, options=o,
        step_source=steps["sources"], step_times=steps["tables"],
        step_time=steps["est"], step_verdict=steps["verdict"],
        throughput=steps["tp"], throughput_unit=steps["tp_unit"], throughput_verdict=steps["tp_verdict"],
        peak_memory=mem, memory_verdict=mem_verdict,
        verdicts=_verdict_table(steps, mem, mem_verdict, metrics, headline), metrics=metrics,
        breakdown=breakdown, breakdown_steps=breakdown_steps, machine_load=loads, load_warning=caution,
        ops=diff_ops(a, b, grouping=o.op_grouping, **traces, **kept) if have_traces else empty,
        kernels=diff_kernels(a, b, **traces, **kept) if have_traces else empty,
        config=diff_config(manifests, [baseline.label, candidate.label]),
        modules=diff_module_trees(baseline.module_tree, candidate.module_tree),
        profiled_steps=(profiled_step_count(a) if a is not None else 0, profiled_step_count(b) if b is not None else 0),
        notes=notes + [f"baseline: {p}" for p in baseline.problems] + [f"candidate: {p}" for p in candidate.problems],
        headline=headline, contention=contention, step_sets=sets, sign_note=note,
    )
