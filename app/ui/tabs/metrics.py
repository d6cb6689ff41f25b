"""Run page tab "Metrics": every logged curve, per rank, smoothed where smoothing helps (UI layer).

Smoothing is off by default for the learning rate and for series of fewer than
``SHORT_SERIES_POINTS`` points (``smoothing.smooth_by_default``); the raw series is always drawn
beneath a smoothed one. Every series is reachable by the search box, and the agent's keys show
with their human names and one unit per quantity (times in ms: app.presentation.names).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum

import pandas as pd
import streamlit as st

from app.analysis.curves.smoothing import (
    DEFAULT_SMOOTHING,
    SHORT_SERIES_POINTS,
    XAxis,
    list_curve_keys,
    smooth_by_default,
)
from app.analysis.run.final_value import final_of_table
from app.charts.curves import curve_chart, rank_band_chart
from app.presentation.names import final_name, metric_display, metric_label
from app.ui.deep_cache import cached_curve, cached_rank_band
from app.ui.tabs import RunContext
from profiler_agent.runformat.metric_keys import is_agent_key

__all__ = ["TITLE", "render", "curve_label", "default_curves"]

TITLE = "Metrics"

# Most-read curves first, then the user's own keys, then the agent's other keys.
_PREFERRED = ("loss", "val_loss")
_AGENT_ORDER = ("lr", "grad_norm", "step_time_s", "data_time_s", "samples")
_DEFAULT_SHOWN = 6
_AXIS_LABELS = {XAxis.STEP: "step", XAxis.WALL_TIME: "wall time", XAxis.RELATIVE_TIME: "relative time"}
_MAX_POINTS = 4000
# Above this many ranks one line per rank is unreadable: the band over ranks is the default.
_MAX_OVERLAID_RANKS = 8


class RankMode(StrEnum):
    """How a multi-rank run's curves are drawn (the values of the "Ranks shown" radio)."""

    PICK = "pick"  # one line per chosen rank
    BAND = "band"  # the min/median/max band over every rank


@dataclass(frozen=True)
class _Controls:
    """The tab's widget values."""

    chosen: list[str]
    x_axis: XAxis
    smoothing: float
    smooth_all: bool  # smooth the learning rate and short series too
    ranks: list[int] | RankMode  # the ranks to overlay, or RankMode.BAND
    log_y: bool


def curve_label(key: str) -> str:
    """The chart title of a logged metric: its human name with its unit (app.presentation.names)."""
    return metric_label(key)


def _ordered_keys(keys: list[str]) -> list[str]:
    first = [k for k in _PREFERRED if k in keys]
    user = [k for k in keys if k not in first and not is_agent_key(k)]
    agent = [k for k in _AGENT_ORDER if k in keys and k not in first]
    return first + user + agent + [k for k in keys if k not in first + user + agent]


def default_curves(keys: list[str]) -> list[str]:
    """The curves shown before the user picks: loss and validation loss, the user's own metrics,
    then the agent's (learning rate, gradient norm, step time…), up to six."""
    return _ordered_keys(keys)[:_DEFAULT_SHOWN]


def _option_text(key: str) -> str:
    """A curve's name in the pickers: its human name only (the search box also matches raw keys)."""
    return metric_label(key)


def _points_per_rank(metrics: pd.DataFrame, key: str) -> int:
    values = pd.to_numeric(metrics[key], errors="coerce")
    if "rank" not in metrics.columns:
        return int(values.notna().sum())
    counts = values.notna().groupby(metrics["rank"]).sum()
    return int(counts.max()) if len(counts) else 0


def _rank_choice(ctx: RunContext, available: list[int]) -> list[int] | RankMode:
    """The ranks to overlay, or RankMode.BAND for the min/median/max band over every rank."""
    if len(available) <= 1:
        return available
    mode = st.radio(
        "Ranks shown", list(RankMode), index=1 if len(available) > _MAX_OVERLAID_RANKS else 0, horizontal=True,
        key=ctx.key("metrics_rank_mode"),
        format_func=lambda m: "chosen ranks" if m == RankMode.PICK else f"band over all {len(available)} ranks",
        help="The band shows, per step, the minimum, median and maximum over ranks, and which rank is the maximum.",
    )
    if mode == RankMode.BAND:
        return RankMode.BAND
    default = [ctx.rank] if ctx.rank in available else available[:1]
    chosen = st.multiselect(
        "Ranks", available, default=default, key=ctx.key("metrics_ranks"),
        help="Overlay several ranks to spot a straggler or a diverging replica.",
    )
    return [int(r) for r in chosen] or default


def _render_controls(ctx: RunContext, metrics: pd.DataFrame, keys: list[str]) -> _Controls:
    query = st.text_input("Search metrics", key=ctx.key("metrics_search"),
                          placeholder=f"name or key, e.g. loss, learning rate ({len(keys)} series)")
    c1, c2, c3 = st.columns([3, 2, 2])
    if query.strip():
        q = query.strip().lower()
        matches = [k for k in keys if q in k.lower() or q in metric_label(k).lower()]
        chosen = c1.multiselect(f"Curves matching “{query.strip()}”", matches, default=matches,
                                key=ctx.key(f"metrics_keys_q_{q}"), format_func=_option_text)
        if not matches:
            c1.caption(f"No series matches “{query.strip()}”; {len(keys)} series in this run.")
    else:
        chosen = c1.multiselect("Curves", keys, default=default_curves(keys), key=ctx.key("metrics_keys"),
                                format_func=_option_text, help=f"All {len(keys)} series; type in the box to search.")
    axes = [XAxis.STEP] + ([XAxis.WALL_TIME, XAxis.RELATIVE_TIME] if "time" in metrics.columns else [])
    x_axis = XAxis(
        c2.radio("x-axis", axes, format_func=lambda a: _AXIS_LABELS[XAxis(a)], horizontal=True,
                 key=ctx.key("metrics_x"))
    )
    smoothing = c3.slider(
        "Smoothing", 0.0, 0.99, DEFAULT_SMOOTHING, 0.01, key=ctx.key("metrics_smoothing"),
        help="Debiased exponential moving average, as in TensorBoard, with the raw values drawn beneath. "
             f"The learning rate and series under {SHORT_SERIES_POINTS} points are drawn unsmoothed "
             "unless “Smooth every series” is on.",
    )
    available = sorted(int(r) for r in metrics["rank"].dropna().unique()) if "rank" in metrics else [0]
    ranks = _rank_choice(ctx, available)
    t1, t2 = st.columns(2)
    log_y = t1.toggle("Log scale (y)", value=False, key=ctx.key("metrics_log"))
    smooth_all = t2.toggle("Smooth every series", value=False, key=ctx.key("metrics_smooth_all"),
                           help=f"Also smooth the learning rate and series under {SHORT_SERIES_POINTS} points.")
    return _Controls(chosen, x_axis, smoothing, smooth_all, ranks, log_y)


def _smoothing_of(c: _Controls, metrics: pd.DataFrame, key: str) -> float:
    """The smoothing weight for ``key``: the slider's, or 0 for the learning rate and short series."""
    if c.smooth_all or smooth_by_default(key, _points_per_rank(metrics, key)):
        return c.smoothing
    return 0.0


def _render_band(ctx: RunContext, key: str, c: _Controls) -> None:
    band = cached_rank_band(ctx.run_dir, key, smoothing=_smoothing_of(c, ctx.run.metrics, key), max_points=_MAX_POINTS)
    if band.empty:
        st.info(f"No finite values of {curve_label(key)}.")
        return
    scale = metric_display(key).scale
    if scale != 1.0:
        band = band.assign(**{col: band[col] * scale for col in ("value_min", "value_median", "value_max",
                                                                 "smoothed_median")})
    spec = rank_band_chart(band, curve_label(key), log_y=c.log_y and bool((band["value_min"] > 0).all()))
    st.vega_lite_chart(spec, width="stretch", key=ctx.key(f"metrics_band_{key}"))


def _render_curve(ctx: RunContext, key: str, c: _Controls, ranks: list[int]) -> None:
    started = ctx.run.manifest.started_at
    curve = cached_curve(
        ctx.run_dir, key, x_axis=c.x_axis, smoothing=_smoothing_of(c, ctx.run.metrics, key), max_points=_MAX_POINTS,
        ranks=ranks, started_at=float(started) if started else None,
    )
    if curve.empty:
        st.info(f"No finite values of {curve_label(key)} for the chosen ranks.")
        return
    # One rank drawn: its final value as a dotted line (the number the Overview and Compare show).
    final = final_of_table(ctx.run.metrics, key, rank=ranks[0]) if len(ranks) == 1 else None
    scale = metric_display(key).scale  # one unit per quantity: seconds are shown in ms
    if scale != 1.0:
        curve = curve.assign(value=curve["value"] * scale, smoothed=curve["smoothed"] * scale)
        final = dataclasses.replace(final, value=final.value * scale) if final is not None else None
    if final is not None:  # its label names the number as the tile and the Runs page do, never the raw key
        final = dataclasses.replace(final, key=final_name(key))
    spec = curve_chart(curve, curve_label(key), x_axis=c.x_axis,
                       log_y=c.log_y and bool((curve["value"] > 0).all()), final=final)
    st.vega_lite_chart(spec, width="stretch", key=ctx.key(f"metrics_fig_{key}"))


def render(ctx: RunContext) -> None:
    """Draw one chart per chosen metric, with smoothing, x-axis and rank controls."""
    metrics = ctx.run.metrics
    keys = list_curve_keys(metrics) if len(metrics) else []
    if not keys:
        st.info(
            "This run has no logged metrics yet. Runs started with `torchscope run -- python train.py` "
            "log loss, learning rate and step time automatically; with the API, call "
            "`run.log(loss=..., lr=...)` once per step."
        )
        return
    c = _render_controls(ctx, metrics, _ordered_keys(keys))
    if not c.chosen:
        st.info("Pick at least one curve above.")
        return
    if c.ranks == RankMode.BAND and c.x_axis is not XAxis.STEP:
        st.caption("The band over ranks lines ranks up by step, so its x-axis is the step.")
    for key in c.chosen:
        if isinstance(c.ranks, RankMode):
            _render_band(ctx, key, c)
        else:
            _render_curve(ctx, key, c, c.ranks)
    n = int(metrics.groupby("rank").size().max()) if "rank" in metrics else len(metrics)
    if n > _MAX_POINTS:
        st.caption(
            f"Curves with more than {_MAX_POINTS:,} points per rank are drawn from min/max buckets "
            "(every spike kept); smoothing uses every point."
        )
    if ctx.run.problems:
        with st.expander(f"{len(ctx.run.problems)} skipped line(s)"):
            for p in ctx.run.problems:
                st.text(p)
