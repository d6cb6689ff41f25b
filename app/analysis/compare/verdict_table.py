"""The verdict table of a comparison: one row per judged quantity (analysis layer).

Headline, step time, throughput, for inference runs latency per sample at p50/p90/p99
(compare_latency), peak memory and every logged metric (final and best), with the
baseline and candidate values, the ratio, its interval, the verdict and a note (docs/compare.md).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from app.analysis.compare import steps as cs
from app.analysis.compare.headline import Headline, HeadlineQuantity
from app.analysis.compare.options import CompareOptions
from app.analysis.compare.step_section import StepSection
from app.analysis.stats.ratio import Direction, RatioEstimate, Verdict, classify_ratio

__all__ = ["VERDICT_COLUMNS", "compute_verdict_table", "memory_verdict", "safe_ratio"]

VERDICT_COLUMNS = ["quantity", "unit", "baseline", "candidate", "ratio", "ci_lo", "ci_hi", "verdict", "note"]
_MEMORY_WORDS = {Verdict.BETTER: Verdict.LESS, Verdict.WORSE: Verdict.MORE}
# One row of the table: numbers (NaN when absent) and texts, by VERDICT_COLUMNS.
_Row = dict[str, float | str | None]


def safe_ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or not den or not math.isfinite(num) or not math.isfinite(den):
        return None
    return float(num) / float(den)


def _verdict_row(quantity: str, unit: str, est: RatioEstimate | None, verdict: str, note: str = "") -> _Row:
    if est is None:
        return {"quantity": quantity, "unit": unit, "baseline": np.nan, "candidate": np.nan, "ratio": np.nan,
                "ci_lo": np.nan, "ci_hi": np.nan, "verdict": str(verdict), "note": note}
    return {"quantity": quantity, "unit": unit, "baseline": est.baseline, "candidate": est.candidate,
            "ratio": est.ratio, "ci_lo": est.lo, "ci_hi": est.hi, "verdict": str(verdict), "note": note}


def memory_verdict(mem: tuple[cs.PeakMemory, cs.PeakMemory], o: CompareOptions) -> Verdict:
    """less/more/same by the peak-memory ratio and the practical threshold (unknown without both peaks)."""
    ratio = safe_ratio(mem[1].bytes, mem[0].bytes)
    if ratio is None:
        return Verdict.UNKNOWN
    raw = classify_ratio(ratio, threshold=o.threshold)
    return _MEMORY_WORDS.get(raw, raw)


def _headline_row(h: Headline) -> _Row:
    lo, hi = h.ci95 if h.ci95 else (np.nan, np.nan)
    return {"quantity": f"{h.quantity_words} (headline)", "unit": "s", "baseline": h.baseline if h.baseline else np.nan,
            "candidate": h.candidate if h.candidate else np.nan, "ratio": h.ratio if h.ratio else np.nan,
            "ci_lo": lo, "ci_hi": hi, "verdict": str(h.verdict), "note": h.method}


def _metric_note(window: str, baseline_run_spread: float, candidate_run_spread: float) -> str:
    if "runs" not in str(window):
        return f"median of the last {window} values"
    return (f"median of the runs' final values ({window}); run-to-run sd {baseline_run_spread:.4g} / "
            f"{candidate_run_spread:.4g}")


def compute_verdict_table(steps: StepSection, mem: tuple[cs.PeakMemory, cs.PeakMemory], mem_verdict: Verdict,
                          metrics: pd.DataFrame, headline: Headline,
                          latency: list[_Row] | None = None) -> pd.DataFrame:
    """The table (VERDICT_COLUMNS) of the module docstring; ``latency``: the quantile rows
    (compare_latency.compute_latency_rows), after the headline."""
    rows = [_headline_row(headline), *(latency or [])]
    if headline.quantity != HeadlineQuantity.STEP_TIME:  # a step-time headline already is this row
        rows.append(_verdict_row("step time (median)", "s", steps.est, "",
                                 f"steady state, from {steps.sources[0]}; {steps.why}"))
    rows.append(_verdict_row("throughput (median)", steps.tp_unit.replace("_per_", "/"), steps.tp,
                             steps.tp_verdict))
    ratio = safe_ratio(mem[1].bytes, mem[0].bytes)
    rows.append({"quantity": "peak memory", "unit": "bytes", "baseline": mem[0].bytes or np.nan,
                 "candidate": mem[1].bytes or np.nan, "ratio": ratio if ratio is not None else np.nan,
                 "ci_lo": np.nan, "ci_hi": np.nan, "verdict": str(mem_verdict),
                 "note": f"{mem[0].quantity} ({mem[0].source})" if mem[0].source != "none"
                 else "no memory quantity both sides have"})
    for r in metrics.itertuples(index=False):
        rows.append({"quantity": f"{r.metric} (final)", "unit": "", "baseline": r.baseline_final,
                     "candidate": r.candidate_final, "ratio": r.ratio, "ci_lo": r.ci_lo, "ci_hi": r.ci_hi,
                     "verdict": r.verdict,
                     "note": _metric_note(str(r.window), r.baseline_run_spread, r.candidate_run_spread)})
        if r.direction != str(Direction.NONE):
            rows.append({"quantity": f"{r.metric} (best)", "unit": "", "baseline": r.baseline_best,
                         "candidate": r.candidate_best, "ratio": safe_ratio(r.candidate_best, r.baseline_best)
                         or np.nan, "ci_lo": np.nan, "ci_hi": np.nan, "verdict": "", "note": r.direction + " is better"})
    return pd.DataFrame(rows, columns=VERDICT_COLUMNS)
