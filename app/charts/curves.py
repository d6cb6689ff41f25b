"""Plotly figures of metric curves: smoothed line over a faint raw line, one colour per rank
(charts layer: tables → figures, no Streamlit)."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

from app.analysis.curves.smoothing import SHORT_SERIES_POINTS, XAxis
from app.analysis.run.final_value import FinalValue

__all__ = ["make_curve_figure", "make_rank_band_figure", "X_AXIS_TITLES"]

X_AXIS_TITLES = {
    XAxis.STEP: "step",
    XAxis.WALL_TIME: "wall time (UTC)",
    XAxis.RELATIVE_TIME: "time since first sample (s)",
}

_PALETTE = qualitative.Plotly


def _rgba(hex_colour: str, alpha: float) -> str:
    h = hex_colour.lstrip("#")
    r, g, b = (int(h[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


def make_curve_figure(
    curve: pd.DataFrame,
    key: str,
    *,
    x_axis: XAxis = XAxis.STEP,
    show_raw: bool = True,
    log_y: bool = False,
    height: int = 320,
    final: FinalValue | None = None,
) -> go.Figure:
    """Return a figure of ``curve`` (the table of ``compute_curve``) for the metric ``key``.

    Each rank gets one colour: the raw values as a thinner, lighter line beneath (still easy to
    see: the raw series is the data), the smoothed values as a solid line over it; with
    ``smoothed`` equal to the values (no smoothing) only the raw line is drawn, solid. WebGL traces keep 1e5+ points responsive. ``final`` (app.analysis.run.final_value) adds
    a dotted line at the run's final value, labelled as everywhere ("final loss (median of last 4)"):
    the number the Runs page, the Overview and Compare show, which the smoothed curve's end is not.
    """
    fig = go.Figure()
    for i, (rank, group) in enumerate(curve.groupby("rank", sort=True)):
        _add_rank_traces(fig, group, key, f"rank {rank}", _PALETTE[i % len(_PALETTE)], show_raw)
    fig.update_layout(
        title={"text": key, "x": 0.01},
        height=height,
        margin={"l": 50, "r": 10, "t": 40, "b": 40},
        hovermode="closest",
        legend={"orientation": "h", "y": -0.25},
        showlegend=curve["rank"].nunique() > 1 if len(curve) else False,
    )
    fig.update_xaxes(title_text=X_AXIS_TITLES[x_axis])
    fig.update_yaxes(title_text=key, type="log" if log_y else "linear")
    if final is not None and (final.value > 0 or not log_y):
        fig.add_hline(y=final.value, line_dash="dot", line_width=1, opacity=0.8,
                      annotation_text=f"{final.label} {final.value:.4g}", annotation_position="bottom right")
    if len(curve) and not log_y:
        _keep_flat_curve_flat(fig, curve)
    return fig


def _add_rank_traces(fig: go.Figure, group: pd.DataFrame, key: str, label: str, colour: str, show_raw: bool) -> None:
    """One rank's lines: the raw values beneath (when ``show_raw``), the smoothed values solid."""
    hover = "step %{customdata}<br>" + key + " %{y:.6g}<extra>" + label + "</extra>"
    raw, smooth = group["value"].to_numpy(float), group["smoothed"].to_numpy(float)
    if (raw.shape == smooth.shape and bool(((raw == smooth) | (raw != raw)).all())):
        fig.add_trace(go.Scattergl(x=group["x"], y=group["value"], customdata=group["step"],
                                   mode="lines+markers" if len(group) < SHORT_SERIES_POINTS else "lines",
                                   line={"color": colour, "width": 2}, marker={"size": 5}, name=label,
                                   legendgroup=label, hovertemplate=hover))
        return
    if show_raw:
        fig.add_trace(
            go.Scattergl(
                x=group["x"],
                y=group["value"],
                customdata=group["step"],
                mode="lines",
                line={"color": _rgba(colour, 0.45), "width": 1.5},
                name=f"{label} raw",
                legendgroup=label,
                showlegend=False,
                hovertemplate=hover.replace(key, f"{key} (raw)"),
            )
        )
    fig.add_trace(
        go.Scattergl(
            x=group["x"],
            y=group["smoothed"],
            customdata=group["step"],
            mode="lines",
            line={"color": colour, "width": 2},
            name=label,
            legendgroup=label,
            hovertemplate=hover.replace(key, f"{key} (smoothed)"),
        )
    )


def _keep_flat_curve_flat(fig: go.Figure, curve: pd.DataFrame) -> None:
    """A flat curve is shown flat, not zoomed into its rounding noise."""
    lo, hi = float(curve["value"].min()), float(curve["value"].max())
    if hi - lo <= 1e-9 * max(abs(hi), abs(lo)):
        pad = abs(hi) * 0.1 or 1.0
        fig.update_yaxes(range=[lo - pad, hi + pad])


def make_rank_band_figure(band: pd.DataFrame, key: str, *, log_y: bool = False, height: int = 320) -> go.Figure:
    """Return the spread of ``key`` over ranks per step (the table of ``compute_rank_band``):
    a shaded min–max band, the raw median faint and the smoothed median solid; hovering the
    band's top names the rank holding the maximum."""
    colour = _PALETTE[0]
    fig = go.Figure([
        go.Scattergl(x=band["step"], y=band["value_min"], mode="lines", line={"width": 0}, name="min",
                     showlegend=False, hovertemplate="min %{y:.6g}<extra></extra>"),
        go.Scattergl(x=band["step"], y=band["value_max"], mode="lines", line={"width": 0}, fill="tonexty",
                     fillcolor=_rgba(colour, 0.2), name="min–max over ranks", customdata=band["max_rank"],
                     hovertemplate="max %{y:.6g} (rank %{customdata})<extra></extra>"),
        go.Scattergl(x=band["step"], y=band["value_median"], mode="lines", line={"color": _rgba(colour, 0.35),
                     "width": 1}, name="median (raw)", showlegend=False,
                     hovertemplate="median %{y:.6g}<extra></extra>"),
        go.Scattergl(x=band["step"], y=band["smoothed_median"], mode="lines", line={"color": colour, "width": 2},
                     name="median (smoothed)", hovertemplate="smoothed median %{y:.6g}<extra></extra>"),
    ])
    fig.update_layout(title={"text": f"{key} · all ranks", "x": 0.01}, height=height, hovermode="x unified",
                      margin={"l": 50, "r": 10, "t": 40, "b": 40}, legend={"orientation": "h", "y": -0.25})
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text=key, type="log" if log_y else "linear")
    return fig
