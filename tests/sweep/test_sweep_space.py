"""The sweep's space syntax, command filling and objective (pure, no runs)."""
from __future__ import annotations

import math

import pytest

from app.analysis.compare.sweep_trials import compute_sweep_trials
from app.analysis.sweep_space import (
    TIME_PER_SAMPLE,
    check_placeholders,
    compute_objective,
    expand_grid,
    fill_command,
    objective_series,
    parse_grid,
    parse_param,
    sample_random,
)
from app.errors import UsageError
from profiler_agent import runformat as rf


def test_grid_is_every_combination_in_order() -> None:
    grid = expand_grid([parse_grid("lr=0.1,0.01"), parse_grid("batch_size=32,64")])
    assert grid == [{"lr": 0.1, "batch_size": 32}, {"lr": 0.1, "batch_size": 64},
                    {"lr": 0.01, "batch_size": 32}, {"lr": 0.01, "batch_size": 64}]
    assert isinstance(grid[0]["batch_size"], int)


@pytest.mark.parametrize("spec, message", [
    ("lr", "NAME=VALUES"), ("lr=", "NAME=VALUES"), ("lr=gauss:0:1", "unknown kind"),
    ("lr=loguniform:0:1", "LOW > 0"), ("lr=uniform:2:1", "LOW < HIGH"), ("n=int:1.5:4", "whole"),
    ("lr=uniform:a:b", "LOW < HIGH"), ("x y=choice:1", "letters"),
])
def test_bad_param_specs_name_the_problem(spec: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_param(spec)


def test_random_points_are_in_range_and_the_same_on_resume() -> None:
    params = [parse_param("lr=loguniform:1e-4:1e-1"), parse_param("n=int:1:3"), parse_param("opt=choice:sgd,adam")]
    points = sample_random(params, 20, seed=7)
    assert points == sample_random(params, 20, seed=7)
    assert points[:5] == sample_random(params, 5, seed=7)  # trial i depends on i only
    assert points != sample_random(params, 20, seed=8)
    assert all(1e-4 <= p["lr"] <= 1e-1 and p["n"] in (1, 2, 3) and p["opt"] in ("sgd", "adam") for p in points)
    logs = [math.log10(float(p["lr"])) for p in points]
    assert min(logs) < -3 and max(logs) > -2  # log-uniform: spread over the decades


def test_fill_command_and_placeholder_checks() -> None:
    template = ["python", "train.py", "--lr", "{lr}", "--name=run-{lr}-{batch_size}", '{"json": 1}']
    assert fill_command(template, {"lr": 0.1, "batch_size": 32})[3:5] == ["0.1", "--name=run-0.1-32"]
    with pytest.raises(UsageError, match=r"placeholder \{batch_size\} has no"):
        fill_command(template, {"lr": 0.1})
    with pytest.raises(UsageError, match="'seed' is not used"):
        check_placeholders(template, ["lr", "batch_size", "seed"])


def test_objective_best_last_median_and_time_per_sample() -> None:
    records = [{"step": 0, "val_loss": 3.0}, {"step": 1, "loss": 9.0}, {"step": 2, "val_loss": 1.0},
               {"step": 3, "val_loss": 2.0, "rank": 1}, {"step": 4, "val_loss": float("nan")},
               {"step": 5, "val_loss": 2.0}]
    assert objective_series(records, "val_loss") == [(0, 3.0), (2, 1.0), (5, 2.0)]
    assert compute_objective(records, "val_loss") == 1.0
    assert compute_objective(records, "val_loss", direction="max") == 3.0
    assert compute_objective(records, "val_loss", reduce="last") == 2.0
    assert compute_objective(records, "val_loss", reduce="median") == 2.0
    assert compute_objective(records, "accuracy") is None
    assert compute_objective(records, "val_loss", upto=1) == 3.0  # a pruned trial: what the pruner saw
    steps = [{"step": i, "step_time_s": 0.5, "samples": 50} for i in range(3)]
    assert compute_objective(steps, TIME_PER_SAMPLE) == pytest.approx(0.01)


def test_trials_table_best_ignores_pruned_and_interrupted() -> None:
    trials = [{"number": 0, "state": "complete", "objective": 0.5, "params": {"lr": 0.1, "opt": "sgd"}, "run_id": "a"},
              {"number": 1, "state": "pruned", "objective": 0.1, "params": {"lr": 0.2, "opt": "adam"}, "run_id": "b"},
              {"number": 2, "state": "interrupted", "params": {"lr": 0.3, "opt": "sgd"}, "run_id": "c"},
              {"number": 3, "state": "complete", "objective": 0.4, "params": {"lr": 0.3, "opt": "sgd"}, "run_id": "d"}]
    out = compute_sweep_trials(trials, ["lr", "opt"], names={"d": "sweep-t3"})
    assert list(out.table["trial"]) == [0, 1, 3]
    assert out.best is not None and out.best["trial"] == 3 and out.best["name"] == "sweep-t3"
    assert out.numeric_params == ["param.lr"]  # opt is categorical
    assert out.counts == {"complete": 2, "pruned": 1}
    assert compute_sweep_trials(trials, ["lr"], direction="max").best["trial"] == 0  # type: ignore[index]


def test_pruned_is_a_status_of_the_run_format(tmp_path) -> None:  # noqa: ANN001
    run_dir, _ = rf.create_run(tmp_path, "t")
    m = rf.update_manifest(run_dir, status=rf.RunStatus.PRUNED)
    again = rf.read_manifest(run_dir)
    assert again.status is rf.RunStatus.PRUNED and rf.effective_status(again) is rf.RunStatus.PRUNED
    assert rf.manifest_to_dict(m)["status"] == "pruned"


def test_pruned_runs_are_listed_and_filtered_like_any_status(tmp_path) -> None:  # noqa: ANN001
    from app.data.runs import STATUS_MARKERS, filter_store
    from app.workspace.catalog import load_catalog
    from tests.conftest import write_run

    write_run(tmp_path, "kept", steps=3)
    write_run(tmp_path, "stopped", steps=3, status=rf.RunStatus.PRUNED)
    table = load_catalog(tmp_path).table
    assert sorted(table["status"]) == ["finished", "pruned"]  # the Runs page's status filter offers both
    assert list(filter_store(table, "", ["pruned"])["name"]) == ["stopped"]
    assert STATUS_MARKERS["pruned"] == "✂ "
