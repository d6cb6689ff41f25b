"""System sample charts."""

from __future__ import annotations

import pandas as pd

from app.charts.system import SeriesUnit, make_system_figure


def test_a_single_line_still_says_what_it_is() -> None:
    system = pd.DataFrame({"time": [1.0, 2.0], "rank": [0, 0], "system_memory_used_bytes": [2**30, 2**31]})
    fig = make_system_figure(system, ["system_memory_used_bytes"], unit=SeriesUnit.BYTES, title="Whole machine memory")
    assert fig.layout.showlegend is True
    assert fig.data[0].name == "system_memory_used_bytes"


def test_labels_name_the_lines_and_the_axis_starts_at_zero() -> None:
    system = pd.DataFrame({"time": [1.0, 2.0], "rank": [0, 0], "system_cpu_percent": [99.5, 100.0]})
    fig = make_system_figure(system, ["system_cpu_percent"], unit=SeriesUnit.PERCENT, title="CPU",
                             labels={"system_cpu_percent": "all CPUs"})
    assert fig.data[0].name == "all CPUs"
    assert fig.layout.yaxis.rangemode == "tozero"
