"""Step-time chart (a Vega-Lite spec): median lines (the headline rule of app.analysis.run.step_time), their labels,
hollow dropped steps and integer step ticks; the breakdown chart's bars."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from app.analysis.run.step_time import steady_step_time
from app.charts.steps import DEVICE_CATEGORIES, breakdown_chart, step_time_chart


def _metrics(ranks: int, steps: list[int]) -> pd.DataFrame:
    rows = [
        {"rank": r, "step": s, "step_time_s": 0.1 * (i + 1) + 0.01 * r}
        for r in range(ranks)
        for i, s in enumerate(steps)
    ]
    return pd.DataFrame(rows)


def _layer(spec: dict[str, Any], mark: str, flt: str | None = None) -> dict[str, Any]:
    for layer in spec["layer"]:
        if layer["mark"]["type"] == mark and (flt is None or layer.get("transform") == [{"filter": flt}]):
            return layer
    raise AssertionError(f"no {mark} layer")


def labels(spec: dict[str, Any]) -> list[str]:
    """The texts written on the chart (the median lines' labels)."""
    return [r["label"] for layer in spec["layer"] if layer["mark"]["type"] == "text" for r in layer["data"]["values"]]


def rules(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for layer in spec["layer"] if layer["mark"]["type"] == "rule" for r in layer["data"]["values"]]


def test_several_ranks_label_each_median() -> None:
    fig = step_time_chart(_metrics(2, [551, 552]))
    texts = labels(fig)
    json.dumps(fig)  # all of it goes to the browser as JSON
    # two steps: no warm-up to drop (auto_warmup keeps at least 3 steps), so both count
    assert texts == ["rank 0 median 150.00 ms", "rank 1 median 160.00 ms"]


def test_many_ranks_draw_median_lines_without_labels() -> None:
    fig = step_time_chart(_metrics(6, [1, 2, 3]))
    assert len(rules(fig)) == 6
    assert labels(fig) == []


def test_median_line_is_the_headline_step_time() -> None:
    # 40 steps: 4 warm-up steps dropped (min(5, n // 10)), a profiled window, an evaluation step.
    rows = [{"rank": 0, "step": s, "step_time_s": 0.4 if s < 4 else 0.1 + 0.001 * (s % 7)} for s in range(40)]
    for r in rows:
        if 8 <= r["step"] <= 10:
            r.update(profiled=True, step_time_s=0.3)
    rows[19]["step_time_s"] = 0.9
    rows.append({"rank": 0, "step": 19, "val_loss": 0.5})  # the evaluation ran in step 19
    m = pd.DataFrame(rows)
    headline = steady_step_time(rows)
    assert headline.describe_dropped() == "4 warm-up, 3 profiled, 1 evaluation"
    assert fig_median(step_time_chart(m)) == f"median {headline.value_s * 1e3:.2f} ms"
    assert fig_median(step_time_chart(m, from_trace=True)) != f"median {headline.value_s * 1e3:.2f} ms"
    hollow = _layer(step_time_chart(m), "point", "!datum.kept")
    assert hollow["mark"]["filled"] is False
    points = hollow["data"]["values"]
    assert sum(not p["kept"] for p in points) == 8  # the dropped steps are drawn hollow, with the reason
    assert {p["why"] for p in points if not p["kept"]} == {"warm-up", "profiled", "evaluation"}


def test_trace_steps_count_every_step_in_the_median() -> None:
    m = _metrics(1, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])
    assert fig_median(step_time_chart(m, from_trace=True)) == "median 650.00 ms"


def test_pooled_line_and_rank_filter() -> None:
    m = _metrics(2, list(range(12)))
    pooled = steady_step_time(m.to_dict(orient="records"))
    fig = step_time_chart(m, pooled=pooled)
    assert f"slowest rank per step {pooled.value_s * 1e3:.2f} ms" in labels(fig)[-1]
    assert rules(fig)[-1]["pooled"] is True
    only = step_time_chart(m, ranks=[1])
    assert {p["rank"] for p in _layer(only, "line")["data"]["values"]} == {"rank 1"}


def test_few_steps_get_integer_ticks() -> None:
    axis = _layer(step_time_chart(_metrics(1, [551, 552])), "line")["encoding"]["x"]["axis"]
    assert axis["tickMinStep"] == 1 and axis["format"] == "d"


def fig_median(fig: dict[str, Any]) -> str:
    return labels(fig)[0]


def test_median_leaves_out_steps_the_profiler_slowed() -> None:
    m = pd.DataFrame(
        {
            "rank": 0,
            "step": [0, 1, 2, 3, 4, 5],
            "step_time_s": [1.0, 0.1, 0.5, 0.5, 0.5, 0.1],
            "profiled": [None, None, True, True, True, None],
        }
    )
    # 6 steps: none dropped as warm-up (n // 10 = 0), the 3 profiled ones are
    assert fig_median(step_time_chart(m)) == "median 100.00 ms"


def test_step_time_axis_starts_at_zero() -> None:
    # 100-110 ms steps: from its own minimum the axis would make a 10 % jitter look like a cliff.
    y = _layer(step_time_chart(_metrics(1, [1, 2, 3])), "line")["encoding"]["y"]
    assert y["scale"] == {"zero": True}
    assert y["title"] == "step time (ms)"


def test_median_line_reads_every_mark_the_headline_reads() -> None:
    # The agent's "evaluation": true mark (and any later one) reaches steady_step_time as the tile's does.
    rows = [{"rank": 0, "step": s, "step_time_s": 0.1 + 0.001 * s} for s in range(30)]
    for s in (12, 13, 14, 15, 16, 17):
        rows[s].update(step_time_s=0.5, evaluation=True)
    m = pd.DataFrame(rows)
    expected = steady_step_time(m.to_dict(orient="records")).value_s
    assert fig_median(step_time_chart(m)) == f"median {expected * 1e3:.2f} ms"


def test_breakdown_bars_give_each_part_and_its_share() -> None:
    steps = pd.DataFrame({"rank": [0, 0], "step": [3, 4], "duration_us": [10_000.0, 20_000.0],
                          "cpu_exec_us": [6_000.0, 5_000.0], "dataloader_us": [1_000.0, 0.0],
                          "kernel_us": [0.0, 0.0], "other_us": [3_000.0, 15_000.0]})
    layer = _layer(breakdown_chart(steps, DEVICE_CATEGORIES), "bar")
    rows = {(r["step"], r["part"]): (r["ms"], r["share"]) for r in layer["data"]["values"]}
    assert rows[("3", "CPU exec")] == (6.0, 60.0) and rows[("4", "Other")] == (15.0, 75.0)
    assert "Kernel" not in layer["encoding"]["color"]["scale"]["domain"]  # no device activity: no entry
    assert layer["encoding"]["x"]["sort"] == ["3", "4"]
