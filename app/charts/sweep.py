"""Plotly figures of a stored sweep (``torchscope sweep``): its trials in parallel coordinates and the
objective against each parameter, log-uniform parameters on a log axis (charts layer).

Input is ``app.analysis.compare.sweep_trials.SweepTrials``'s table and its ``log_params`` (column →
searched range). Plotly's parallel coordinates have no log axis, so a log-uniform parameter's
dimension holds log10 of its values, with tick labels that read as the values themselves
(0.001, 0.01, 0.1 …); its range is the searched range, so where the trials fell in it shows. The
scatter of the objective against a log-uniform parameter uses a real log x axis.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go

from app.presentation.units import format_value

__all__ = ["log_ticks", "make_sweep_parallel_coordinates_figure", "make_sweep_objective_figure"]


def _label(column: str) -> str:
    return column.removeprefix("param.")


def log_ticks(low: float, high: float) -> tuple[list[float], list[str]]:
    """Tick positions (log10) and labels (the values) for a log axis over ``[low, high]`` (both > 0):
    every power of ten inside it, with 2 and 5 between them when it spans under three decades, and
    the two ends themselves when fewer than two ticks would show. Raises ValueError for a bad range."""
    if not (low > 0 and high > low and math.isfinite(high)):
        raise ValueError(f"a log axis needs 0 < low < high, got {low}, {high}")
    lo, hi = math.log10(low), math.log10(high)
    steps = (1.0, 2.0, 5.0) if hi - lo < 3 else (1.0,)
    values = [m * 10.0 ** e for e in range(math.floor(lo), math.ceil(hi) + 1) for m in steps]
    eps = 1e-9 * max(1.0, hi - lo)
    kept = [v for v in values if lo - eps <= math.log10(v) <= hi + eps]
    if len(kept) < 2:
        kept = sorted({low, *kept, high})
    return [math.log10(v) for v in kept], [format_value(v) for v in kept]


def _dimension(table: pd.DataFrame, column: str, log_range: tuple[float, float] | None) -> dict[str, object]:
    values = pd.to_numeric(table[column], errors="coerce")
    if log_range is None:
        return {"label": _label(column), "values": values}
    low, high = min(log_range[0], float(values.min())), max(log_range[1], float(values.max()))
    tickvals, ticktext = log_ticks(low, high)
    return {"label": f"{_label(column)} (log)", "values": [math.log10(v) for v in values.astype(float)],
            "range": [math.log10(low), math.log10(high)], "tickvals": tickvals, "ticktext": ticktext}


def make_sweep_parallel_coordinates_figure(table: pd.DataFrame, params: Sequence[str], objective: str, *,
                                           log_params: Mapping[str, tuple[float, float]] | None = None,
                                           objective_label: str = "objective",
                                           height: int = 420) -> go.Figure:
    """One line per trial across its numeric parameters and the objective, coloured by the objective;
    ``log_params`` (column → searched range) are drawn on log axes. Trials without an objective
    (pruned, failed) are left out: a line needs every axis."""
    log_params = log_params or {}
    rows = table[table[objective].notna()] if objective in table.columns else table.iloc[0:0]
    dims = [_dimension(rows, c, log_params.get(c)) for c in params if c in rows.columns]
    dims.append({"label": objective_label, "values": pd.to_numeric(rows[objective], errors="coerce")}
                if objective in rows.columns else {"label": objective_label, "values": []})
    line = {"color": pd.to_numeric(rows[objective], errors="coerce"), "colorscale": "Viridis",
            "showscale": True} if len(rows) else {}
    fig = go.Figure(go.Parcoords(dimensions=dims, line=line))
    fig.update_layout(title=f"Sweep: parameters and {objective_label} (colour: {objective_label})",
                      height=height, margin={"l": 60, "r": 60, "t": 100, "b": 30})  # room for the axis labels
    return fig


def make_sweep_objective_figure(table: pd.DataFrame, param: str, objective: str, *,
                                log_range: tuple[float, float] | None = None, objective_label: str = "objective",
                                height: int = 360) -> go.Figure:
    """The objective against one parameter, one point per trial (hover: the run's name; the run id
    in ``customdata``); a log x axis over the searched range when ``log_range`` is given."""
    fig = go.Figure()
    if param in table.columns and objective in table.columns:
        fig.add_scatter(x=table[param], y=table[objective], mode="markers", marker={"size": 10},
                        text=table["name"].astype(str) if "name" in table.columns else None,
                        customdata=table["id"].astype(str) if "id" in table.columns else None,
                        hovertemplate="%{text}<br>%{x}: %{y}<extra></extra>")
    if log_range is not None:
        values = pd.to_numeric(table[param], errors="coerce") if param in table.columns else pd.Series(dtype=float)
        low = min(log_range[0], float(values.min())) if values.notna().any() else log_range[0]
        high = max(log_range[1], float(values.max())) if values.notna().any() else log_range[1]
        tickvals, ticktext = log_ticks(low, high)
        fig.update_xaxes(type="log", range=[math.log10(low), math.log10(high)],
                         tickvals=[10.0 ** t for t in tickvals], ticktext=ticktext, title=f"{_label(param)} (log)")
    else:
        fig.update_xaxes(title=_label(param))
    fig.update_yaxes(title=objective_label)
    fig.update_layout(title=f"{objective_label} vs {_label(param)}", height=height,
                      margin={"l": 50, "r": 20, "t": 50, "b": 40})
    return fig
