"""Logged metrics of both sides compared: final and best values, ratio, interval, verdict (analysis layer)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from app.analysis.compare import steps as cs
from app.analysis.compare.latency import is_inference_summary_key
from app.analysis.compare.options import CompareOptions
from app.analysis.compare.side import CompareSide
from app.analysis.stats.ratio import (
    Direction,
    RatioEstimate,
    Verdict,
    bootstrap_ratio_of_medians,
    classify_ratio,
)

__all__ = ["METRIC_COLUMNS", "compare_metrics"]

METRIC_COLUMNS = ["metric", "direction", "baseline_final", "candidate_final", "ratio", "ci_lo", "ci_hi", "verdict",
                  "baseline_best", "candidate_best", "window", "baseline_run_spread", "candidate_run_spread"]


def _bootstrap(a: np.ndarray, b: np.ndarray, o: CompareOptions) -> RatioEstimate | None:
    """Percentile bootstrap of the ratio of medians (logged metrics' final values)."""
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if len(a) == 0 or len(b) == 0:
        return None
    return bootstrap_ratio_of_medians(a, b, resamples=o.resamples, confidence=o.confidence, seed=o.seed)


def _metric_keys(ma: pd.DataFrame, mb: pd.DataFrame) -> list[str]:
    # Coordinates and settings, not outcomes: a schedule's lr is compared in the config diff.
    skip = {"step", "time", "rank", "step_time_s", "samples", "tokens", "profiled", "evaluation", "cpu_time_s",
            "contention", "steal", "lr", "learning_rate", "epoch", "compile", "compile_s"}
    keys = []
    for col in ma.columns:
        if col in skip or col not in mb.columns or is_inference_summary_key(str(col)):
            continue
        if pd.to_numeric(ma[col], errors="coerce").notna().any():
            keys.append(str(col))
    return keys


def _rank0(metrics: pd.DataFrame, key: str) -> np.ndarray:
    m = metrics
    if "rank" in m.columns and (m["rank"] == 0).any():
        m = m[m["rank"] == 0]
    if key not in m.columns:
        return np.array([])
    v = pd.to_numeric(m[key], errors="coerce").to_numpy(float, na_value=np.nan)
    out: np.ndarray = v[np.isfinite(v)]
    return out


def _run_finals(side: CompareSide, key: str) -> np.ndarray:
    """The final value (median of the final window) of ``key`` in each run of the side."""
    finals = [float(np.median(cs.final_window(v))) for v in (_rank0(r.metrics, key) for r in side.runs) if len(v)]
    return np.array(finals)


def _spread(values: np.ndarray) -> float:
    return float(np.std(values, ddof=1)) if len(values) >= 2 else np.nan


def compare_metrics(a: CompareSide, b: CompareSide, o: CompareOptions) -> pd.DataFrame:
    """One row per logged metric both runs have: final (last-window median) and best values.

    With replicates on both sides the final values, the ratio and its interval come from the
    runs' final values (one per run), so the interval covers run-to-run (seed) spread;
    ``*_run_spread`` is the standard deviation of the runs' final values (NaN for one run)."""
    if a.run is None or b.run is None:
        return pd.DataFrame(columns=METRIC_COLUMNS)
    ma, mb = a.run.metrics, b.run.metrics
    rows = []
    for key in _metric_keys(ma, mb):
        va, vb = _rank0(ma, key), _rank0(mb, key)
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
