"""The Optuna sweep test's pruning holds for every seed, not one lucky one; ``--enqueue``'s points.

The real sweep (test_sweep_runs.py) runs one seed; here the same study (the runner's own
``load_study``, in Optuna's in-memory storage) and the trial job's own val_loss curves are
replayed over 20 seeds in about a second (benchmarks/sweep_pruning.py).
"""
from __future__ import annotations

import pytest

from app.analysis.sweep_space import parse_param, parse_point
from app.errors import UsageError

pytest.importorskip("optuna")

from benchmarks.sweep_pruning import replay  # after the optional dependency's check


def test_the_enqueued_first_trial_makes_the_pruner_stop_every_other_trial_for_every_seed() -> None:
    for seed in range(20):
        assert replay(seed) == ["complete", "pruned at evaluation 0", "pruned at evaluation 0"], seed


def test_without_the_enqueued_trial_some_seeds_prune_nothing() -> None:
    # Why the test enqueues it: a first trial that diverges (seed 6 draws lr 1.27) lifts the median
    # of every evaluation so high that no later trial falls behind it.
    assert replay(6, enqueue=[]) == ["complete", "complete", "complete"]


def test_enqueue_points_are_checked_against_the_space() -> None:
    space = [parse_param("lr=loguniform:1e-3:3"), parse_param("batch_size=choice:16,64"), parse_param("n=int:1:4")]
    assert parse_point("lr=0.185,batch_size=16", space) == {"lr": 0.185, "batch_size": 16}
    assert parse_point("n=2", space) == {"n": 2}
    for spec, message in [("lr=5", "outside its range 0.001..3"), ("batch_size=32", "not one of its choices (16, 64)"),
                          ("momentum=0.9", "'momentum' is not a parameter"), ("lr=fast", "outside its range"),
                          (",", "expected NAME=V,NAME=V")]:
        with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
            parse_point(spec, space)
