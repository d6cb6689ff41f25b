"""Metric curves as Vega-Lite specs: the smoothed line over the raw one, one colour per rank, and
the band over ranks (charts layer: tables → specs, no Streamlit).

Vega-Lite, not plotly, as the Overview's and Operators' charts (app.charts.steps): the Metrics tab
opened after the Overview then needs no plotly.js in the browser (~4.7 MB to load and compile,
benchmarks/README.md, issue 16). The series come downsampled by ``compute_curve`` (min/max
buckets: every spike kept), so a spec holds at most ``max_points`` points per rank.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from app.analysis.curves.smoothing import SHORT_SERIES_POINTS, XAxis
from app.analysis.run.final_value import FinalValue

__all__ = ["RANK_COLOURS", "X_AXIS_TITLES", "curve_chart", "curve_overlay_chart", "rank_band_chart"]

X_AXIS_TITLES = {
    XAxis.STEP: "step",
    XAxis.WALL_TIME: "wall time (UTC)",
    XAxis.RELATIVE_TIME: "time since first sample (s)",
}
# plotly's first ten colours, as the other tabs' charts use for ranks.
RANK_COLOURS = ("#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A", "#19D3F3", "#FF6692", "#B6E880", "#FF97FF",
                "#FECB52")
_RAW_OPACITY = 0.45


def _num(v: float) -> float | None:
    """A JSON number (7 significant digits: more than a hover shows), None for NaN/inf."""
    f = float(v)
    return float(f"{f:.7g}") if math.isfinite(f) else None


def _x_values(x: pd.Series, x_axis: XAxis) -> list[float | None]:
    if x_axis is XAxis.WALL_TIME:  # Vega-Lite's temporal values: ms since the epoch (drawn in UTC)
        # Whatever the datetime resolution (ns in pandas 2, maybe µs later): a Timedelta ratio.
        ms = (pd.to_datetime(x, utc=True) - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(milliseconds=1)
        return [float(v) for v in np.asarray(ms, dtype=np.float64)]
    return [_num(v) for v in pd.to_numeric(x, errors="coerce")]


def _x_encoding(x_axis: XAxis) -> dict[str, Any]:
    if x_axis is XAxis.WALL_TIME:
        return {"field": "x", "type": "temporal", "title": X_AXIS_TITLES[x_axis], "scale": {"type": "utc"},
                "axis": {"format": "%H:%M:%S"}}
    axis: dict[str, Any] = {"format": "d", "tickMinStep": 1} if x_axis is XAxis.STEP else {}
    return {"field": "x", "type": "quantitative", "title": X_AXIS_TITLES[x_axis], "scale": {"zero": False},
            "axis": axis}


def _y_scale(values: pd.Series, log_y: bool) -> dict[str, Any]:
    """Log or linear; a flat curve is shown flat, not zoomed into its rounding noise."""
    if log_y:
        return {"type": "log"}
    finite = pd.to_numeric(values, errors="coerce").dropna()
    if not len(finite):
        return {"zero": False}
    lo, hi = float(finite.min()), float(finite.max())
    if hi - lo <= 1e-9 * max(abs(hi), abs(lo)):
        pad = abs(hi) * 0.1 or 1.0
        return {"domain": [lo - pad, hi + pad], "zero": False}
    return {"zero": False}


def _is_unsmoothed(group: pd.DataFrame) -> bool:
    raw, smooth = group["value"].to_numpy(float), group["smoothed"].to_numpy(float)
    return bool(((raw == smooth) | (raw != raw)).all())


def _rows(curve: pd.DataFrame, labels: list[str], x_axis: XAxis, field: str,
          smoothed: set[str]) -> list[dict[str, Any]]:
    """One row per point, its series (rank or run) under ``field``; ``s``: the series is drawn
    smoothed (its raw line then faint beneath)."""
    xs = _x_values(curve["x"], x_axis)
    steps = pd.to_numeric(curve["step"], errors="coerce").tolist()
    return [{field: r, "step": None if s != s else int(s), "x": x, "value": _num(v), "smoothed": _num(m),
             "s": r in smoothed}
            for r, s, x, v, m in zip(labels, steps, xs, curve["value"], curve["smoothed"])]


def _color(field: str, series: list[str]) -> dict[str, Any]:
    return {"field": field, "type": "nominal", "title": None, "scale": {"domain": series, "range": list(RANK_COLOURS)},
            "legend": {"orient": "top", "labelLimit": 320} if len(series) > 1 else None}


def _final_layers(final: FinalValue, log_y: bool) -> list[dict[str, Any]]:
    """A dotted line at the run's final value, labelled as everywhere ("final loss (median of last 4)")."""
    if log_y and not final.value > 0:
        return []
    text = f"{final.label} {final.value:.4g}"
    row = [{"final": _num(final.value), "label": text}]
    y = {"field": "final", "type": "quantitative"}
    return [
        {"data": {"values": row}, "mark": {"type": "rule", "strokeDash": [2, 3], "color": "#444", "opacity": 0.8},
         "encoding": {"y": y, "tooltip": [{"field": "label", "title": "line"}]}},
        {"data": {"values": row}, "mark": {"type": "text", "align": "right", "baseline": "top", "x": "width",
                                           "dx": -2, "dy": 3, "fontSize": 11, "color": "#444"},
         "encoding": {"y": y, "text": {"field": "label"}}},
    ]


def curve_chart(curve: pd.DataFrame, title: str, *, x_axis: XAxis = XAxis.STEP, log_y: bool = False,
                height: int = 320, final: FinalValue | None = None) -> dict[str, Any]:
    """Return a Vega-Lite spec of ``curve`` (the table of ``compute_curve``) titled ``title``.

    Each rank gets one colour: the raw values as a thinner, lighter line beneath (still easy to
    see: the raw series is the data), the smoothed values as a solid line over it; where ``smoothed``
    equals the values (no smoothing) only the raw line is drawn, solid, with its points when the
    series is short. Hovering shows the nearest point's rank, step, raw and smoothed value; the
    mouse wheel zooms, dragging pans, a double-click resets. ``final`` (app.analysis.run.final_value)
    adds a dotted line at the run's final value: the number the Runs page, the Overview and Compare
    show, which the smoothed curve's end is not.
    """
    labels = [f"rank {int(r)}" for r in curve["rank"]]
    order = [f"rank {int(r)}" for r in sorted(curve["rank"].unique())] if len(curve) else []
    smoothed = {f"rank {int(rank)}" for rank, g in curve.groupby("rank", sort=True) if not _is_unsmoothed(g)}
    short = int(curve.groupby("rank").size().max()) < SHORT_SERIES_POINTS if len(curve) else False
    return _series_chart(_rows(curve, labels, x_axis, "rank", smoothed), curve["value"], title, field="rank",
                         order=order, any_smoothed=bool(smoothed), short=short, x_axis=x_axis, log_y=log_y,
                         height=height, final=final)


def curve_overlay_chart(curves: Mapping[str, pd.DataFrame], title: str, *, x_axis: XAxis = XAxis.STEP,
                        log_y: bool = False, height: int = 340) -> dict[str, Any]:
    """Return one curve per run (``curves``: run label → table of ``compute_curve``) as a Vega-Lite
    spec, as :func:`curve_chart` draws ranks: one colour per run, its raw line faint beneath its
    smoothed one (solid alone when unsmoothed). Each run's lowest rank is drawn (as the HTML report's
    plotly overlay, ``app.charts.compare.make_curve_overlay_figure``)."""
    parts, labels, smoothed, lengths = [], [], set(), []
    for label, c in curves.items():
        if len(c) == 0:
            continue
        c0 = c[c["rank"] == c["rank"].min()]
        parts.append(c0)
        labels += [label] * len(c0)
        lengths.append(len(c0))
        if not _is_unsmoothed(c0):
            smoothed.add(label)
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["step", "x", "value", "smoothed"])
    order = [label for label in curves if label in set(labels)]
    short = bool(lengths) and max(lengths) < SHORT_SERIES_POINTS
    return _series_chart(_rows(frame, labels, x_axis, "run", smoothed), frame["value"], title, field="run",
                         order=order, any_smoothed=bool(smoothed), short=short, x_axis=x_axis, log_y=log_y,
                         height=height, final=None)


def _series_chart(rows: list[dict[str, Any]], values: pd.Series, title: str, *, field: str, order: list[str],
                  any_smoothed: bool, short: bool, x_axis: XAxis, log_y: bool, height: int,
                  final: FinalValue | None) -> dict[str, Any]:
    x, color = _x_encoding(x_axis), _color(field, order)
    value = {"field": "value", "type": "quantitative", "title": title, "scale": _y_scale(values, log_y)}
    zoom = {"name": "zoom", "select": {"type": "interval", "encodings": ["x"]}, "bind": "scales"}
    layers: list[dict[str, Any]] = [
        # Series drawn unsmoothed: their raw line, solid (with its points when the series is short).
        {"transform": [{"filter": "!datum.s"}], "mark": {"type": "line", "point": short, "strokeWidth": 2, "clip": True},
         "encoding": {"x": x, "y": value, "color": color}},
        # Smoothed series: the raw line faint beneath, the smoothed one solid over it.
        {"transform": [{"filter": "datum.s"}],
         "mark": {"type": "line", "strokeWidth": 1.5, "opacity": _RAW_OPACITY, "clip": True},
         "encoding": {"x": x, "y": value, "color": color}},
        {"transform": [{"filter": "datum.s"}], "mark": {"type": "line", "strokeWidth": 2, "clip": True},
         "encoding": {"x": x, "y": {**value, "field": "smoothed"}, "color": color}},
    ]
    tooltip = [{"field": field, "title": field}, {"field": "step", "title": "step"},
               {"field": "value", "title": f"{title} (raw)" if any_smoothed else title, "format": ".6g"}]
    if any_smoothed:
        tooltip.append({"field": "smoothed", "title": f"{title} (smoothed)", "format": ".6g"})
    if x_axis is XAxis.WALL_TIME:
        tooltip.insert(2, {"field": "x", "type": "temporal", "title": "time (UTC)", "format": "%Y-%m-%d %H:%M:%S"})
    # The nearest point is highlighted and its values shown: a line's own tooltip needs the pointer
    # exactly on the line.
    layers.append({"mark": {"type": "point", "filled": True, "size": 40, "clip": True},
                   "encoding": {"x": x, "y": value, "color": color, "tooltip": tooltip,
                                "opacity": {"condition": {"param": "near", "empty": False, "value": 1}, "value": 0}},
                   "params": [{"name": "near", "select": {"type": "point", "on": "mouseover", "nearest": True,
                                                          "clear": "mouseout"}}, zoom]})
    if final is not None:
        layers += _final_layers(final, log_y)
    return {"title": {"text": title, "anchor": "start"}, "data": {"values": rows},
            "layer": layers, "height": height}


def rank_band_chart(band: pd.DataFrame, title: str, *, log_y: bool = False, height: int = 320) -> dict[str, Any]:
    """Return the spread of a metric over ranks per step (the table of ``compute_rank_band``) as
    a Vega-Lite spec: a shaded min–max band, the raw median faint and the smoothed median solid;
    hovering a step shows its minimum, median, maximum and the rank holding the maximum."""
    rows = [{"step": int(s), "ranks": int(n), "min": _num(lo), "median": _num(med), "max": _num(hi),
             "smoothed": _num(sm), "max_rank": int(mr)}
            for s, n, lo, med, hi, sm, mr in zip(band["step"], band["ranks"], band["value_min"], band["value_median"],
                                                 band["value_max"], band["smoothed_median"], band["max_rank"])]
    colour = RANK_COLOURS[0]
    x = {"field": "step", "type": "quantitative", "title": "step", "scale": {"zero": False},
         "axis": {"format": "d", "tickMinStep": 1}}
    y_scale = _y_scale(pd.concat([band["value_min"], band["value_max"]]), log_y)
    y = {"type": "quantitative", "title": title, "scale": y_scale}
    tooltip = [{"field": "step", "title": "step"}, {"field": "ranks", "title": "ranks"},
               {"field": "min", "title": "min", "format": ".6g"},
               {"field": "median", "title": "median", "format": ".6g"},
               {"field": "smoothed", "title": "smoothed median", "format": ".6g"},
               {"field": "max", "title": "max", "format": ".6g"}, {"field": "max_rank", "title": "rank of the max"}]
    legend = {"field": "what", "type": "nominal", "title": None, "legend": {"orient": "top"},
              "scale": {"domain": ["min–max over ranks", "median (smoothed)"], "range": [colour, colour]}}
    layers: list[dict[str, Any]] = [
        {"transform": [{"calculate": "'min–max over ranks'", "as": "what"}],
         "mark": {"type": "area", "opacity": 0.2, "clip": True},
         "encoding": {"x": x, "y": {**y, "field": "min"}, "y2": {"field": "max"}, "color": legend},
         "params": [{"name": "zoom", "select": {"type": "interval", "encodings": ["x"]}, "bind": "scales"}]},
        {"mark": {"type": "line", "color": colour, "opacity": 0.35, "strokeWidth": 1, "clip": True},
         "encoding": {"x": x, "y": {**y, "field": "median"}}},
        {"transform": [{"calculate": "'median (smoothed)'", "as": "what"}],
         "mark": {"type": "line", "strokeWidth": 2, "clip": True},
         "encoding": {"x": x, "y": {**y, "field": "smoothed"}, "color": legend}},
        {"mark": {"type": "point", "filled": True, "size": 40, "color": colour, "clip": True},
         "encoding": {"x": x, "y": {**y, "field": "max"}, "tooltip": tooltip,
                      "opacity": {"condition": {"param": "near", "empty": False, "value": 1}, "value": 0}},
         "params": [{"name": "near", "select": {"type": "point", "on": "mouseover", "nearest": True,
                                                "fields": ["step"], "clear": "mouseout"}}]},
    ]
    return {"title": {"text": f"{title} · all ranks", "anchor": "start"}, "data": {"values": rows},
            "layer": layers, "height": height}
