"""Level of detail for the timeline: sub-pixel slices merged per row, a hard bound on the shapes
sent to a browser, and kernel → launch flow arrows (analysis layer).

A window of W µs drawn ``width_px`` pixels wide resolves ``W / width_px`` µs per pixel. On each
row (lane and nesting depth) a run of slices narrower than that, with gaps narrower than that,
is one merged slice ("37 events"): a person cannot tell them apart at this zoom, and zooming in
(a narrower window) splits them again. Slices at least a pixel wide do not overlap on a row, so a
row holds at most about ``2 · width_px`` shapes after merging; :func:`bound_shapes` then keeps the
widest ``max_shapes`` so that the count is bounded whatever the trace's size.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from app.analysis.trace.lanes import DEVICE_CATEGORIES

__all__ = ["SHAPE_BOUND", "MAX_FLOWS", "merge_subpixel", "bound_shapes", "compute_flows"]

# Most slices (merged or not) plus flow arrows a timeline figure holds: plotly draws this many
# WebGL segments fluidly on a laptop, and a person cannot read more on one screen anyway.
SHAPE_BOUND = 5_000
# Most kernel → launch arrows drawn at once (part of SHAPE_BOUND).
MAX_FLOWS = 500

_LAUNCH_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver", "privateuse1_runtime"})


def merge_subpixel(frame: pd.DataFrame, resolution_us: float) -> pd.DataFrame:
    """Merge, per ``lane`` and ``depth``, neighbouring slices narrower than ``resolution_us``.

    ``frame`` has ``lane``, ``depth``, ``name``, ``cat``, ``ts_us``, ``end_us``, ``dur_us``,
    ``input_shapes`` (``end_us`` already clipped to the window). Returns the same columns plus
    ``count`` (events in the shape; 1 for a real slice) and ``busy_us`` (their summed duration);
    a merged shape takes the name and category of its longest event and spans first start to
    last end. Slices at least ``resolution_us`` wide are kept as they are.
    """
    if frame.empty:
        return frame.assign(count=pd.Series(dtype=np.int64), busy_us=pd.Series(dtype=np.float64))
    f = frame.sort_values(["lane", "depth", "ts_us"], kind="stable").reset_index(drop=True)
    ts, end = f["ts_us"].to_numpy(np.float64), f["end_us"].to_numpy(np.float64)
    small = (end - ts) < resolution_us
    row = pd.factorize(pd.MultiIndex.from_arrays([f["lane"], f["depth"]]))[0]
    new_row = np.r_[True, row[1:] != row[:-1]]
    gap = np.r_[np.inf, ts[1:] - end[:-1]]
    prev_small = np.r_[False, small[:-1]]
    # A group starts at a wide slice, after a wide slice, on a new row, or after a visible gap.
    starts = new_row | ~small | ~prev_small | (gap > resolution_us)
    group = np.cumsum(starts) - 1
    if starts.all():
        return f.assign(count=np.ones(len(f), dtype=np.int64), busy_us=f["dur_us"].to_numpy(np.float64))
    f["_g"] = group
    grouped = f.groupby("_g", sort=True)
    longest = grouped["dur_us"].idxmax().to_numpy()
    out = f.loc[longest, ["lane", "depth", "name", "cat", "input_shapes"]].reset_index(drop=True)
    out["ts_us"] = grouped["ts_us"].min().to_numpy()
    out["end_us"] = grouped["end_us"].max().to_numpy()
    out["count"] = grouped.size().to_numpy().astype(np.int64)
    out["busy_us"] = grouped["dur_us"].sum().to_numpy()
    # A real slice keeps its own duration; a merged one reports the time it spans.
    out["dur_us"] = np.where(out["count"] == 1, f.loc[longest, "dur_us"].to_numpy(), out["end_us"] - out["ts_us"])
    return out[[*frame.columns, "count", "busy_us"]]


def bound_shapes(frame: pd.DataFrame, max_shapes: int) -> tuple[pd.DataFrame, int, float]:
    """The ``max_shapes`` widest shapes of ``frame`` (in their order), the number of events left
    out (a merged shape counts its ``count``) and the widest span left out (0 when none)."""
    if len(frame) <= max_shapes:
        return frame, 0, 0.0
    span = (frame["end_us"] - frame["ts_us"]).to_numpy(np.float64)
    order = np.argsort(-span, kind="stable")
    dropped = order[max_shapes:]
    hidden = int(frame["count"].to_numpy()[dropped].sum())
    return frame.iloc[np.sort(order[:max_shapes])], hidden, float(span[dropped].max())


def compute_flows(laid: pd.DataFrame, max_flows: int = MAX_FLOWS) -> pd.DataFrame:
    """Arrows from the runtime call that launched a device event to that event, by correlation id.

    ``laid`` holds the window's events with ``lane``, ``depth``, ``cat``, ``ts_us``, ``dur_us``
    and ``correlation``. Returns ``from_lane``, ``from_depth``, ``from_us`` (the launch's start),
    ``to_lane``, ``to_depth``, ``to_us`` (the device event's start), ``dur_us`` (the device
    event's), at most ``max_flows`` of them (the longest device events). Empty without ids.
    """
    columns = ["from_lane", "from_depth", "from_us", "to_lane", "to_depth", "to_us", "dur_us"]
    if laid.empty or "correlation" not in laid.columns:
        return pd.DataFrame(columns=columns)
    corr = pd.to_numeric(laid["correlation"], errors="coerce")
    cat = laid["cat"].astype(str)
    launch_mask = cat.isin(_LAUNCH_CATEGORIES) & corr.notna()
    launches = laid.loc[launch_mask, ["lane", "depth", "ts_us"]].assign(correlation=corr[launch_mask])
    launches = launches.drop_duplicates("correlation")
    device_mask = cat.isin(DEVICE_CATEGORIES) & corr.notna()
    device = laid.loc[device_mask, ["lane", "depth", "ts_us", "dur_us"]].assign(correlation=corr[device_mask])
    if launches.empty or device.empty:
        return pd.DataFrame(columns=columns)
    pairs = device.merge(launches, on="correlation", suffixes=("_to", "_from"))
    pairs = pairs.nlargest(max_flows, "dur_us") if len(pairs) > max_flows else pairs
    return pd.DataFrame({
        "from_lane": pairs["lane_from"].to_numpy(), "from_depth": pairs["depth_from"].to_numpy(np.int64),
        "from_us": pairs["ts_us_from"].to_numpy(np.float64), "to_lane": pairs["lane_to"].to_numpy(),
        "to_depth": pairs["depth_to"].to_numpy(np.int64), "to_us": pairs["ts_us_to"].to_numpy(np.float64),
        "dur_us": pairs["dur_us"].to_numpy(np.float64),
    })[columns].reset_index(drop=True)
