"""Advisor rules on the gradient-norm curve: exploding and vanishing gradients (analysis layer)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .common import DOCS, curve_weight, metric_curve
from .model import Finding, RunEvidence, Severity
from .registry import rule

__all__ = ["exploding_gradients", "vanishing_gradients"]

# Fewer points than this say nothing about a trend.
GRAD_MIN_POINTS = 10
# A step whose norm is 10× the median of the steps before it is a spike: an order of magnitude
# is far outside the step-to-step noise of a healthy run (usually within 2–3×).
GRAD_SPIKE_RATIO = 10.0
# Steps in the trailing median the spike is compared with.
GRAD_SPIKE_WINDOW = 20
# End-of-run median 10× the start: the norm grows instead of settling.
GRAD_GROWTH_RATIO = 10.0
# End-of-run median 1000× below the start, or below 1e-6 in absolute terms: updates vanish
# (a converging run typically loses 1–2 orders of magnitude, not three).
GRAD_VANISH_RATIO = 1e-3
GRAD_VANISH_ABS = 1e-6
# Share of the run compared at its start and its end.
GRAD_EDGE_SHARE = 0.2
# Priorities on the findings' gain scale (they are training-health problems, not time).
EXPLODING_PRIORITY = 0.5
VANISHING_PRIORITY = 0.3

_CLIP_FIX = """\
loss.backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)  # a few × the typical norm
optimizer.step()
# and/or lower the learning rate, or add warmup:
scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=500)"""

_VANISH_FIX = """\
# Keep gradients flowing: normalisation, residual connections, a suited init, a larger lr
model.apply(lambda m: torch.nn.init.kaiming_normal_(m.weight)
            if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)) else None)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)  # adaptive step sizes
# check for saturating activations (sigmoid/tanh) and use ReLU/GELU instead"""


def _edges(values: np.ndarray) -> tuple[float, float]:
    k = max(1, int(len(values) * GRAD_EDGE_SHARE))
    return float(np.median(values[:k])), float(np.median(values[-k:]))


def _grad_curve(ev: RunEvidence) -> pd.DataFrame:
    return metric_curve(ev, "grad_norm", min_points=GRAD_MIN_POINTS)


@rule("exploding_gradients", family="gradients", title="Gradient norm spikes or grows")
def exploding_gradients(ev: RunEvidence) -> list[Finding]:
    """Fires on non-finite norms, a spike ≥ GRAD_SPIKE_RATIO× the trailing median, or growth."""
    curve = _grad_curve(ev)
    v = curve["value"].to_numpy(dtype=float)
    finite = np.isfinite(v)
    trailing = pd.Series(np.where(finite, v, np.nan)).rolling(GRAD_SPIKE_WINDOW, min_periods=5).median().shift(1)
    ratio = (pd.Series(v) / trailing).to_numpy()
    ratio = np.where(np.isfinite(ratio), ratio, 0.0)
    spikes = int((ratio >= GRAD_SPIKE_RATIO).sum())
    nonfinite = int((~finite).sum())
    start, end = _edges(v[finite]) if finite.sum() >= GRAD_MIN_POINTS else (np.nan, np.nan)
    growth = end / start if start and np.isfinite(start) and start > 0 else 0.0
    if not spikes and not nonfinite and growth < GRAD_GROWTH_RATIO:
        return []
    worst = int(np.argmax(ratio)) if spikes else (int(np.argmin(finite)) if nonfinite else len(v) - 1)
    step = int(curve["step"].iloc[worst])
    what = (f"{nonfinite} non-finite gradient norms" if nonfinite else
            f"{spikes} spikes ≥ {GRAD_SPIKE_RATIO:g}× the recent median" if spikes else
            f"the norm grew {growth:.0f}× from start to end")
    return [Finding(
        rule="exploding_gradients", family="gradients", weight=curve_weight(v, measure="grad_norm"),
        severity=Severity.HIGH if nonfinite or growth >= GRAD_GROWTH_RATIO else Severity.MEDIUM,
        title=f"Exploding gradients: {what}",
        explanation=(
            f"The logged grad_norm shows {what} (worst at step {step}, max ratio {ratio.max():.1f}× "
            f"the trailing median). Large updates throw the weights far from where the loss was "
            f"improving; they usually precede loss spikes or NaN."
        ),
        evidence={"spikes": spikes, "nonfinite_norms": nonfinite, "max_spike_ratio": float(ratio.max()),
                  "start_median_norm": start, "end_median_norm": end, "growth_ratio": growth,
                  "worst_step": step, "max_norm": float(np.nanmax(np.where(finite, v, np.nan)))
                  if finite.any() else float("nan")},
        fix_summary="Clip the gradient norm before optimizer.step(), lower the learning rate or add warmup.",
        fix=_CLIP_FIX,
        expected_gain="stabler training (fewer loss spikes and restarts)",
        gain_share=EXPLODING_PRIORITY, doc_url=DOCS["clip"],
        chart="Metrics › grad_norm", step=step,
    )]


@rule("vanishing_gradients", family="gradients", title="Gradient norm collapses")
def vanishing_gradients(ev: RunEvidence) -> list[Finding]:
    """Fires when the end-of-run norm is ≤ GRAD_VANISH_RATIO× the start or below GRAD_VANISH_ABS."""
    curve = _grad_curve(ev)
    v = curve["value"].to_numpy(dtype=float)
    v = v[np.isfinite(v)]
    if len(v) < GRAD_MIN_POINTS:
        return []
    start, end = _edges(v)
    ratio = end / start if start > 0 else 1.0
    if not (ratio <= GRAD_VANISH_RATIO or end < GRAD_VANISH_ABS):
        return []
    return [Finding(
        rule="vanishing_gradients", family="gradients", severity=Severity.MEDIUM,
        weight=curve_weight(v, measure="grad_norm"),
        title=f"Vanishing gradients: norm fell to {end:.2g} ({ratio:.1e}× the start)",
        explanation=(
            f"The median gradient norm went from {start:.3g} at the start of the run to {end:.3g} at "
            f"the end. With gradients this small the weights barely move, so further steps buy little."
        ),
        evidence={"start_median_norm": start, "end_median_norm": end, "ratio": ratio,
                  "threshold_ratio": GRAD_VANISH_RATIO},
        fix_summary="Check initialisation, normalisation and activations; raise the learning rate or use an adaptive optimizer.",
        fix=_VANISH_FIX,
        expected_gain="training that keeps learning instead of stalling",
        gain_share=VANISHING_PRIORITY, doc_url=DOCS["clip"], chart="Metrics › grad_norm",
    )]
