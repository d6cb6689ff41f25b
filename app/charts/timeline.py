"""Plotly figure of a trace window: lanes of thread/stream rows, one WebGL trace per event
category (charts layer: tables → figures, no Streamlit)."""
from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

from app.analysis.timeline import Timeline

__all__ = ["make_timeline_figure", "lane_rows"]

_PALETTE = qualitative.Plotly + qualitative.Safe
_NAME_CHARS = 120


def lane_rows(timeline: Timeline) -> tuple[np.ndarray, list[float], list[str], int]:
    """Return (y row of each event, tick positions, tick labels, number of rows).

    Each lane takes as many rows as its deepest nesting; lanes are stacked in
    ``timeline.lanes`` order.
    """
    events = timeline.events
    offsets: dict[str, int] = {}
    ticks: list[float] = []
    row = 0
    for lane in timeline.lanes:
        depth = int(events.loc[events["lane"] == lane, "depth"].max()) + 1 if len(events) else 1
        offsets[lane] = row
        ticks.append(float(row))
        row += depth
    y = events["lane"].map(offsets).to_numpy(np.int64) + events["depth"].to_numpy(np.int64)
    return y, ticks, list(timeline.lanes), max(row, 1)


def _hover(frame: pd.DataFrame) -> list[str]:
    texts = []
    for name, cat, dur, shapes, lane in zip(frame["name"], frame["cat"], frame["dur_us"], frame["input_shapes"],
                                            frame["lane"]):
        short = name if len(name) <= _NAME_CHARS else name[: _NAME_CHARS - 1] + "…"
        text = f"<b>{html.escape(short)}</b><br>{dur:,.1f} µs · {html.escape(cat)}<br>{html.escape(lane)}"
        if shapes:
            text += f"<br>shapes {html.escape(shapes[:_NAME_CHARS])}"
        texts.append(text)
    return texts


def _segments(start: np.ndarray, end: np.ndarray, y: np.ndarray) -> tuple[list, list]:
    """Each event becomes a start → end segment followed by a gap (None)."""
    n = len(start)
    xs = np.empty(3 * n, dtype=object)
    ys = np.empty(3 * n, dtype=object)
    xs[0::3], xs[1::3], xs[2::3] = start, end, None
    ys[0::3] = ys[1::3] = y
    ys[2::3] = None
    return xs.tolist(), ys.tolist()


def make_timeline_figure(timeline: Timeline, *, title: str | None = None) -> go.Figure:
    """Return the timeline figure: x in ms from the window start, one row per lane and depth.

    Events are drawn as thick WebGL line segments (one trace per category), which stays fluid
    for tens of thousands of events where one shape per event would not; hovering the middle of
    an event shows its name, duration, category, lane and input shapes.
    """
    events = timeline.events
    y, ticks, labels, rows = lane_rows(timeline)
    height = int(min(1600, max(260, 70 + rows * 18)))
    width_px = float(max(2.0, min(12.0, (height - 70) / rows * 0.7)))
    fig = go.Figure()
    cats = sorted(events["cat"].unique()) if len(events) else []
    for i, cat in enumerate(cats):
        mask = (events["cat"] == cat).to_numpy()
        sub = events[mask]
        start = sub["start_ms"].to_numpy(np.float64)
        # Zero-length events still get a visible sliver.
        end = start + np.maximum(sub["dur_us"].to_numpy(np.float64), 0.0) / 1000.0
        xs, ys = _segments(start, end, y[mask])
        colour = _PALETTE[i % len(_PALETTE)]
        name = cat or "(no category)"
        fig.add_trace(
            go.Scattergl(
                x=xs, y=ys, mode="lines", name=name, legendgroup=name, hoverinfo="skip",
                line={"width": width_px, "color": colour}, connectgaps=False,
            )
        )
        # Hover text once per event, on an invisible marker at its middle: three copies (one
        # per segment end) would triple the payload sent to the browser.
        fig.add_trace(
            go.Scattergl(
                x=(start + end) / 2, y=y[mask], text=_hover(sub), mode="markers", name=name,
                legendgroup=name, showlegend=False, marker={"size": width_px, "color": colour, "opacity": 0},
                hovertemplate="%{text}<extra></extra>",
            )
        )
    span_ms = (timeline.end_us - timeline.start_us) / 1000.0
    for tick in ticks[1:]:  # a thin rule between lanes
        fig.add_hline(y=tick - 0.5, line={"width": 1, "color": "rgba(120,120,120,0.35)"})
    fig.update_layout(
        title={"text": title, "x": 0.01} if title else None,
        height=height,
        margin={"l": 10, "r": 10, "t": 40 if title else 20, "b": 40},
        hovermode="closest",
        hoverdistance=40,
        dragmode="zoom",
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
    )
    fig.update_xaxes(title_text="ms since window start", range=[0, span_ms], showgrid=True, zeroline=False)
    fig.update_yaxes(
        tickvals=ticks, ticktext=[html.escape(label) for label in labels], automargin=True,
        range=[rows - 0.5, -0.5], showgrid=False, zeroline=False, fixedrange=False,
    )
    return fig
