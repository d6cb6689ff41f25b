"""Advisor rules on the loss curves: NaN/Inf loss, overfitting, divergence and plateaus (analysis layer)."""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pandas as pd

from .common import DOCS, curve_weight, metric_curve, require_run
from .model import Finding, MissingEvidence, RunEvidence, Severity
from .registry import Guard, rule

__all__ = ["nonfinite_loss", "overfitting", "loss_divergence", "loss_plateau", "best_val_loss", "curve_noise"]

# Keys that mark a metrics row as a training-step row (the agent logs them every step).
_TRAIN_KEYS = ("loss", "lr", "step_time_s", "grad_norm", "samples")
# A NaN in a row without a loss only means "loss is NaN" if the loss was logged on (nearly)
# every training row before: NaN is written as NaN, but a table cannot tell NaN from absent.
LOSS_COVERAGE_MIN = 0.9
# Validation points needed to call a trend: with 3 points any wobble is a "U". And how far the
# end must be above the best: at least 5% relative, and more than OVERFIT_NOISE_K times the curve's
# own noise (curve_noise) — a flat noisy curve's last points sit above its lowest by chance.
OVERFIT_MIN_VAL_POINTS = 5
OVERFIT_RISE = 0.05
OVERFIT_NOISE_K = 3.0
# The "end" of the curve: the median of its last fifth (at least 2 points); the "best": the median
# of the 3 points around the minimum, so one lucky evaluation is not the bar.
OVERFIT_TAIL_SHARE = 0.2
# Curve points needed for divergence/plateau calls; the smoothing window is a tenth of them.
CURVE_MIN_POINTS = 20
# Smoothed loss 50% above its best and above where it started: diverging, not noise.
DIVERGE_RATIO = 1.5
# Last third of the run improved the loss by less than 1% of its value: a plateau.
PLATEAU_TAIL = 1 / 3
PLATEAU_REL = 0.01
# Whole run improved the loss by less than 5%: it is not learning at all.
NOT_LEARNING_REL = 0.05
# With at least 9 val_loss points (three per third) the plateau is judged on the validation curve,
# by levels, not points: the median of its last third against the median of the third before. A
# single smoothed point of a noisy training loss moves by more than 1% by chance (batch-16 MSE:
# ±35% per step; the sample variant lr_plateau.py read an 18% "improvement" on a flat curve).
VAL_PLATEAU_MIN_POINTS = 9
# The improvement must also clear PLATEAU_Z standard errors of that difference of medians (from
# curve_noise: 1.2533 σ √(1/n₁ + 1/n₂), the median's efficiency against the mean), else it is noise.
PLATEAU_Z = 2.0

_NAN_FIX = """\
torch.autograd.set_detect_anomaly(True)   # while debugging: names the op that made the NaN
optimizer = torch.optim.SGD(model.parameters(), lr=lr / 10)  # lower the learning rate
scaler = torch.amp.GradScaler()           # with fp16 autocast: skips steps with inf/NaN grads
scaler.scale(loss).backward(); scaler.unscale_(optimizer)
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer); scaler.update()"""

_OVERFIT_FIX = """\
optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
best = float("inf"); patience = 3
for epoch in range(epochs):
    train_one_epoch(); val = evaluate()
    if val < best: best, bad = val, 0; torch.save(model.state_dict(), "best.pt")
    else:
        bad += 1
        if bad >= patience: break   # early stopping
# and more data augmentation / dropout"""

_DIVERGE_FIX = """\
optimizer = torch.optim.SGD(model.parameters(), lr=lr / 3, momentum=0.9)  # smaller steps
warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=500)
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)  # before optimizer.step()"""

_PLATEAU_FIX = """\
scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.1, patience=5)
# ... after each evaluation:
scheduler.step(val_loss)
# or a fixed schedule: StepLR(optimizer, step_size=30, gamma=0.1) / CosineAnnealingLR(optimizer, T_max=epochs)"""


def _rank_rows(ev: RunEvidence) -> pd.DataFrame:
    require_run(ev, "the loss curve")
    m = ev.metrics
    if m is None or m.empty or "loss" not in m.columns:
        raise MissingEvidence("needs the logged metric 'loss'")
    if "rank" in m.columns and m["rank"].notna().any():
        m = m[m["rank"] == m["rank"].min()]
    return m.sort_values("step", kind="stable")


@rule("nonfinite_loss", family="training", title="Loss became NaN or Inf")
def nonfinite_loss(ev: RunEvidence) -> list[Finding]:
    """Fires at the first training step whose loss is NaN or ±Inf."""
    m = _rank_rows(ev)
    keys = [k for k in _TRAIN_KEYS if k in m.columns]
    train = m[m[keys].notna().any(axis=1) | np.isinf(m["loss"].astype(float))]
    loss = train["loss"].astype(float).to_numpy()
    finite = np.isfinite(loss)
    if not finite.any() or finite.all():
        return []
    first_ok = int(np.argmax(finite))
    bad_idx = [i for i in range(first_ok + 1, len(loss)) if not finite[i]]
    if not bad_idx:
        return []
    first_bad = bad_idx[0]
    is_inf = bool(np.isinf(loss[first_bad]))
    if not is_inf and finite[:first_bad].mean() < LOSS_COVERAGE_MIN:
        return []  # the loss is not logged on every row: a missing value proves nothing
    step = int(train["step"].iloc[first_bad])
    wasted = (len(loss) - first_bad) / len(loss)
    last_ok = float(loss[:first_bad][finite[:first_bad]][-1])
    evidence = {"first_bad_step": step, "last_finite_loss": last_ok, "nonfinite_steps": len(bad_idx),
                "wasted_share": wasted}
    if "lr" in train.columns and pd.notna(train["lr"].iloc[first_bad]):
        evidence["lr_at_bad_step"] = float(train["lr"].iloc[first_bad])
    if "grad_norm" in train.columns and first_bad > 0 and pd.notna(train["grad_norm"].iloc[first_bad - 1]):
        evidence["grad_norm_before"] = float(train["grad_norm"].iloc[first_bad - 1])
    return [Finding(
        rule="nonfinite_loss", family="training", severity=Severity.HIGH,
        weight=curve_weight(loss, measure="loss"),
        title=f"Loss became {'Inf' if is_inf else 'NaN'} at step {step}",
        explanation=(
            f"The loss was {last_ok:.4g} just before step {step}, then non-finite on {len(bad_idx)} "
            f"logged steps ({wasted * 100:.0f}% of the run). Once weights hold NaN nothing after it trains."
        ),
        evidence=evidence,
        fix_summary="Lower the learning rate, clip gradients, use GradScaler with fp16, and find the op with anomaly detection.",
        fix=_NAN_FIX,
        expected_gain=f"the {wasted * 100:.0f}% of the run after step {step} becomes useful training",
        gain_share=max(wasted, 0.5), doc_url=DOCS["anomaly"], chart="Metrics › loss", step=step,
    )]


def curve_noise(values: np.ndarray) -> float:
    """Robust point-to-point noise (a standard deviation) of a curve: 1.4826 × the MAD of its second
    differences, / √6. Second, not first, differences: a U-shaped curve's slope changes sign, which
    inflates the spread of first differences; a smooth curve's second differences are nearly
    constant and the MAD (about their median) keeps only the noise. For white noise σ,
    var(x[i+1] − 2x[i] + x[i−1]) = 6σ². 0.0 with fewer than 3 points."""
    v = np.asarray(values, float)
    if len(v) < 3:
        return 0.0
    d2 = np.diff(v, 2)
    return float(1.4826 * np.median(np.abs(d2 - np.median(d2))) / math.sqrt(6))


def _val_curve(ev: RunEvidence) -> pd.DataFrame:
    val = metric_curve(ev, "val_loss", min_points=OVERFIT_MIN_VAL_POINTS)
    val = val[np.isfinite(val["value"])].reset_index(drop=True)  # positions below, not labels
    if len(val) < OVERFIT_MIN_VAL_POINTS:
        raise MissingEvidence(f"needs at least {OVERFIT_MIN_VAL_POINTS} finite val_loss values (has {len(val)})")
    return val


def best_val_loss(ev: RunEvidence) -> float:
    """The lowest logged validation loss (the quantity the overfitting rule guards)."""
    return float(_val_curve(ev)["value"].min())


def _rise(v: np.ndarray, best_i: int) -> tuple[float, float, float]:
    """(best level, end level, noise) of a validation curve whose minimum is at ``best_i``."""
    best_level = float(np.median(v[max(0, best_i - 1):best_i + 2]))
    tail = max(2, int(len(v) * OVERFIT_TAIL_SHARE))
    return best_level, float(np.median(v[-tail:])), curve_noise(v)


@rule("overfitting", family="training", title="Validation loss rises while training loss falls",
      guards=Guard("best_val_loss", "lower", "best val_loss", best_val_loss))
def overfitting(ev: RunEvidence) -> list[Finding]:
    """Fires with ≥ OVERFIT_MIN_VAL_POINTS val_loss values when val_loss improved, bottomed out and its
    end is OVERFIT_RISE above its best and more than OVERFIT_NOISE_K × its noise, while the training
    loss kept falling."""
    val = _val_curve(ev)
    train = metric_curve(ev, "loss", min_points=2)
    train = train[np.isfinite(train["value"])]
    if len(train) < 2:
        return []
    v = val["value"].to_numpy(float)
    best_i = int(np.argmin(v))
    best, last = float(v[best_i]), float(v[-1])
    best_step, last_step = int(val["step"].iloc[best_i]), int(val["step"].iloc[-1])
    # Overfitting is a U: validation improves, bottoms out, then rises. A curve whose best point
    # is its first evaluation never improved; that is early instability (e.g. BatchNorm
    # statistics in the first steps) or divergence, which other rules judge.
    if best_i == 0 or best_i >= len(v) - 1 or last <= best * (1 + OVERFIT_RISE):
        return []
    best_level, end_level, noise = _rise(v, best_i)
    rise = end_level - best_level
    if rise <= OVERFIT_NOISE_K * noise or end_level <= best_level * (1 + OVERFIT_RISE):
        return []  # within the curve's own noise
    train_at_best = float(train[train["step"] <= best_step]["value"].tail(5).mean())
    train_end = float(train["value"].tail(5).mean())
    if not (train_end < train_at_best):
        return []
    steps_total = float(train["step"].max() - train["step"].min()) or 1.0
    wasted = (float(train["step"].max()) - best_step) / steps_total
    # MEDIUM always, so the HIGH gate has nothing to cap; the weight says what the call rests on.
    weight = curve_weight(v, measure="val_loss", basis="evaluation points")
    evidence = {"best_val_loss": best, "best_step": best_step, "last_val_loss": last,
                "val_rise": last / best - 1, "train_loss_at_best": train_at_best,
                "train_loss_end": train_end, "val_points": len(v), "val_noise": noise}
    beyond = ""
    if noise > 0:
        evidence["rise_over_noise"] = rise / noise
        beyond = (f" Over {len(v)} evaluations the end of the curve ({end_level:.4g}) is {rise:.3g} above its best "
                  f"({best_level:.4g}), {rise / noise:.1f}× the curve's own noise ({noise:.3g}): not a wobble.")
    return [Finding(
        rule="overfitting", family="training", severity=Severity.MEDIUM, weight=weight,
        title=f"Overfitting: val_loss up {(last / best - 1) * 100:.0f}% since step {best_step}",
        explanation=(
            f"Validation loss was best ({best:.4g}) at step {best_step} and is {last:.4g} at step "
            f"{last_step}, while the training loss kept falling ({train_at_best:.4g} → {train_end:.4g}).{beyond} "
            f"The model is memorising the training set."
        ),
        evidence=evidence,
        fix_summary="Stop at the best validation loss (early stopping), add weight decay, augmentation or dropout.",
        fix=_OVERFIT_FIX,
        expected_gain=f"a better model, and {wasted * 100:.0f}% of the steps saved by stopping at the best point",
        gain_share=wasted, doc_url=DOCS["weight_decay"], chart="Metrics › loss and val_loss",
        step=best_step,
    )]


def _smoothed_loss(ev: RunEvidence) -> pd.DataFrame:
    curve = metric_curve(ev, "loss", min_points=CURVE_MIN_POINTS)
    curve = curve[np.isfinite(curve["value"])].reset_index(drop=True)
    if len(curve) < CURVE_MIN_POINTS:
        raise MissingEvidence(f"needs at least {CURVE_MIN_POINTS} finite loss values")
    window = max(3, len(curve) // 10)
    curve["smooth"] = curve["value"].rolling(window, min_periods=1).median()
    return curve


def _lr_at(ev: RunEvidence, step: int) -> float | None:
    try:
        lr = metric_curve(ev, "lr")
    except MissingEvidence:
        return None
    before = lr[lr["step"] <= step]
    return float(before["value"].iloc[-1]) if len(before) else None


@rule("loss_divergence", family="training", title="Loss rises far above its best")
def loss_divergence(ev: RunEvidence) -> list[Finding]:
    """Fires when the smoothed loss ends DIVERGE_RATIO× above its minimum and above its start."""
    c = _smoothed_loss(ev)
    s = c["smooth"].to_numpy()
    best_i = int(np.argmin(s))
    if best_i == len(s) - 1 or not (s[-1] >= DIVERGE_RATIO * s[best_i] and s[-1] > s[0]) or s[best_i] <= 0:
        return []
    best_step = int(c["step"].iloc[best_i])
    lr = _lr_at(ev, best_step)
    evidence = {"best_loss": float(s[best_i]), "best_step": best_step, "end_loss": float(s[-1]),
                "rise_ratio": float(s[-1] / s[best_i])}
    if lr is not None:
        evidence["lr_at_best"] = lr
    wasted = (len(s) - best_i) / len(s)
    return [Finding(
        rule="loss_divergence", family="training", severity=Severity.HIGH,
        weight=curve_weight(c["value"].to_numpy(float), measure="loss"),
        title=f"Loss diverges: {s[-1] / s[best_i]:.1f}× its best since step {best_step}",
        explanation=(
            f"The smoothed training loss reached {s[best_i]:.4g} at step {best_step} and climbed to "
            f"{s[-1]:.4g}{f' with lr {lr:.3g}' if lr is not None else ''}. A learning rate that is too "
            f"high for this point of training is the usual cause."
        ),
        evidence=evidence,
        fix_summary="Lower the learning rate (÷3–10), add warmup and gradient clipping.",
        fix=_DIVERGE_FIX,
        expected_gain=f"the last {wasted * 100:.0f}% of the run trains instead of undoing progress",
        gain_share=wasted, doc_url=DOCS["lr_schedule"], chart="Metrics › loss and lr", step=best_step,
    )]


class _Plateau(NamedTuple):
    curve: str  # "loss" or "val_loss"
    start: float
    mid: float
    end: float
    cut_step: int
    values: np.ndarray
    significant: bool  # the tail's improvement is beyond the curve's noise (val_loss only)
    noise: float


def _val_plateau(ev: RunEvidence) -> _Plateau | None:
    """The plateau measured on val_loss by levels (None with fewer than VAL_PLATEAU_MIN_POINTS)."""
    try:
        val = metric_curve(ev, "val_loss", min_points=VAL_PLATEAU_MIN_POINTS)
    except MissingEvidence:
        return None
    val = val[np.isfinite(val["value"])].reset_index(drop=True)
    if len(val) < VAL_PLATEAU_MIN_POINTS:
        return None
    v = val["value"].to_numpy(float)
    a, b = len(v) // 3, 2 * len(v) // 3
    mid, end = float(np.median(v[a:b])), float(np.median(v[b:]))
    noise = curve_noise(v)
    se = 1.2533 * noise * math.sqrt(1 / (b - a) + 1 / (len(v) - b))
    return _Plateau("val_loss", float(v[0]), mid, end, int(val["step"].iloc[b]), v,
                    mid - end > PLATEAU_Z * se, noise)


def _loss_plateau(ev: RunEvidence) -> _Plateau:
    c = _smoothed_loss(ev)
    s = c["smooth"].to_numpy()
    n = len(s)
    cut = int(n * (1 - PLATEAU_TAIL))
    return _Plateau("loss", float(s[min(n - 1, max(3, n // 10))]), float(s[cut]), float(s[-1]),
                    int(c["step"].iloc[cut]), c["value"].to_numpy(float), True, 0.0)


@rule("loss_plateau", family="training", title="Loss stopped improving")
def loss_plateau(ev: RunEvidence) -> list[Finding]:
    """Fires when the last PLATEAU_TAIL of the run improved the loss by < PLATEAU_REL; with
    ≥ VAL_PLATEAU_MIN_POINTS val_loss points, when the median val_loss of the last third is not
    PLATEAU_REL and PLATEAU_Z standard errors below the median of the third before."""
    loss = _loss_plateau(ev)  # needs CURVE_MIN_POINTS losses either way, as before val_loss counted
    p = _val_plateau(ev) or loss
    start, mid, end = p.start, p.mid, p.end
    scale = max(abs(mid), 1e-12)
    tail_gain = (mid - end) / scale
    if (tail_gain >= PLATEAU_REL and p.significant) or end > mid * DIVERGE_RATIO:
        return []  # still improving, or diverging (the divergence rule speaks)
    total_gain = (start - end) / max(abs(start), 1e-12)
    not_learning = total_gain < NOT_LEARNING_REL
    lr_tail = _lr_values(ev, p.cut_step)
    constant_lr = lr_tail is not None and np.nanmax(lr_tail) - np.nanmin(lr_tail) <= 1e-12 * max(1.0, abs(np.nanmax(lr_tail)))
    evidence = {"tail_improvement": tail_gain, "run_improvement": total_gain,
                "plateau_from_step": p.cut_step, "loss_end": end}
    if p.curve == "val_loss":
        evidence.update(val_points=len(p.values), val_noise=p.noise)
    if lr_tail is not None:
        evidence["lr_end"] = float(lr_tail[-1])
        evidence["lr_constant"] = int(constant_lr)
    why = ("The loss has barely moved over the whole run: the learning rate is far off (too low, or so "
           "high that updates cancel out) or the model cannot fit the data." if not_learning else
           "The loss stopped improving over the last third of the run" +
           (" while the learning rate stayed constant: a decay usually unlocks the next drop." if constant_lr
            else "; if it is above your target, try a different learning rate or schedule."))
    what = "Validation loss" if p.curve == "val_loss" else "Loss"
    return [Finding(
        rule="loss_plateau", family="training",
        weight=curve_weight(p.values, measure=p.curve,
                            basis="evaluation points" if p.curve == "val_loss" else "logged steps"),
        severity=Severity.MEDIUM if not_learning else Severity.LOW,
        title=(f"{what} is not decreasing" if not_learning else
               f"{what} plateaued from step {p.cut_step}"),
        explanation=f"{why} Improvement{' of the val_loss' if p.curve == 'val_loss' else ''} over the last third: "
                    f"{tail_gain * 100:.2f}%; over the run: {total_gain * 100:.1f}%.",
        evidence=evidence,
        fix_summary=("Sweep the learning rate over a few orders of magnitude." if not_learning else
                     "Decay the learning rate on plateau (or on a schedule), or stop early."),
        fix=_PLATEAU_FIX,
        expected_gain="lower final loss, or the plateau's steps saved by stopping earlier",
        gain_share=PLATEAU_TAIL if not not_learning else 0.6, doc_url=DOCS["lr_schedule"],
        chart=f"Metrics › {p.curve} and lr", step=p.cut_step,
    )]


def _lr_values(ev: RunEvidence, from_step: int) -> np.ndarray | None:
    try:
        lr = metric_curve(ev, "lr")
    except MissingEvidence:
        return None
    tail = lr[lr["step"] >= from_step]["value"].to_numpy(dtype=float)
    return tail if len(tail) else None
