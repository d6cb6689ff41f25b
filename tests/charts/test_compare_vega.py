"""Compare's first-tab charts as Vega-Lite specs: the same steps, medians and waterfall as the report's plotly figures."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from app.charts.compare import make_step_time_figure, make_waterfall_figure
from app.charts.compare_vega import step_time_chart, waterfall_chart


def _steps(times: list[float], dropped: dict[int, str]) -> pd.DataFrame:
    return pd.DataFrame({"step": range(len(times)), "step_time_s": times,
                         "kept": [i not in dropped for i in range(len(times))],
                         "reason": [dropped.get(i, "") for i in range(len(times))]})


def test_step_times_keep_every_step_and_the_plotly_medians() -> None:
    tables = {"baseline": _steps([0.5, 0.10, 0.11, 0.12], {0: "warm-up"}),
              "candidate": _steps([0.4, 0.05, 0.06, 0.30], {0: "warm-up", 3: "profiled"})}
    spec = step_time_chart(tables)
    json.dumps(spec)
    points = spec["layer"][0]["data"]["values"]
    hollow = [(p["side"], p["step"], p["why"]) for p in points if not p["kept"]]
    assert hollow == [("baseline", 0, "warm-up"), ("candidate", 0, "warm-up"), ("candidate", 3, "profiled")]
    assert len(points) == 8
    medians = {m["side"]: m["ms"] for m in spec["layer"][2]["data"]["values"]}
    plotly = sorted(s.y0 for s in make_step_time_figure(tables).layout.shapes)
    assert sorted(medians.values()) == pytest.approx(plotly, abs=1e-3)
    assert medians["baseline"] == pytest.approx(np.median([100, 110, 120]))


def test_waterfall_walks_from_baseline_to_candidate() -> None:
    breakdown = pd.DataFrame({"view": "device", "category": ["step", "kernel", "cpu_exec", "memcpy"],
                              "baseline_us": [10_000.0, 4_000.0, 5_000.0, 1_000.0],
                              "candidate_us": [7_000.0, 2_000.0, 5_500.0, 1_000.0],
                              "delta_us": [-3_000.0, -2_000.0, 500.0, 0.0]})
    bars = waterfall_chart(breakdown, steps=(3, 1))["layer"][0]["data"]["values"]
    assert [b["bar"] for b in bars] == ["baseline: mean profiled step (3 steps)", "kernel", "cpu_exec",
                                        "candidate: mean profiled step (1 step)"]  # a zero change has no bar
    assert [(b["start"], b["end"], b["kind"], b["text"]) for b in bars] == [
        (0.0, 10.0, "total", "10.00 ms"), (10.0, 8.0, "down", "-2.00"), (8.0, 8.5, "up", "+0.50"),
        (0.0, 7.0, "total", "7.00 ms")]
    assert list(make_waterfall_figure(breakdown, steps=(3, 1)).data[0].x) == [b["bar"] for b in bars]
