"""The advisor's inference rules on hand-made evidence: each fires on its problem, points at the
numbers, and stays silent (or says "not checked") where the run cannot show it."""
from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from app.analysis.advisor import MissingEvidence, RunEvidence, advise
from app.analysis.advisor import inference as rules


def _evidence(n: int = 40, **marks: Any) -> RunEvidence:
    batch = marks.pop("samples", 8)
    idle = marks.pop("idle_s", 2e-3)
    lines = [{"step": i, "rank": 0, "step_time_s": 1e-3, "samples": batch, "idle_s": idle, "inference": True,
              **({"warmup": True} if i < 3 else {}), **marks} for i in range(n)]
    tree = {"root": {"type": "Net", "children": [{"type": "Dropout", "children": []},
                                                 {"type": "Linear", "children": []}]}}
    return RunEvidence(source="serve", has_run=True, metrics=pd.DataFrame(lines), module_tree=tree)


def test_grad_mode_and_train_mode_fire_with_their_evidence() -> None:
    ev = _evidence(grad_enabled=True, train_mode=True)
    (grad,) = rules.inference_grad_enabled(ev)
    assert grad.evidence["grad_enabled_calls"] == 37 and grad.evidence["grad_enabled_share"] == 1.0
    assert "inference_mode" in grad.fix
    (train,) = rules.inference_train_mode(ev)
    assert train.evidence["dropout_batchnorm_layers"] == 1 and "model.eval()" in train.fix_summary


def test_clean_inference_is_silent() -> None:
    ev = _evidence()
    assert rules.inference_grad_enabled(ev) == [] and rules.inference_train_mode(ev) == []
    assert rules.inference_batch_one(ev) == []


def test_batch_one_fires_only_when_calls_come_back_to_back() -> None:
    (f,) = rules.inference_batch_one(_evidence(samples=1, idle_s=1e-4))
    assert f.evidence["batch_median"] == 1.0 and f.evidence["idle_median_s"] == pytest.approx(1e-4)
    assert rules.inference_batch_one(_evidence(samples=1, idle_s=0.5)) == []  # requests arrive slowly


def test_training_runs_are_not_checked() -> None:
    ev = RunEvidence(source="train", has_run=True,
                     metrics=pd.DataFrame([{"step": i, "step_time_s": 0.1, "loss": 1.0} for i in range(10)]))
    for check in (rules.inference_grad_enabled, rules.inference_host_overhead):
        with pytest.raises(MissingEvidence, match="inference run"):
            check(ev)
    advice = advise(ev)
    assert "inference run" in advice.skipped["inference_grad_enabled"]
    assert "inference_grad_enabled" not in advice.checked


def test_host_overhead_needs_a_trace() -> None:
    with pytest.raises(MissingEvidence, match="profiled"):
        rules.inference_host_overhead(_evidence())


def test_activation_memory_is_not_checked_on_an_inference_run() -> None:
    # infer.py's eager run read "Each step allocates 1.3 MiB for backward": an inference call has no backward.
    from app.analysis.advisor import memory

    assert rules.is_inference_run(_evidence())
    with pytest.raises(MissingEvidence, match="an inference run keeps no activations"):
        memory.activation_memory(_evidence())
    advice = advise(_evidence())
    assert "activation_memory" not in advice.checked and "inference run" in advice.skipped["activation_memory"]
