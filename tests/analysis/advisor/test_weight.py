"""Advice with its weight: the steps and windows a finding rests on, the one HIGH gate (common.weigh),
the overfitting rule's points and noise, evaluation steps from the agent's flag, and a diff that never
calls a finding "resolved" when the quantity it guards got worse."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from app.analysis.advisor import (
    MissingEvidence,
    Severity,
    Weight,
    advise,
    describe_weight,
    diff_advice,
)
from app.analysis.advisor.common import MIN_STEPS_HIGH, count_windows, evaluation_step_numbers, weigh
from app.analysis.advisor.dataloading import data_loading_bound
from app.analysis.advisor.evaluation import eval_without_no_grad
from app.analysis.advisor.optimizer import optimizer_expensive
from app.analysis.advisor.training import curve_noise, overfitting
from app.analysis.advisor.transfers import host_device_copies
from tests.analysis.advisor.factory import events, evidence, kernel_step, metrics, steps, trace


def _opt_steps(durations_us: list[float], opt_shares: list[float], numbers: list[int] | None = None) -> pd.DataFrame:
    """A step table whose steps last ``durations_us`` with the optimizer taking ``opt_shares`` of each
    (forward+backward the rest, so the optimizer/forward+backward ratio is well above 0.2)."""
    rows = []
    t = 0.0
    for i, (d, share) in enumerate(zip(durations_us, opt_shares)):
        rest = d * (1 - share)
        rows.append({"rank": 0, "step": numbers[i] if numbers else i, "start_us": t, "end_us": t + d, "duration_us": d,
                     "host_start_us": t, "host_end_us": t + d, "optimizer_us": d * share,
                     "forward_us": rest * 0.4, "backward_us": rest * 0.6, "dataloader_us": 0.0})
        t += d
    return pd.DataFrame(rows)


# -- the HIGH gate ----------------------------------------------------------------------------------

def test_three_unstable_steps_are_not_high():
    # The reported case: three profiled steps of 7.5-35 ms, the optimizer's mean share 46% because
    # the one slow step was mostly optimizer.
    st = _opt_steps([7_500, 12_000, 35_000], [0.10, 0.15, 0.60])
    [f] = optimizer_expensive(evidence(steps_df=st))
    assert f.evidence["optimizer_share"] > 0.25  # the aggregate alone would have said HIGH
    assert f.severity == Severity.MEDIUM
    w = f.weight
    assert (w.steps, w.windows, w.basis, w.measure) == (3, 1, "profiled steps", "optimizer_share")
    assert w.step_ms == pytest.approx((7.5, 35.0)) and w.spread == pytest.approx((0.10, 0.60))
    assert w.stable is False and w.note.startswith("capped at MEDIUM: rests on 3 profiled steps in 1 window")
    text = describe_weight(w)
    assert text.startswith("from 3 profiled steps in 1 window, 7.5–35 ms per step; optimizer_share 10.0%–60.0% per step")


def test_many_stable_steps_are_high():
    rng = np.random.default_rng(3)
    st = _opt_steps(list(10_000 + 500 * rng.random(12)), list(0.30 + 0.02 * rng.random(12)))
    [f] = optimizer_expensive(evidence(steps_df=st))
    assert f.severity == Severity.HIGH
    assert f.weight.steps == 12 and f.weight.stable is True and f.weight.note == ""


def test_many_steps_with_one_outlier_are_not_high():
    # Ten steps: nine at 12% optimizer, one 10x longer at 80%: the sum says 48%, one step in ten agrees.
    st = _opt_steps([10_000] * 9 + [100_000], [0.12] * 9 + [0.80])
    [f] = optimizer_expensive(evidence(steps_df=st))
    assert f.evidence["optimizer_share"] > 0.25 and f.severity == Severity.MEDIUM
    assert "above the HIGH threshold (0.25) in only 1 of 10 steps" in f.weight.note


def test_two_windows_count_as_a_repeat():
    # Four stable steps: too few in one window, enough in two (steps 0-1 and 10-11; a wait between).
    st = _opt_steps([10_000] * 4, [0.30] * 4, numbers=[0, 1, 10, 11])
    [f] = optimizer_expensive(evidence(steps_df=st))
    assert f.weight.windows == 2 and f.severity == Severity.HIGH
    one_window = _opt_steps([10_000] * 4, [0.30] * 4)
    assert count_windows(evidence(steps_df=one_window), one_window) == 1
    assert optimizer_expensive(evidence(steps_df=one_window))[0].severity == Severity.MEDIUM


def test_weigh_gate_both_directions_and_counts_only():
    sev, w = weigh(Severity.HIGH, values=[0.1, 0.2, 0.15, 0.1, 0.2], high=0.25, steps=5, worse="below",
                   measure="busy_share")
    assert sev == Severity.HIGH and w.stable  # busy below 25% in every step: GPU idle, stably
    sev, w = weigh(Severity.HIGH, values=None, high=0.4, steps=MIN_STEPS_HIGH - 1)
    assert sev == Severity.MEDIUM and "HIGH needs at least 5 profiled steps" in w.note
    sev, w = weigh(Severity.MEDIUM, values=[0.0], high=0.25, steps=1)
    assert sev == Severity.MEDIUM and w.note == ""  # nothing capped, nothing to say


def test_copies_in_some_steps_only_are_not_high():
    def rows(n: int, copy_steps: set[int]) -> list[dict]:
        out = []
        for s in range(n):
            out += kernel_step(s * 10_000.0, n_kernels=5, kernel_us=500.0, corr0=100 * s)
            if s in copy_steps:
                out.append({"name": "Memcpy HtoD (Pinned -> Device)", "cat": "gpu_memcpy", "ts_us": s * 10_000.0 + 500,
                            "dur_us": 9000.0, "pid": "0", "tid": "7"})
        return out

    # Every other step copies for 90% of it: 45% on average, far above the 20% HIGH bar, in half the steps.
    [f] = host_device_copies(evidence(steps_df=steps(6), traces=[trace(events(rows(6, {1, 3, 5})))]))
    assert f.evidence["copy_share"] == pytest.approx(0.45) and f.severity == Severity.MEDIUM
    assert f.weight.steps == 6 and f.weight.spread == pytest.approx((0.0, 0.9))
    assert "in only 3 of 6 steps" in f.weight.note
    [g] = host_device_copies(evidence(steps_df=steps(6), traces=[trace(events(rows(6, set(range(6)))))]))
    assert g.severity == Severity.HIGH and g.weight.stable  # 90% in every step


def test_weight_in_json_is_additive():
    st = _opt_steps([7_500, 12_000, 35_000], [0.10, 0.15, 0.60])
    advice = advise(evidence(steps_df=st), rules=["optimizer_expensive"])
    doc = json.loads(json.dumps(advice.to_json(), allow_nan=False))
    [f] = doc["findings"]
    assert f["weight"] == {"steps": 3, "windows": 1, "basis": "profiled steps", "measure": "optimizer_share",
                           "spread": [0.1, 0.6], "step_ms": [7.5, 35.0], "stable": False,
                           "note": f["weight"]["note"]}
    assert f["severity"] == "medium" and {"rule", "evidence", "gain_share", "step", "rank"} <= set(f)
    assert doc["measures"]["optimizer_expensive"] == pytest.approx(f["evidence"]["optimizer_share"])


# -- evaluation steps from the agent's flag -----------------------------------------------------------

def test_evaluation_flag_marks_steps_like_val_metrics():
    m = pd.DataFrame({"step": [0, 1, 2, 3], "rank": 0, "step_time_s": [0.01] * 4,
                      "evaluation": [None, None, True, None]})
    ev = evidence(metrics_df=m)
    assert evaluation_step_numbers(ev) == {2}
    assert evaluation_step_numbers(evidence(has_run=False, metrics_df=m)) == set()


def test_flagged_evaluation_step_leaves_the_step_shares():
    # Step 2 held an evaluation (functional loss: no val_* metric, only the agent's flag) and lasted 10x.
    st = steps(8, dataloader=3000)
    st.loc[st["step"] == 2, ["duration_us", "cpu_exec_us"]] = [100_000.0, 97_000.0]
    m = pd.DataFrame({"step": range(8), "rank": 0, "step_time_s": [0.01] * 8, "evaluation": [None] * 2 + [True] + [None] * 5})
    [f] = data_loading_bound(evidence(steps_df=st, metrics_df=m))
    assert f.evidence["step_ms"] == pytest.approx(10.0) and f.evidence["dataloader_share"] == pytest.approx(0.3)
    assert f.weight.steps == 7
    opt = _opt_steps([10_000] * 6, [0.30] * 6)
    opt.loc[2, ["duration_us", "optimizer_us"]] = [90_000.0, 0.0]  # an evaluation: no optimizer work
    m6 = pd.DataFrame({"step": range(6), "rank": 0, "evaluation": [None, None, True, None, None, None]})
    [g] = optimizer_expensive(evidence(steps_df=opt, metrics_df=m6))
    assert g.evidence["optimizer_share"] == pytest.approx(0.30)


def test_eval_rule_names_evaluation_steps_that_were_not_profiled():
    fwd = lambda name, ts, seq, dur=10.0: {"name": name, "cat": "cpu_op", "ts_us": ts, "dur_us": dur,  # noqa: E731
                                           "pid": "1", "tid": "1", "sequence": seq}
    train = [fwd("aten::linear", 0, 0, 30), fwd("aten::addmm", 5, 1), fwd("AddmmBackward0", 101, 1)]
    m = pd.DataFrame({"step": [0, 5, 10], "rank": 0, "evaluation": [None, True, True]})
    ev = evidence(steps_df=steps(1, duration_us=400.0), traces=[trace(events(train))], metrics_df=m)
    with pytest.raises(MissingEvidence, match=r"evaluated at step\(s\) 5, 10, none of them profiled"):
        eval_without_no_grad(ev)
    m0 = pd.DataFrame({"step": [0], "rank": 0, "evaluation": [True]})
    with pytest.raises(MissingEvidence, match=r"profiled step\(s\) #0 held an evaluation"):
        eval_without_no_grad(evidence(steps_df=steps(1, duration_us=400.0), traces=[trace(events(train))], metrics_df=m0))


# -- overfitting: enough points, a rise beyond the curve's own noise ----------------------------------

N = 100
TRAIN = [2.0 - i * 0.015 for i in range(N)]  # falling all along


def _val(values: list[float]) -> list[float]:
    """``values`` logged at evenly spaced steps after the first, NaN elsewhere (evaluation rows)."""
    out = [float("nan")] * N
    every = N // len(values)
    for k, v in enumerate(values):
        out[every * (k + 1) - 1] = v
    return out


def _ev(val: list[float]):  # noqa: ANN202
    return evidence(metrics_df=metrics(loss=TRAIN, val_loss=_val(val)))


def test_overfitting_needs_five_points():
    with pytest.raises(MissingEvidence, match="at least 5"):
        overfitting(_ev([1.5, 1.1, 1.6]))  # a "U" of three points proves nothing


def test_noisy_flat_curve_does_not_fire():
    # Flat at 1.0 with ±0.08 noise; its lowest point is early and the end sits 9% above it.
    flat = [1.02, 0.93, 1.07, 0.96, 1.05, 0.95, 1.08, 0.98, 1.03, 1.01]
    assert min(flat) == flat[1] and flat[-1] > flat[1] * 1.05  # the old rule's condition held
    assert overfitting(_ev(flat)) == []
    rng = np.random.default_rng(7)  # and seldom on random flat curves
    fired = sum(bool(overfitting(_ev(list(1.0 + 0.05 * rng.normal(size=12))))) for _ in range(100))
    assert fired <= 8


def test_real_rise_fires_with_its_weight():
    rising = [1.5, 1.3, 1.15, 1.08, 1.05, 1.07, 1.13, 1.2, 1.28, 1.36]
    [f] = overfitting(_ev(rising))
    assert f.evidence["best_val_loss"] == pytest.approx(1.05) and f.evidence["val_points"] == 10
    assert f.evidence["rise_over_noise"] > 3
    assert f.weight == Weight(steps=10, basis="evaluation points", measure="val_loss", spread=(1.05, 1.5))
    assert "the curve's own noise" in f.explanation
    assert describe_weight(f.weight) == "from 10 evaluation points; val_loss 1.05–1.5 across the evaluation points"


def test_curve_noise_ignores_a_smooth_trend():
    x = np.linspace(0, 1, 20)
    assert curve_noise(1 + (x - 0.5) ** 2) == pytest.approx(0.0, abs=1e-9)
    noisy = 1 + (x - 0.5) ** 2 + 0.05 * np.random.default_rng(0).normal(size=20)
    assert 0.02 < curve_noise(noisy) < 0.1
    assert curve_noise(np.array([1.0, 2.0])) == 0.0


# -- the diff: never "resolved" when the guarded quantity got worse ------------------------------------

def test_overfitting_not_resolved_when_the_best_val_loss_is_worse():
    base = advise(_ev([1.5, 1.3, 1.15, 1.08, 1.05, 1.07, 1.13, 1.2, 1.28, 1.36]), rules=["overfitting"])
    # The candidate no longer rises at the end, but its best validation loss is 56% worse.
    worse = advise(_ev([1.95, 1.9, 1.85, 1.8, 1.75, 1.72, 1.7, 1.68, 1.66, 1.64]), rules=["overfitting"])
    assert [f.rule for f in base.findings] == ["overfitting"] and worse.findings == ()
    d = diff_advice(base, worse)
    assert d.resolved == () and [w.baseline.rule for w in d.worse] == ["overfitting"]
    [w] = d.worse
    assert w.baseline_value == pytest.approx(1.05) and w.candidate_value == pytest.approx(1.64)
    assert w.reason == "best val_loss 1.05 → 1.64 (+56%; lower is better)"
    doc = d.to_json()
    assert doc["worse"][0]["guards"] == "best_val_loss" and doc["worse"][0]["better"] == "lower"
    better = advise(_ev([1.4, 1.2, 1.0, 0.9, 0.85, 0.82, 0.8, 0.79, 0.78, 0.77]), rules=["overfitting"])
    assert [f.rule for f in diff_advice(base, better).resolved] == ["overfitting"]


def test_optimizer_not_resolved_when_its_share_grew():
    # The candidate switched to a fused optimizer (the rule is silent) yet spends more of the step in it.
    base = advise(evidence(steps_df=_opt_steps([10_000] * 6, [0.30] * 6)), rules=["optimizer_expensive"])
    fused = trace(events([{"name": "aten::_fused_adamw_", "cat": "cpu_op", "ts_us": 1.0, "dur_us": 5.0}]))
    cand = advise(evidence(steps_df=_opt_steps([10_000] * 6, [0.40] * 6), traces=[fused]), rules=["optimizer_expensive"])
    d = diff_advice(base, cand)
    assert d.resolved == () and d.worse[0].reason.startswith("optimizer share of the step 0.3 → 0.4")
    cheaper = advise(evidence(steps_df=_opt_steps([10_000] * 6, [0.05] * 6)), rules=["optimizer_expensive"])
    assert [f.rule for f in diff_advice(base, cheaper).resolved] == ["optimizer_expensive"]


def test_compare_rows_list_the_worse_group():
    from app.analysis.compare.advice import findings_diff_rows

    base = advise(_ev([1.5, 1.3, 1.15, 1.08, 1.05, 1.07, 1.13, 1.2, 1.28, 1.36]), rules=["overfitting"])
    cand = advise(_ev([1.95, 1.9, 1.85, 1.8, 1.75, 1.72, 1.7, 1.68, 1.66, 1.64]), rules=["overfitting"])
    [row] = findings_diff_rows(diff_advice(base, cand))
    assert row["status"] == "not resolved: got worse" and "best val_loss 1.05 → 1.64" in row["title"]
    assert not math.isnan(base.measures["overfitting"])


def test_a_left_out_evaluation_step_does_not_split_a_window():
    # Profiled steps 8, 9, 10 in one trace; 9 held an evaluation and leaves the shares: still 1 window.
    st = steps(3, dataloader=3000).assign(step=[8, 9, 10])
    m = pd.DataFrame({"step": [8, 9, 10], "rank": 0, "evaluation": [None, True, None]})
    ev = evidence(steps_df=st, metrics_df=m, traces=[trace(events([]))])
    [f] = data_loading_bound(ev)
    assert (f.weight.steps, f.weight.windows) == (2, 1)
    two = steps(4, dataloader=3000).assign(step=[8, 10, 20, 21])  # a wait between 10 and 20: 3 runs
    assert count_windows(evidence(steps_df=two), two) == 3
    adjacent = steps(4, dataloader=3000)  # two traces with no wait between them
    assert count_windows(evidence(steps_df=adjacent, traces=[trace(events([])), trace(events([]))]), adjacent) == 2
