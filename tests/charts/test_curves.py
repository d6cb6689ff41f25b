"""Metric curve specs (Vega-Lite): the raw series beneath the smoothed one, the final-value line
(app.analysis.run.final_value) and its label, the flat axis, the band over ranks."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from app.analysis.curves.smoothing import XAxis, compute_curve, compute_rank_band
from app.analysis.run.final_value import final_value
from app.charts.curves import curve_chart, rank_band_chart
from tests.app.helpers import chart_labels


def _curve(n: int) -> pd.DataFrame:
    values = [1.0 / (1 + s) for s in range(n)]
    return pd.DataFrame({"rank": 0, "step": range(n), "x": range(n), "value": values, "smoothed": values})


def _metrics(n: int = 200) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame({"step": np.tile(np.arange(n), 2), "rank": np.repeat([0, 1], n),
                         "time": np.tile(np.arange(n) * 0.1, 2), "loss": 1 + rng.normal(0, 0.2, 2 * n), "lr": 0.05})


def _drawn(spec: dict) -> list[tuple[str, str, float]]:
    """(rank, y field, opacity) of every line drawn: a line layer's filter picks smoothed ranks
    (``datum.s``) or the others."""
    rows = spec["data"]["values"]
    out = []
    for layer in spec["layer"]:
        if layer["mark"]["type"] == "line":
            smoothed = layer["transform"][0]["filter"] == "datum.s"
            for rank in dict.fromkeys(r["rank"] for r in rows if r["s"] == smoothed):
                out.append((rank, layer["encoding"]["y"]["field"], layer["mark"].get("opacity", 1.0)))
    return sorted(out)


def test_final_line_carries_the_one_label_and_value() -> None:
    curve = _curve(40)
    final = final_value([{"step": s, "loss": v} for s, v in zip(curve["step"], curve["value"])], "loss")
    spec = curve_chart(curve, "loss", final=final)
    (rule,) = [layer for layer in spec["layer"] if layer["mark"]["type"] == "rule"]
    assert rule["data"]["values"][0]["final"] == float(f"{final.value:.7g}")
    assert chart_labels(spec) == [f"final loss (median of last 4) {final.value:.4g}"]
    assert not [layer for layer in curve_chart(curve, "loss")["layer"] if layer["mark"]["type"] == "rule"]


def test_raw_beneath_smoothed_every_point_and_flat_axis() -> None:
    df = _metrics()
    curve = compute_curve(df, "loss")
    spec = curve_chart(curve, "training loss")
    assert _drawn(spec) == [("rank 0", "smoothed", 1.0), ("rank 0", "value", 0.45),
                            ("rank 1", "smoothed", 1.0), ("rank 1", "value", 0.45)]
    rows = spec["data"]["values"]
    assert len(rows) == len(curve) and [r["value"] for r in rows] == [float(f"{v:.7g}") for v in curve["value"]]
    assert spec["layer"][0]["encoding"]["color"]["legend"] is not None  # two ranks: a legend
    tooltip = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "point")["encoding"]["tooltip"]
    assert [t["title"] for t in tooltip] == ["rank", "step", "training loss (raw)", "training loss (smoothed)"]
    lr = curve_chart(compute_curve(df, "lr"), "learning rate")
    assert _drawn(lr) == [("rank 0", "value", 1.0), ("rank 1", "value", 1.0)]  # smoothed == raw: one solid line
    lo, hi = lr["layer"][0]["encoding"]["y"]["scale"]["domain"]
    assert lo < 0.05 < hi and hi - lo > 0.001  # a constant is drawn flat, not as rounding noise
    one = curve_chart(compute_curve(df, "loss", ranks=[0]), "loss", log_y=True)
    assert one["layer"][0]["encoding"]["y"]["scale"]["type"] == "log"
    assert one["layer"][0]["encoding"]["color"]["legend"] is None


def test_short_series_shows_points_and_wall_time_is_temporal() -> None:
    spec = curve_chart(_curve(5), "validation loss")
    assert spec["layer"][0]["mark"]["point"] is True
    df = _metrics().assign(time=1.7e9 + np.tile(np.arange(200) * 0.1, 2))
    wall = curve_chart(compute_curve(df, "loss", x_axis=XAxis.WALL_TIME), "loss", x_axis=XAxis.WALL_TIME)
    assert wall["layer"][0]["encoding"]["x"]["type"] == "temporal"
    assert wall["data"]["values"][0]["x"] == 1.7e12  # ms since the epoch


def test_rank_band_holds_the_extremes_and_the_straggler() -> None:
    rng = np.random.default_rng(1)
    df = pd.DataFrame({"step": np.repeat(np.arange(500), 4), "rank": np.tile(np.arange(4), 500),
                       "step_time_s": 0.1 + rng.normal(0, 0.001, 2000)})
    df.loc[(df["step"] == 123) & (df["rank"] == 3), "step_time_s"] = 2.0
    spec = rank_band_chart(compute_rank_band(df, "step_time_s", max_points=100), "step time (ms)")
    rows = spec["data"]["values"]
    assert len(rows) <= 100
    assert any(r["step"] == 123 and r["max"] == 2.0 and r["max_rank"] == 3 for r in rows)
    assert min(r["min"] for r in rows) == float(f"{df['step_time_s'].min():.7g}")
    assert spec["layer"][0]["mark"]["type"] == "area" and spec["layer"][0]["encoding"]["y2"]["field"] == "max"
    assert spec["title"]["text"] == "step time (ms) · all ranks"


def test_overlay_shows_what_the_reports_plotly_overlay_shows() -> None:
    """Compare's Curves tab (Vega-Lite) and the HTML report (plotly, which inlines plotly.js once)
    draw the same points per run: each run's lowest rank, raw and smoothed."""
    from app.charts.compare import make_curve_overlay_figure
    from app.charts.curves import curve_overlay_chart

    base, other = _metrics(), _metrics().assign(loss=lambda d: d["loss"] * 0.8)
    curves = {"baseline": compute_curve(base, "loss"), "optimized": compute_curve(other, "loss")}
    spec = curve_overlay_chart(curves, "training loss")
    fig = make_curve_overlay_figure(curves, "loss")
    rows = spec["data"]["values"]
    smoothed = {t.name: list(t.y) for t in fig.data if t.showlegend is not False}
    raw = [list(t.y) for t in fig.data if t.showlegend is False]
    for i, run in enumerate(curves):
        mine = [r for r in rows if r["run"] == run]
        assert [r["smoothed"] for r in mine] == pytest.approx(smoothed[run], rel=1e-6)
        assert [r["value"] for r in mine] == pytest.approx(raw[i], rel=1e-6)
        assert [r["x"] for r in mine] == pytest.approx([float(x) for x in fig.data[2 * i].x])
    assert _drawn({**spec, "data": {"values": [{**r, "rank": r["run"]} for r in rows]}}) == [
        ("baseline", "smoothed", 1.0), ("baseline", "value", 0.45),
        ("optimized", "smoothed", 1.0), ("optimized", "value", 0.45)]
