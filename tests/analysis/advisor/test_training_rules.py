"""Curve rules (gradients, NaN loss, overfitting, divergence, plateau): fire on the problem, silent without."""
from __future__ import annotations

import math

import numpy as np
import pytest

from app.analysis.advisor import MissingEvidence, advise
from app.analysis.advisor.gradients import exploding_gradients, vanishing_gradients
from app.analysis.advisor.training import loss_divergence, loss_plateau, nonfinite_loss, overfitting
from tests.analysis.advisor.factory import evidence, metrics

HEALTHY = [2.0 * math.exp(-i / 30) + 0.1 for i in range(90)]  # still falling at the end
RNG = np.random.default_rng(0)


def _ev(**cols):  # noqa: ANN003, ANN202
    return evidence(metrics_df=metrics(**cols))


def test_nonfinite_loss_fires_at_first_nan_step():
    loss = [2.0, 1.5, 1.2, 1.1, float("nan"), float("nan"), float("nan")]
    [f] = nonfinite_loss(_ev(loss=loss, lr=[0.1] * 7))
    assert f.step == 4 and f.severity == "high"
    assert f.evidence["first_bad_step"] == 4 and f.evidence["lr_at_bad_step"] == 0.1
    assert f.evidence["last_finite_loss"] == pytest.approx(1.1)


def test_nonfinite_loss_fires_on_inf_and_is_silent_on_healthy():
    [f] = nonfinite_loss(_ev(loss=[2.0, 1.0, float("inf"), 1.0]))
    assert "Inf" in f.title and f.step == 2
    assert nonfinite_loss(_ev(loss=HEALTHY)) == []


def test_nonfinite_loss_ignores_rows_that_never_log_loss():
    # eval rows log val_loss only: NaN loss there is "not logged", not NaN
    m = metrics(loss=[2.0, float("nan"), 1.5, float("nan"), 1.2, float("nan")],
                val_loss=[float("nan"), 1.9, float("nan"), 1.7, float("nan"), 1.6])
    assert nonfinite_loss(evidence(metrics_df=m)) == []


def test_exploding_gradients_spike_and_growth():
    norms = list(1.0 + 0.1 * RNG.random(40))
    norms[30] = 50.0
    [f] = exploding_gradients(_ev(grad_norm=norms))
    assert f.step == 30 and f.evidence["spikes"] >= 1 and f.evidence["max_spike_ratio"] > 10
    growing = [1.0 * 1.2 ** i for i in range(40)]
    [g] = exploding_gradients(_ev(grad_norm=growing))
    assert g.evidence["growth_ratio"] >= 10 and g.severity == "high"
    assert exploding_gradients(_ev(grad_norm=list(1.0 + 0.1 * RNG.random(40)))) == []


def test_vanishing_gradients():
    [f] = vanishing_gradients(_ev(grad_norm=[1.0 * 0.7 ** i for i in range(40)]))
    assert f.evidence["ratio"] <= 1e-3
    assert vanishing_gradients(_ev(grad_norm=[1.0 / (1 + 0.05 * i) for i in range(40)])) == []


def test_gradient_rules_need_the_curve():
    with pytest.raises(MissingEvidence):
        exploding_gradients(_ev(loss=HEALTHY))


def test_overfitting_when_val_rises_and_train_falls():
    n = 60
    loss = [2.0 - i * 0.03 for i in range(n)]
    val = [float("nan")] * n
    for s, v in zip(range(9, n, 10), [1.5, 1.2, 1.1, 1.25, 1.4, 1.6]):
        val[s] = v
    [f] = overfitting(_ev(loss=loss, val_loss=val))
    assert f.evidence["best_step"] == 29 and f.evidence["best_val_loss"] == pytest.approx(1.1)
    assert f.evidence["val_rise"] == pytest.approx(1.6 / 1.1 - 1)
    improving = [float("nan")] * n
    for s, v in zip(range(9, n, 10), [1.5, 1.2, 1.1, 1.05, 1.0, 0.98]):
        improving[s] = v
    assert overfitting(_ev(loss=loss, val_loss=improving)) == []
    never_improved = [float("nan")] * n  # best at the first evaluation: instability, not overfitting
    for s, v in zip(range(9, n, 10), [0.57, 2.63, 1.01, 1.2, 1.1, 1.3]):
        never_improved[s] = v
    assert overfitting(_ev(loss=loss, val_loss=never_improved)) == []


def test_divergence_and_no_divergence():
    loss = [2.0 - 0.03 * i for i in range(40)] + [0.8 + 0.1 * i for i in range(40)]
    [f] = loss_divergence(_ev(loss=loss, lr=[0.5] * 80))
    assert f.evidence["rise_ratio"] >= 1.5 and f.evidence["lr_at_best"] == 0.5
    assert loss_divergence(_ev(loss=HEALTHY)) == []


def test_plateau_with_constant_lr_and_not_learning():
    plateau = [2.0 * math.exp(-i / 8) + 0.5 + 0.001 * RNG.random() for i in range(90)]
    [f] = loss_plateau(_ev(loss=plateau, lr=[0.1] * 90))
    assert f.evidence["lr_constant"] == 1 and f.severity == "low"
    assert "ReduceLROnPlateau" in f.fix
    [g] = loss_plateau(_ev(loss=[2.3 + 0.01 * RNG.random() for _ in range(90)]))
    assert g.title == "Loss is not decreasing" and g.severity == "medium"
    assert loss_plateau(_ev(loss=HEALTHY)) == []


def test_curve_rules_stay_silent_on_a_bare_trace():
    advice = advise(evidence(has_run=False))
    for rule_id in ("nonfinite_loss", "overfitting", "loss_divergence", "loss_plateau", "exploding_gradients",
                    "vanishing_gradients", "cpu_threads"):
        assert rule_id in advice.skipped
    assert advice.findings == () and advice.errors == {}
