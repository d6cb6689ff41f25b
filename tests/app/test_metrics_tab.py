"""The Metrics tab's defaults (issue 16): no smoothing for the learning rate and short series, the
raw series visible beneath a smoothed one, every series reachable by search, human names, ms."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from profiler_agent import runformat as rf
from profiler_agent.runformat import layout
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


def _y(trace: dict) -> list[float]:
    """A trace's y values (plotly sends numpy arrays as base64 typed arrays)."""
    y = trace["y"]
    if isinstance(y, dict) and "bdata" in y:
        return np.frombuffer(base64.b64decode(y["bdata"]), dtype=np.dtype(y["dtype"])).tolist()
    return list(y)


def _figure(at: AppTest, title: str) -> dict:
    for chart in charts(at):
        fig = json.loads(chart.proto.spec)
        if fig["layout"]["title"]["text"] == title:
            return fig
    raise AssertionError(f"no chart titled {title!r}")


def test_defaults_names_units_and_smoothing(metrics_run: Path) -> None:
    at = open_tab(metrics_run, "metrics")
    assert_ok(at)
    chosen = at.multiselect(key="t_metrics_keys").value
    assert chosen[:2] == ["loss", "val_loss"] and chosen[2] == USER_KEYS[0]  # the user's keys before the agent's
    loss = _figure(at, "training loss")
    assert len(loss["data"]) == 2  # 60 points: smoothed, with the raw series beneath it
    raw, smoothed = loss["data"]
    assert raw["name"].endswith("raw") and "0.45" in raw["line"]["color"] and smoothed["line"]["width"] == 2
    # 5 validation points: drawn as logged, its last value where it was logged (not an EMA's warm-up)
    val = _figure(at, "validation loss")
    assert len(val["data"]) == 1
    assert _y(val["data"][0])[-1] == pytest.approx(0.6 + 0.01 * 59)


def test_every_series_by_search_and_the_learning_rate_unsmoothed(metrics_run: Path) -> None:
    at = open_tab(metrics_run, "metrics")
    at.text_input(key="t_metrics_search").set_value("learning").run()
    assert_ok(at)
    lr = _figure(at, "learning rate (group 1)")
    assert len(lr["data"]) == 1  # the schedule, not a blur of it
    at.text_input(key="t_metrics_search").set_value("my_metric_7").run()
    assert_ok(at)
    assert [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in charts(at)] == ["my_metric_7"]
    at.text_input(key="t_metrics_search").set_value("data loading").run()
    assert_ok(at)
    data = _figure(at, "data loading time (ms)")
    assert _y(data["data"][0])[0] == pytest.approx(10.0)  # 0.01 s shown in ms
