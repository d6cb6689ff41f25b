"""Step-time chart: median lines, their labels and integer step ticks."""

from __future__ import annotations

import pandas as pd

from app.charts.steps import make_step_time_figure


def _metrics(ranks: int, steps: list[int]) -> pd.DataFrame:
    rows = [
        {"rank": r, "step": s, "step_time_s": 0.1 * (i + 1) + 0.01 * r}
        for r in range(ranks)
        for i, s in enumerate(steps)
    ]
    return pd.DataFrame(rows)


def test_several_ranks_never_show_plotly_placeholder_text() -> None:
    fig = make_step_time_figure(_metrics(2, [551, 552]))
    texts = [a.text for a in fig.layout.annotations]
    assert "new text" not in texts and None not in texts
    assert texts == ["rank 0 median 200.00 ms", "rank 1 median 210.00 ms"]


def test_many_ranks_draw_median_lines_without_labels() -> None:
    fig = make_step_time_figure(_metrics(6, [1, 2, 3]))
    assert len(fig.layout.shapes) == 6
    assert len(fig.layout.annotations) == 0


def test_trace_steps_count_every_step_in_the_median() -> None:
    m = _metrics(1, [551, 552])  # 100 ms, 200 ms
    assert fig_median(make_step_time_figure(m)) == "median 200.00 ms"
    assert fig_median(make_step_time_figure(m, skip_first=False)) == "median 150.00 ms"


def test_few_steps_get_integer_ticks() -> None:
    fig = make_step_time_figure(_metrics(1, [551, 552]))
    assert fig.layout.xaxis.dtick == 1 and fig.layout.xaxis.tickformat == "d"


def fig_median(fig) -> str:  # noqa: ANN001
    return fig.layout.annotations[0].text


def test_median_leaves_out_steps_the_profiler_slowed() -> None:
    m = pd.DataFrame(
        {
            "rank": 0,
            "step": [0, 1, 2, 3, 4, 5],
            "step_time_s": [1.0, 0.1, 0.5, 0.5, 0.5, 0.1],
            "profiled": [None, None, True, True, True, None],
        }
    )
    assert fig_median(make_step_time_figure(m)) == "median 100.00 ms"


def test_step_time_axis_starts_at_zero() -> None:
    # 100-110 ms steps: from its own minimum the axis would make a 10 % jitter look like a cliff.
    fig = make_step_time_figure(_metrics(1, [1, 2, 3]))
    assert fig.layout.yaxis.rangemode == "tozero"
    assert fig.layout.yaxis.title.text == "step time (ms)"
