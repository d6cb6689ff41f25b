"""The Metrics tab's defaults (issue 16): no smoothing for the learning rate and short series, the
raw series visible beneath a smoothed one, every series reachable by search, human names, ms."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from profiler_agent import runformat as rf
from profiler_agent.runformat import layout
from tests.app.helpers import vega_rows
from tests.app.test_tabs_deep import assert_ok, charts, open_tab

USER_KEYS = [f"my_metric_{i}" for i in range(8)]


@pytest.fixture(scope="module")
def metrics_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir, _ = rf.create_run(tmp_path_factory.mktemp("metrics_store"), "metrics")
    with rf.JsonlWriter(run_dir / layout.METRICS) as w:
        for i in range(60):
            line = {"step": i, "time": i * 0.1, "rank": 0, "loss": 2.0 / (i + 1), "lr_1": 0.1 * 0.9 ** (i // 10),
                    "step_time_s": 0.05, "data_time_s": 0.01, **{k: float(i) for k in USER_KEYS}}
            w.write(line)
            if i % 12 == 11:  # five validation points
                w.write({"step": i, "time": i * 0.1, "rank": 0, "val_loss": 0.6 + 0.01 * i})
    rf.update_manifest(run_dir, status=rf.RunStatus.FINISHED)
    return run_dir


def _spec(at: AppTest, title: str) -> dict:
    """The spec of the chart titled ``title``, with its rows (sent apart, as Arrow) put back."""
    for chart in charts(at):
        spec = json.loads(chart.proto.spec)
        if spec["title"]["text"] == title:
            return {**spec, "data": {"values": vega_rows(chart)}}
    raise AssertionError(f"no chart titled {title!r}")


def _lines(spec: dict) -> list[tuple[str, float, list[float]]]:
    """The lines a curve's spec draws: (field, opacity, y values) of each line layer that keeps
    some rows (its filter: ``datum.s``, the rank is smoothed, or ``!datum.s``)."""
    out = []
    for layer in spec["layer"]:
        if layer["mark"]["type"] != "line":
            continue
        test = layer["transform"][0]["filter"]
        rows = [r for r in spec["data"]["values"] if r["s"] == (test == "datum.s")]
        if rows:
            field = layer["encoding"]["y"]["field"]
            out.append((field, layer["mark"].get("opacity", 1.0), [r[field] for r in rows]))
    return out


def test_defaults_names_units_and_smoothing(metrics_run: Path) -> None:
    at = open_tab(metrics_run, "metrics")
    assert_ok(at)
    chosen = at.multiselect(key="t_metrics_keys").value
    assert chosen[:2] == ["loss", "val_loss"] and chosen[2] == USER_KEYS[0]  # the user's keys before the agent's
    loss = _lines(_spec(at, "training loss"))
    assert [(f, o) for f, o, _ in loss] == [("value", 0.45), ("smoothed", 1.0)]  # raw beneath, still visible
    assert loss[0][2][0] == pytest.approx(2.0) and loss[0][2] != loss[1][2]  # 60 points: smoothed
    # 5 validation points: drawn as logged, its last value where it was logged (not an EMA's warm-up)
    (val,) = _lines(_spec(at, "validation loss"))
    assert val[0] == "value" and val[1] == 1.0
    assert val[2][-1] == pytest.approx(0.6 + 0.01 * 59)


def test_every_series_by_search_and_the_learning_rate_unsmoothed(metrics_run: Path) -> None:
    at = open_tab(metrics_run, "metrics")
    at.text_input(key="t_metrics_search").set_value("learning").run()
    assert_ok(at)
    (lr,) = _lines(_spec(at, "learning rate (group 1)"))
    assert lr[0] == "value" and lr[2][-1] == pytest.approx(0.1 * 0.9**5)  # the schedule, not a blur of it
    at.text_input(key="t_metrics_search").set_value("my_metric_7").run()
    assert_ok(at)
    assert [json.loads(c.proto.spec)["title"]["text"] for c in charts(at)] == ["my_metric_7"]
    at.text_input(key="t_metrics_search").set_value("data loading").run()
    assert_ok(at)
    (data,) = _lines(_spec(at, "data loading time (ms)"))
    assert data[2][0] == pytest.approx(10.0)  # 0.01 s shown in ms
