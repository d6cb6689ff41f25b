"""System sample charts (Vega-Lite specs): the lines' names, units, legend and hover."""

from __future__ import annotations

import pandas as pd

from app.charts.system import SeriesUnit, system_chart


def _lines(spec: dict) -> dict[str, list[tuple[float, float]]]:
    """(time, value) of each line the spec draws, by its name."""
    out: dict[str, list[tuple[float, float]]] = {}
    for r in spec["data"]["values"]:
        out.setdefault(r["series"], []).append((r["time_s"], r["value"]))
    return out


def test_a_single_line_still_says_what_it_is() -> None:
    system = pd.DataFrame({"time": [1.0, 2.0], "rank": [0, 0], "system_memory_used_bytes": [2**30, 2**31]})
    spec = system_chart(system, ["system_memory_used_bytes"], unit=SeriesUnit.BYTES, title="Whole machine memory")
    line = spec["layer"][0]
    assert line["mark"]["type"] == "line"
    assert line["encoding"]["color"]["legend"] is not None  # one line, still a legend
    assert line["encoding"]["color"]["scale"]["domain"] == ["system_memory_used_bytes"]
    # bytes are drawn in MiB, and the axis and the hover say so
    assert _lines(spec) == {"system_memory_used_bytes": [(1.0, 1024.0), (2.0, 2048.0)]}
    assert line["encoding"]["y"]["title"] == "MiB"
    tooltip = spec["layer"][1]["encoding"]["tooltip"]
    assert [t["title"] for t in tooltip] == ["line", "time since start (s)", "MiB"]


def test_labels_name_the_lines_and_the_axis_starts_at_zero() -> None:
    system = pd.DataFrame({"time": [1.0, 2.0], "rank": [0, 0], "system_cpu_percent": [99.5, 100.0]})
    spec = system_chart(system, ["system_cpu_percent"], unit=SeriesUnit.PERCENT, title="CPU",
                        labels={"system_cpu_percent": "all CPUs"})
    assert _lines(spec) == {"all CPUs": [(1.0, 99.5), (2.0, 100.0)]}
    y = spec["layer"][0]["encoding"]["y"]
    assert y["scale"]["zero"] is True and y["title"] == "%"
    assert spec["title"]["text"] == "CPU"


def test_one_line_per_rank_and_column_missing_samples_left_out() -> None:
    system = pd.DataFrame({"time": [1.0, 2.0, 1.5, 2.5], "rank": [0, 0, 1, 1],
                           "cpu_percent": [10.0, None, 30.0, 40.0], "children_cpu_percent": [None, None, 5.0, 6.0]})
    spec = system_chart(system, ["cpu_percent", "children_cpu_percent", "not_sampled_percent"],
                        unit=SeriesUnit.PERCENT, title="CPU", labels={"cpu_percent": "training process"})
    assert _lines(spec) == {"training process · rank 0": [(1.0, 10.0)],
                            "training process · rank 1": [(1.5, 30.0), (2.5, 40.0)],
                            "children_cpu_percent · rank 1": [(1.5, 5.0), (2.5, 6.0)]}
    color = spec["layer"][0]["encoding"]["color"]
    assert color["scale"]["domain"] == ["training process · rank 0", "training process · rank 1",
                                        "children_cpu_percent · rank 1"]
    assert len(set(color["scale"]["range"])) == 3  # a colour each
