"""Run page tab "Metrics": every logged curve, smoothed, per rank (UI layer)."""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import pandas as pd
import streamlit as st

from app.analysis.curves.smoothing import XAxis, list_curve_keys
from app.analysis.run.final_value import final_of_table
from app.charts.curves import make_curve_figure, make_rank_band_figure
from app.ui.deep_cache import cached_curve, cached_rank_band
from app.ui.tabs import RunContext

__all__ = ["TITLE", "render", "CURVE_LABELS", "curve_label"]

TITLE = "Metrics"

# Most-read curves first; the rest keep the order they were logged in.
_PREFERRED = ("loss", "val_loss", "lr", "grad_norm", "step_time_s", "samples")
_AXIS_LABELS = {XAxis.STEP: "step", XAxis.WALL_TIME: "wall time", XAxis.RELATIVE_TIME: "relative time"}
# What the agent's own keys (docs/run-format.md, metrics.jsonl) mean; a user's keys show as logged.
CURVE_LABELS = {
    "loss": "Training loss", "val_loss": "Validation loss", "lr": "Learning rate", "grad_norm": "Gradient norm",
    "step_time_s": "Step time (s)", "samples": "Samples per step", "val_accuracy": "Validation accuracy",
    "accuracy": "Training accuracy",
}
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
    ranks: list[int] | RankMode  # the ranks to overlay, or RankMode.BAND
    log_y: bool


def curve_label(key: str) -> str:
    """The chart title of a logged metric: a readable name for the agent's keys, else the key."""
    return CURVE_LABELS.get(key, key)


def _ordered_keys(keys: list[str]) -> list[str]:
    first = [k for k in _PREFERRED if k in keys]
    return first + [k for k in keys if k not in first]


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
    c1, c2, c3 = st.columns([3, 2, 2])
    chosen = c1.multiselect("Curves", keys, default=keys[: min(6, len(keys))], key=ctx.key("metrics_keys"),
                            format_func=lambda k: f"{curve_label(k)} ({k})" if k in CURVE_LABELS else k)
    axes = [XAxis.STEP] + ([XAxis.WALL_TIME, XAxis.RELATIVE_TIME] if "time" in metrics.columns else [])
    x_axis = XAxis(
        c2.radio("x-axis", axes, format_func=lambda a: _AXIS_LABELS[XAxis(a)], horizontal=True,
                 key=ctx.key("metrics_x"))
    )
    smoothing = c3.slider(
        "Smoothing", 0.0, 0.99, 0.6, 0.01, key=ctx.key("metrics_smoothing"),
        help="Debiased exponential moving average, as in TensorBoard; the raw values stay faint behind.",
    )
    available = sorted(int(r) for r in metrics["rank"].dropna().unique()) if "rank" in metrics else [0]
    ranks = _rank_choice(ctx, available)
    log_y = st.toggle("Log scale (y)", value=False, key=ctx.key("metrics_log"))
    return _Controls(chosen, x_axis, smoothing, ranks, log_y)


def _render_band(ctx: RunContext, key: str, c: _Controls) -> None:
    band = cached_rank_band(ctx.run_dir, key, smoothing=c.smoothing, max_points=_MAX_POINTS)
    if band.empty:
        st.info(f"No finite values of `{key}`.")
        return
    fig = make_rank_band_figure(band, curve_label(key), log_y=c.log_y and bool((band["value_min"] > 0).all()))
    st.plotly_chart(fig, width="stretch", key=ctx.key(f"metrics_band_{key}"))


def _render_curve(ctx: RunContext, key: str, c: _Controls, ranks: list[int]) -> None:
    started = ctx.run.manifest.started_at
    curve = cached_curve(
        ctx.run_dir, key, x_axis=c.x_axis, smoothing=c.smoothing, max_points=_MAX_POINTS, ranks=ranks,
        started_at=float(started) if started else None,
    )
    if curve.empty:
        st.info(f"No finite values of `{key}` for the chosen ranks.")
        return
    # One rank drawn: its final value as a dotted line (the number the Overview and Compare show).
    final = final_of_table(ctx.run.metrics, key, rank=ranks[0]) if len(ranks) == 1 else None
    fig = make_curve_figure(curve, curve_label(key), x_axis=c.x_axis,
                            log_y=c.log_y and bool((curve["value"] > 0).all()), final=final)
    st.plotly_chart(fig, width="stretch", key=ctx.key(f"metrics_fig_{key}"))


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
