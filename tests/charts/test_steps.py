"""Step-time chart: median lines (the headline rule of app.analysis.run.step_time), their labels and integer step ticks."""

from __future__ import annotations

import pandas as pd

from app.analysis.run.step_time import steady_step_time
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
    # two steps: no warm-up to drop (auto_warmup keeps at least 3 steps), so both count
    assert texts == ["rank 0 median 150.00 ms", "rank 1 median 160.00 ms"]


def test_many_ranks_draw_median_lines_without_labels() -> None:
    fig = make_step_time_figure(_metrics(6, [1, 2, 3]))
    assert len(fig.layout.shapes) == 6
    assert len(fig.layout.annotations) == 0


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
    assert fig_median(make_step_time_figure(m)) == f"median {headline.value_s * 1e3:.2f} ms"
    assert fig_median(make_step_time_figure(m, from_trace=True)) != f"median {headline.value_s * 1e3:.2f} ms"
    symbols = make_step_time_figure(m).data[0].marker.symbol
    assert symbols.count("circle-open") == 8  # the dropped steps are drawn hollow


def test_trace_steps_count_every_step_in_the_median() -> None:
    m = _metrics(1, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])
    assert fig_median(make_step_time_figure(m, from_trace=True)) == "median 650.00 ms"


def test_pooled_line_and_rank_filter() -> None:
    m = _metrics(2, list(range(12)))
    pooled = steady_step_time(m.to_dict(orient="records"))
    fig = make_step_time_figure(m, pooled=pooled)
    assert f"slowest rank per step {pooled.value_s * 1e3:.2f} ms" in [a.text for a in fig.layout.annotations][-1]
    only = make_step_time_figure(m, ranks=[1])
    assert [t.name for t in only.data] == ["rank 1"]


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
    # 6 steps: none dropped as warm-up (n // 10 = 0), the 3 profiled ones are
    assert fig_median(make_step_time_figure(m)) == "median 100.00 ms"


def test_step_time_axis_starts_at_zero() -> None:
    # 100-110 ms steps: from its own minimum the axis would make a 10 % jitter look like a cliff.
    fig = make_step_time_figure(_metrics(1, [1, 2, 3]))
    assert fig.layout.yaxis.rangemode == "tozero"
    assert fig.layout.yaxis.title.text == "step time (ms)"


def test_median_line_reads_every_mark_the_headline_reads() -> None:
    # The agent's "evaluation": true mark (and any later one) reaches steady_step_time as the tile's does.
    rows = [{"rank": 0, "step": s, "step_time_s": 0.1 + 0.001 * s} for s in range(30)]
    for s in (12, 13, 14, 15, 16, 17):
        rows[s].update(step_time_s=0.5, evaluation=True)
    m = pd.DataFrame(rows)
    expected = steady_step_time(m.to_dict(orient="records")).value_s
    assert fig_median(make_step_time_figure(m)) == f"median {expected * 1e3:.2f} ms"
