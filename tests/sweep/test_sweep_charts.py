"""The sweep view's figures: a log-uniform parameter on a log axis (pure: a trials table in, figures out)."""
from __future__ import annotations

import math

import pytest

from app.analysis.compare.sweep_trials import compute_sweep_trials
from app.charts.sweep import log_ticks, make_sweep_objective_figure, make_sweep_parallel_coordinates_figure

TRIALS = [
    {"number": 0, "state": "complete", "objective": 0.5, "params": {"lr": 0.002, "batch_size": 16}, "run_id": "r0"},
    {"number": 1, "state": "complete", "objective": 0.01, "params": {"lr": 0.3, "batch_size": 64}, "run_id": "r1"},
    {"number": 2, "state": "pruned", "objective": None, "params": {"lr": 2.5, "batch_size": 16}, "run_id": "r2"},
    {"number": 3, "state": "complete", "objective": 0.2, "params": {"lr": 0.04, "batch_size": 16}, "run_id": "r3"},
]


def _trials(log_ranges: dict[str, tuple[float, float]] | None = None):  # noqa: ANN202 - SweepTrials
    return compute_sweep_trials(TRIALS, ["lr", "batch_size"], log_ranges=log_ranges)


def test_log_ticks_label_the_values_at_their_log10_positions() -> None:
    vals, text = log_ticks(1e-3, 3.0)
    assert text == ["0.001", "0.01", "0.1", "1"] and vals == pytest.approx([-3, -2, -1, 0])
    vals, text = log_ticks(0.01, 0.5)  # under three decades: 1, 2, 5 of each
    assert text == ["0.01", "0.02", "0.05", "0.1", "0.2", "0.5"]
    assert [10 ** v for v in vals] == pytest.approx([0.01, 0.02, 0.05, 0.1, 0.2, 0.5])
    assert log_ticks(0.3, 0.31)[1] == ["0.3", "0.31"]  # no power of ten inside: the ends
    with pytest.raises(ValueError, match="0 < low < high"):
        log_ticks(0.0, 1.0)


def test_only_a_positive_numeric_log_uniform_parameter_gets_a_log_axis() -> None:
    assert _trials({"lr": (1e-3, 3.0)}).log_params == {"param.lr": (1e-3, 3.0)}
    assert _trials().log_params == {}
    bad = [{**t, "params": {**t["params"], "lr": 0.0}} if t["number"] == 0 else t for t in TRIALS]
    assert compute_sweep_trials(bad, ["lr"], log_ranges={"lr": (1e-3, 3.0)}).log_params == {}


def test_parallel_coordinates_draw_a_log_uniform_parameter_as_log10_with_real_value_labels() -> None:
    trials = _trials({"lr": (1e-3, 3.0)})
    fig = make_sweep_parallel_coordinates_figure(trials.table, trials.numeric_params, "objective",
                                                 log_params=trials.log_params, objective_label="val_loss")
    lr, batch, objective = fig.data[0].dimensions
    assert lr.label == "lr (log)" and batch.label == "batch_size" and objective.label == "val_loss"
    # The pruned trial (no objective) has no line; the others sit at log10 of their learning rate.
    assert list(lr.values) == pytest.approx([math.log10(0.002), math.log10(0.3), math.log10(0.04)])
    assert list(lr.range) == pytest.approx([-3, math.log10(3.0)])  # the searched range, not the trials'
    assert list(lr.ticktext) == ["0.001", "0.01", "0.1", "1"] and list(lr.tickvals) == pytest.approx([-3, -2, -1, 0])
    assert list(batch.values) == [16, 64, 16] and batch.tickvals is None  # a linear axis stays linear
    assert list(objective.values) == [0.5, 0.01, 0.2]


def test_objective_against_a_log_uniform_parameter_has_a_log_x_axis() -> None:
    trials = _trials({"lr": (1e-3, 3.0)})
    fig = make_sweep_objective_figure(trials.table, "param.lr", "objective", log_range=trials.log_params["param.lr"],
                                      objective_label="val_loss")
    assert fig.layout.xaxis.type == "log" and fig.layout.xaxis.title.text == "lr (log)"
    assert list(fig.layout.xaxis.range) == pytest.approx([-3, math.log10(3.0)])  # plotly: log10 of the ends
    assert list(fig.layout.xaxis.ticktext) == ["0.001", "0.01", "0.1", "1"]
    assert list(fig.data[0].x) == [0.002, 0.3, 2.5, 0.04]  # the values themselves; the axis does the log
    assert list(fig.data[0].customdata) == ["r0", "r1", "r2", "r3"]
    linear = make_sweep_objective_figure(trials.table, "param.batch_size", "objective")
    assert linear.layout.xaxis.type is None and linear.layout.xaxis.title.text == "batch_size"
