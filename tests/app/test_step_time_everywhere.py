"""One headline step time: the Runs page, `torchscope ls` (table and --json) and the Run page's
Overview show the same number (app.analysis.run.step_time), on a run where the old definitions
(mean of all steps, median without the warm-up rule) would each give another one."""

from __future__ import annotations

import json

from app.analysis.run.step_time import steady_step_time
from app.cli import main
from app.presentation.units import format_seconds
from app.ui.store import clear_store_caches
from app.ui.tabs.overview import STEP_TIME_LABEL
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout
from tests.app.helpers import assert_clean, open_app, show_tab


def _tricky_run(make_run):  # noqa: ANN001, ANN202
    """40 steps on two ranks: slow warm-up, a profiled window, an evaluation step, a slow rank."""
    run_dir = make_run("tricky", steps=40, ranks=2, step_time_s=0.05)
    records = rf.read_jsonl(run_dir / layout.METRICS).records
    for r in records:
        if r["step"] in (1, 2, 3):
            r["step_time_s"] = 0.4
        if 8 <= r["step"] <= 10:
            r.update(profiled=True, step_time_s=0.15)
        if r["step"] == 19:
            r["step_time_s"] = 1.2
        if r["rank"] == 1 and r["step"] % 3 == 0:
            r["step_time_s"] = r["step_time_s"] * 1.3
    records.append({"step": 19, "rank": 0, "val_loss": 0.7})
    (run_dir / layout.METRICS).write_text("".join(json.dumps(r) + "\n" for r in records))
    return run_dir, records


def test_runs_page_ls_and_overview_show_one_step_time(monkeypatch, make_run, capsys):  # noqa: ANN001
    run_dir, records = _tricky_run(make_run)
    root = run_dir.parent
    headline = steady_step_time(records)
    assert headline.describe_dropped() == "4 warm-up, 3 profiled, 1 evaluation"
    expected = headline.value_s
    shown = format_seconds(expected)
    # the old numbers really differ, so this test can fail
    all_mean = sum(float(r["step_time_s"]) for r in records if "step_time_s" in r) / 80
    assert format_seconds(all_mean) != shown

    assert main(["ls", "--root", str(root), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["runs"][0]
    assert row["step_time_s"] == expected and row["step_time_steps"] == headline.n_used
    assert row["mean_step_time_s"] == headline.mean_s
    assert main(["ls", "--root", str(root)]) == 0
    out, err = capsys.readouterr()
    assert f" {shown} " in out.splitlines()[1] and "STEP TIME: median of the steady-state steps" in err

    clear_store_caches()
    at = open_app(monkeypatch, root)
    assert_clean(at)
    grid = at.dataframe[0].value.iloc[0]
    assert abs(grid["step_time_ms"] - expected * 1e3) < 1e-9
    assert abs(grid["samples_per_s"] - headline.samples_per_s) < 1e-9

    at = open_app(monkeypatch, root, run="tricky")
    assert_clean(at)
    overview = show_tab(at, "Overview")
    tiles = {m.label: m for m in overview.metric}
    assert tiles[STEP_TIME_LABEL].value == shown
    assert "4 warm-up, 3 profiled, 1 evaluation" in tiles[STEP_TIME_LABEL].help
    assert tiles["Samples/s"].value == f"{headline.samples_per_s:,.1f}"
