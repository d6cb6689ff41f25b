"""One number for one quantity: the recorder's summary, `torchscope ls` (table and --json),
`torchscope analyze --json`, the Run page's Overview (tiles and the step-time chart's median line) and
Compare show the same final loss (app.analysis.run.final_value) and step time (app.analysis.run.step_time), on a
two-rank run with a noisy loss where the last value, the mean and the old chart rule all differ."""
from __future__ import annotations

import json

import numpy as np
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from app.analysis.run.final_value import final_value
from app.analysis.run.step_time import steady_step_time
from app.cli import main
from app.presentation.units import format_seconds
from app.ui.store import clear_store_caches
from app.ui.tabs.overview import STEP_TIME_LABEL
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout
from tests.app.helpers import APP, assert_clean, chart_labels, open_app, show_tab, vega_specs


def _noisy_run(make_run):  # noqa: ANN001, ANN202
    run_dir = make_run("noisy", steps=40, ranks=2, step_time_s=0.05)
    rng = np.random.default_rng(7)
    records = rf.read_jsonl(run_dir / layout.METRICS).records
    for r in records:
        r["loss"] = float(2.0 / (1 + r["step"]) + 0.3 * r["rank"] + rng.normal(0, 0.05))
        if r["step"] in (1, 2, 3):
            r["step_time_s"] = 0.4
        if 8 <= r["step"] <= 10:
            r.update(profiled=True, step_time_s=0.15)
        if r["step"] == 19:
            r["step_time_s"] = 1.2
    rank0_last = max((r for r in records if r["rank"] == 0), key=lambda r: r["step"])
    rank0_last["loss"] = 0.9  # one noisy last batch
    records.append({"step": 19, "rank": 0, "val_loss": 0.7})  # an evaluation in step 19
    (run_dir / layout.METRICS).write_text("".join(json.dumps(r) + "\n" for r in records))
    return run_dir, records


def _chart_median(at) -> str:  # noqa: ANN001
    """The text of the Overview step-time chart's median label."""
    for spec in vega_specs(at):
        for text in chart_labels(spec):
            if text.startswith("median"):
                return text
    raise AssertionError("no median line in any chart")


def test_every_view_shows_one_final_loss_and_one_step_time(monkeypatch, make_run, capsys):  # noqa: ANN001
    from sample_models import record

    run_dir, records = _noisy_run(make_run)
    root = run_dir.parent
    loss = final_value(records, "loss")
    step = steady_step_time(records)
    assert loss is not None and step.value_s is not None
    assert loss.window == 4 and loss.label == "final loss (median of last 4)"
    # the other candidate numbers really differ, so this test can fail
    assert f"{loss.value:.4g}" != "0.9" and abs(loss.value - 0.9) > 0.5

    summary = record.summarise_recorded_run(run_dir)
    assert summary.final_loss == loss and summary.step_time_s == step.value_s
    assert f"final loss (median of last 4) {loss.value:.4g}" in record.format_summary("noisy", summary)

    assert main(["ls", "--root", str(root), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["runs"][0]
    assert row["final_loss"] == loss.value and row["step_time_s"] == step.value_s
    assert main(["ls", "--root", str(root)]) == 0
    out, err = capsys.readouterr()
    assert f" {loss.value:.4g} " in out.splitlines()[1] and "FINAL LOSS: median of the last 10 %" in err

    assert main(["analyze", str(run_dir), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["run"]
    assert doc["final"]["loss"]["value"] == loss.value and doc["final"]["loss"]["label"] == loss.label
    assert doc["step_time_s"] == step.value_s and doc["step_time_steps"] == step.n_used
    assert main(["analyze", str(run_dir)]) == 0
    assert f"final loss (median of last 4): {loss.value:.4g}" in capsys.readouterr().out

    clear_store_caches()
    at = open_app(monkeypatch, root)  # the Runs page
    assert_clean(at)
    grid = at.dataframe[0].value.iloc[0]
    assert grid["final_loss"] == loss.value and abs(grid["step_time_ms"] - step.value_s * 1e3) < 1e-9

    at = open_app(monkeypatch, root, run="noisy")
    assert_clean(at)
    overview = show_tab(at, "Overview")
    tiles = {m.label: m.value for m in overview.metric}
    assert tiles["Final loss (median of last 4)"] == f"{loss.value:.4g}"
    assert tiles[STEP_TIME_LABEL] == format_seconds(step.value_s)
    # two ranks: each rank's dashed median (its own steady-state steps) and the pooled line of the tile
    rank0 = steady_step_time(records, rank=0)
    assert _chart_median_texts(at)[0] == f"rank 0 median {rank0.value_s * 1e3:.2f} ms"
    assert f"slowest rank per step {step.value_s * 1e3:.2f} ms" in _chart_median_texts(at)[-1]

    metrics_tab = show_tab(at, "Metrics")  # the loss curve's final line (rank 0)
    # the chart names the series "training loss"; its final value has the tile's name and value
    assert f"final loss (median of last 4) {loss.value:.4g}" in [t for spec in vega_specs(metrics_tab)
                                                                 for t in chart_labels(spec)]

    from app.analysis.compare.comparison import CompareOptions, diff_sides
    from app.workspace.sides import load_side

    side = load_side(run_dir, with_traces=False)
    cmp = diff_sides(side, side, CompareOptions(resamples=199))
    metrics = cmp.metrics.set_index("metric")
    assert metrics.loc["loss", "baseline_final"] == pytest.approx(loss.value, abs=1e-15)
    assert cmp.step_time.baseline == pytest.approx(step.value_s, abs=1e-15)

    st.cache_resource.clear()  # the Compare page: its Final loss and Step time tiles
    monkeypatch.setenv(layout.ROOT_ENV, str(root))
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["runs"] = f"{run_dir.name},{run_dir.name}"
    at.switch_page("app_pages/compare.py")
    at.run()
    assert not at.exception
    tiles = {m.label: m.value for m in at.metric}
    assert tiles["Final loss (median of last 4)"] == f"{loss.value:,.4g}"
    assert tiles["Step time (median, steady state)"] == f"{step.value_s * 1e3:.2f} ms"


def _chart_median_texts(at) -> list[str]:  # noqa: ANN001
    for spec in vega_specs(at):
        texts = chart_labels(spec)
        if any("median" in t for t in texts):
            return texts
    raise AssertionError("no median line in any chart")


def test_single_rank_chart_median_is_the_tile(monkeypatch, make_run):  # noqa: ANN001
    run_dir = make_run("one", steps=40, step_time_s=0.05)
    records = rf.read_jsonl(run_dir / layout.METRICS).records
    for r in records:
        if 8 <= r["step"] <= 10:
            r.update(profiled=True, step_time_s=0.2)
    (run_dir / layout.METRICS).write_text("".join(json.dumps(r) + "\n" for r in records))
    step = steady_step_time(records)
    clear_store_caches()
    at = open_app(monkeypatch, run_dir.parent, run="one")
    assert_clean(at)
    assert _chart_median(at) == f"median {step.value_s * 1e3:.2f} ms"
    tiles = {m.label: m.value for m in show_tab(at, "Overview").metric}
    assert tiles[STEP_TIME_LABEL] == format_seconds(step.value_s)
