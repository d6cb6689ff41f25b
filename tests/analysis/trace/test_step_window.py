"""Typical profiled steps (app.analysis.trace.step_window): evaluation steps and bare-trace outliers."""
from __future__ import annotations

import pandas as pd

from app.analysis.trace.step_window import evaluation_steps, typical_steps


def _steps(durations: dict[int, float], ranks: int = 1) -> pd.DataFrame:
    return pd.DataFrame([{"rank": r, "step": s, "duration_us": d * (1 + 0.01 * r)}
                         for r in range(ranks) for s, d in durations.items()])


def test_evaluation_steps_from_any_eval_metric() -> None:
    m = pd.DataFrame({"step": [1, 2, 3, 4], "loss": [1.0, 1.0, 1.0, 1.0], "val_loss": [None, 2.0, None, None],
                      "eval_acc": [None, None, None, 0.5]})
    assert evaluation_steps(m) == {2, 4}
    assert evaluation_steps(pd.DataFrame({"step": [1], "loss": [1.0]})) == set()
    assert evaluation_steps(None) == set()


def test_evaluation_step_left_out_on_every_rank() -> None:
    st = _steps({8: 500.0, 9: 2300.0, 10: 600.0}, ranks=2)
    w = typical_steps(st, pd.DataFrame({"step": [9], "val_loss": [1.0]}))
    assert sorted(set(w.steps["step"])) == [8, 10] and len(w.steps) == 4
    assert w.excluded == (9,) and w.count == 2 and "#9 (2.32 ms)" in w.note  # slowest rank: 2,323 µs


def test_nothing_left_out_when_every_profiled_step_evaluated() -> None:
    st = _steps({9: 2300.0})
    assert typical_steps(st, pd.DataFrame({"step": [9], "val_loss": [1.0]})).excluded == ()
    st = _steps({8: 500.0, 9: 2300.0})
    w = typical_steps(st, pd.DataFrame({"step": [8, 9], "val_loss": [1.0, 1.0]}))
    assert w.excluded == () and w.note == ""


def test_run_with_metrics_keeps_an_outlier_that_did_not_evaluate() -> None:
    st = _steps({8: 500.0, 9: 2300.0, 10: 600.0})
    assert typical_steps(st, pd.DataFrame({"step": [8, 9, 10], "loss": [1.0] * 3})).excluded == ()


def test_bare_trace_outliers_need_three_steps() -> None:
    assert typical_steps(_steps({1: 100.0, 2: 500.0})).excluded == ()
    w = typical_steps(_steps({1: 100.0, 2: 500.0, 3: 110.0}))
    assert w.excluded == (2,) and "median" in w.note and w.count == 2
    assert typical_steps(_steps({1: 100.0, 2: 190.0, 3: 110.0})).excluded == ()  # under 2x the median


def test_agent_evaluation_mark_counts_as_an_evaluation_step() -> None:
    m = pd.DataFrame({"step": [8, 9, 10], "loss": [1.0, 1.2, 1.0], "evaluation": [None, True, None]})
    assert evaluation_steps(m) == {9}
    w = typical_steps(_steps({8: 500.0, 9: 2300.0, 10: 600.0}), m)
    assert w.excluded == (9,) and "operator and the kernel deltas" in w.note
    assert evaluation_steps(pd.DataFrame({"step": [1, 2], "evaluation": [False, 0]})) == set()
