"""eval_without_no_grad without trace evidence: the agent's ``eval_grad_enabled`` on evaluation lines.

The traces decide for the steps they cover; the agent's signal speaks for the evaluations outside
them, and for runs without traces. A real run of each kind is in tests/agent/test_accumulation.py.
"""
from __future__ import annotations

import pandas as pd
import pytest

from app.analysis.advisor import MissingEvidence
from app.analysis.advisor.evaluation import eval_without_no_grad
from tests.analysis.advisor.factory import events, evidence, steps, trace


def _metrics(evals: dict[int, bool | None], n: int = 12, step_time_s: float = 0.01,
             eval_time_s: float = 0.05) -> pd.DataFrame:
    """Step lines 0..n-1; ``evals`` step → eval_grad_enabled (None: an evaluation without the key)."""
    rows = []
    for s in range(n):
        row: dict[str, object] = {"step": s, "rank": 0,
                                  "step_time_s": eval_time_s if s in evals else step_time_s}
        if s in evals:
            row["evaluation"] = True
            if evals[s] is not None:
                row["eval_grad_enabled"] = evals[s]
        rows.append(row)
    return pd.DataFrame(rows)


def _fwd(name: str, ts: float, seq: int | None, dur: float = 10.0) -> dict:
    return {"name": name, "cat": "cpu_op", "ts_us": ts, "dur_us": dur, "pid": "1", "tid": "1",
            "sequence": seq}


TRAIN = [_fwd("aten::linear", 0, 0, 30), _fwd("aten::addmm", 5, 1), _fwd("AddmmBackward0", 101, 1)]


def test_without_traces_the_agents_signal_decides() -> None:
    [f] = eval_without_no_grad(evidence(metrics_df=_metrics({0: True, 5: True, 10: False})))
    assert f.step == 0 and f.evidence["evaluations_with_grad"] == 2 and f.evidence["evaluations_judged"] == 3
    assert "steps 0, 5" in f.explanation and "no profiler trace" in f.explanation
    # two evaluation steps of 50 ms where training steps take 10 ms: 80 ms beyond typical of 240 ms
    assert f.evidence["evaluation_excess_share"] == pytest.approx(0.08 / 0.24)
    assert f.weight is not None and f.weight.steps == 2 and f.weight.basis == "evaluations"
    assert eval_without_no_grad(evidence(metrics_df=_metrics({0: False, 5: False}))) == []


def test_runs_without_the_signal_are_still_skipped() -> None:
    with pytest.raises(MissingEvidence, match="needs a profiler trace"):
        eval_without_no_grad(evidence(metrics_df=_metrics({0: None, 5: None})))  # an older agent
    with pytest.raises(MissingEvidence, match="needs a profiler trace"):
        eval_without_no_grad(evidence(has_run=False))


def test_traces_that_miss_the_evaluation_leave_it_to_the_signal() -> None:
    ev = evidence(steps_df=steps(1, duration_us=400.0), traces=[trace(events(TRAIN))],
                  metrics_df=_metrics({5: True, 10: True}))
    [f] = eval_without_no_grad(ev)
    assert f.evidence["evaluation_steps_profiled"] == 0
    assert "none of them inside a profiler window" in f.explanation
    clean = evidence(steps_df=steps(1, duration_us=400.0), traces=[trace(events(TRAIN))],
                     metrics_df=_metrics({5: False}))
    assert eval_without_no_grad(clean) == []


def test_the_trace_decides_for_the_steps_it_covers() -> None:
    nograd = [_fwd("aten::conv2d", 200 + 20 * i, None) for i in range(6)]  # a no_grad evaluation in step 0
    covered = evidence(steps_df=steps(1, duration_us=400.0), traces=[trace(events(TRAIN + nograd))],
                       metrics_df=_metrics({0: True}))
    assert eval_without_no_grad(covered) == []  # the trace shows no_grad at step 0: it wins
    outside = evidence(steps_df=steps(1, duration_us=400.0), traces=[trace(events(TRAIN + nograd))],
                       metrics_df=_metrics({0: False, 6: True}))
    [f] = eval_without_no_grad(outside)  # another evaluation, not profiled, ran with grad
    assert f.step == 6 and f.evidence["evaluations_with_grad"] == 1
    unused = [_fwd("aten::conv2d", 200 + 20 * i, 10 + i) for i in range(6)]
    [t] = eval_without_no_grad(evidence(steps_df=steps(1, duration_us=400.0),
                                        traces=[trace(events(TRAIN + unused))],
                                        metrics_df=_metrics({0: True, 6: True})))
    assert t.evidence["unused_graph_ops"] == 6  # trace evidence first, with its measured cost
