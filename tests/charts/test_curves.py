"""Metric curve figures: the final-value line (app.analysis.run.final_value) and its label."""
from __future__ import annotations

import pandas as pd

from app.analysis.run.final_value import final_value
from app.charts.curves import make_curve_figure


def _curve(n: int) -> pd.DataFrame:
    values = [1.0 / (1 + s) for s in range(n)]
    return pd.DataFrame({"rank": 0, "step": range(n), "x": range(n), "value": values, "smoothed": values})


def test_final_line_carries_the_one_label_and_value() -> None:
    curve = _curve(40)
    final = final_value([{"step": s, "loss": v} for s, v in zip(curve["step"], curve["value"])], "loss")
    fig = make_curve_figure(curve, "loss", final=final)
    (line,) = fig.layout.shapes
    assert line.y0 == final.value
    assert [a.text for a in fig.layout.annotations] == [f"final loss (median of last 4) {final.value:.4g}"]
    assert not make_curve_figure(curve, "loss").layout.shapes  # no final value given: no line
