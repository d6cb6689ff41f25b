"""Metric curves: debiased EMA smoothing and spike-preserving downsampling (analysis layer).

Input is the metrics table of ``app.data.runs.load_run`` (``step``, ``time``, ``rank`` and one
column per logged key). Everything here is pure numpy/pandas so the Metrics tab, the CLI and
the benchmark share it.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from enum import StrEnum

import numpy as np
import pandas as pd

__all__ = [
    "XAxis",
    "CURVE_COLUMNS",
    "INDEX_COLUMNS",
    "list_curve_keys",
    "debiased_ema",
    "minmax_downsample_indices",
    "compute_curve",
    "BAND_COLUMNS",
    "compute_rank_band",
    "SHORT_SERIES_POINTS",
    "DEFAULT_SMOOTHING",
    "smooth_by_default",
]

# Below this many points per rank a series is drawn unsmoothed by default: an EMA of 5 values
# mostly shows its own warm-up (a 5-point val_loss ending at 0.617 was drawn near 5.5).
SHORT_SERIES_POINTS = 50
DEFAULT_SMOOTHING = 0.6
# The learning rate follows a schedule, not noise: smoothing it only blurs the schedule's steps.
_LR_KEY = re.compile(r"^(?:lr|learning_rate)(?:_\d+)?$|(?:^|[/_.])(?:lr|learning_rate)$", re.IGNORECASE)


def smooth_by_default(key: str, n_points: int) -> bool:
    """Whether the Metrics tab smooths ``key`` by default: not the learning rate (``lr``,
    ``lr_1``, ``learning_rate``, ``…/lr``), not a series of fewer than SHORT_SERIES_POINTS points."""
    return n_points >= SHORT_SERIES_POINTS and not _LR_KEY.search(key)

# Columns of the metrics table that are coordinates, not curves.
INDEX_COLUMNS = ("step", "time", "rank", "tb_step")  # tb_step: a SummaryWriter's global_step

# Columns of compute_curve's result.
CURVE_COLUMNS = ["rank", "step", "x", "value", "smoothed"]
# Columns of compute_rank_band's result.
BAND_COLUMNS = ["step", "ranks", "value_min", "value_median", "value_max", "smoothed_median", "max_rank"]


class XAxis(StrEnum):
    """What the x-axis of a curve shows."""

    STEP = "step"
    WALL_TIME = "wall_time"  # absolute time of the sample (datetime, UTC)
    RELATIVE_TIME = "relative_time"  # seconds since the rank's first sample


def list_curve_keys(metrics: pd.DataFrame) -> list[str]:
    """Return the logged keys that can be drawn as curves: numeric columns with at least one
    finite value, other than step/time/rank, in the order they appear in the table."""
    keys: list[str] = []
    for col in metrics.columns:
        if col in INDEX_COLUMNS:
            continue
        values = pd.to_numeric(metrics[col], errors="coerce")
        if not pd.api.types.is_bool_dtype(metrics[col]) and np.isfinite(values.to_numpy(float, na_value=np.nan)).any():
            keys.append(str(col))
    return keys


def debiased_ema(values: np.ndarray | Sequence[float], weight: float) -> np.ndarray:
    """Return TensorBoard's debiased exponential moving average of ``values``.

    ``ema_t = w·ema_{t-1} + (1-w)·x_t`` starting from 0, divided by ``1 - w^n`` where n counts
    the finite values seen so far, so the first point equals the first value instead of being
    pulled toward 0. Non-finite values (NaN, inf) are skipped: the output there is NaN and the
    average carries over. ``weight`` 0 returns the values unchanged.

    Raises ValueError when weight is outside [0, 1).
    """
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"smoothing weight must be in [0, 1), got {weight!r}")
    x = np.asarray(values, dtype=np.float64)
    out = np.full(x.shape, np.nan)
    finite = np.isfinite(x)
    if weight == 0.0:
        out[finite] = x[finite]
        return out
    xs = x[finite]
    if xs.size == 0:
        return out
    # pandas' adjusted EWM is the same quantity: sum(w^i · x_{t-i}) / sum(w^i) over the values
    # so far, and sum(w^i, i < n) = (1 - w^n) / (1 - w) turns it into TensorBoard's formula. It
    # runs in compiled code (1e6 points in ~0.05 s) where a Python loop takes a second.
    ema = pd.Series(xs).ewm(alpha=1.0 - weight, adjust=True).mean().to_numpy()
    # The average is a convex combination of the values, so it lies within their range; the
    # clip removes rounding noise (a constant learning rate would otherwise wobble at 1e-17 and
    # an autoscaled axis would draw that wobble as spikes).
    out[finite] = np.clip(ema, xs.min(), xs.max())
    return out


def minmax_downsample_indices(y: np.ndarray | Sequence[float], max_points: int) -> np.ndarray:
    """Return sorted row indices of at most ``max_points`` points that keep the curve's shape.

    The series is cut into ``(max_points - 2) // 2`` equal buckets; each keeps its minimum
    and its maximum (in their original order), plus the first and last points overall. Unlike a
    stride sample this keeps every spike that stands out of its bucket, and always keeps the
    global minimum and maximum. NaNs never win a bucket; a bucket of only NaNs keeps its first
    row so gaps stay visible. Series no longer than ``max_points`` are returned whole.

    Raises ValueError when max_points < 4.
    """
    if max_points < 4:
        raise ValueError(f"max_points must be at least 4, got {max_points}")
    y = np.asarray(y, dtype=np.float64)
    n = y.size
    if n <= max_points:
        return np.arange(n)
    # Equal buckets (the last one shorter), laid out as rows of a 2-D array so that argmax and
    # argmin run over contiguous memory in one call each.
    size = -(-n // max(1, (max_points - 2) // 2))
    buckets = -(-n // size)
    pad = buckets * size - n
    finite = np.isfinite(y)
    if finite.all():
        # Pad with the last value: it cannot change the last bucket's extremes, and argmax/argmin
        # return the first occurrence, which is then a real row. No NaN masks to build.
        hi = lo = np.concatenate([y, np.full(pad, y[-1])]).reshape(buckets, size) if pad else y.reshape(buckets, size)
    else:
        hi = np.concatenate([np.where(finite, y, -np.inf), np.full(pad, -np.inf)]).reshape(buckets, size)
        lo = np.concatenate([np.where(finite, y, np.inf), np.full(pad, np.inf)]).reshape(buckets, size)
    rows = np.arange(buckets)
    arg_hi = hi.argmax(axis=1)  # first occurrence of the bucket's maximum
    arg_lo = lo.argmin(axis=1)
    has_value = np.isfinite(hi[rows, arg_hi])
    starts = rows * size
    keep = np.concatenate([
        starts[has_value] + arg_hi[has_value],
        starts[has_value] + arg_lo[has_value],
        starts[~has_value],  # a bucket of only NaNs keeps one row, so the gap stays visible
        [0, n - 1],
    ])
    return np.unique(keep)


# Below this a ``time`` value is read as seconds since the run started, not a Unix time.
_EPOCH_THRESHOLD_S = 1e8


def _x_values(frame: pd.DataFrame, x_axis: XAxis, started_at: float | None) -> pd.Series:
    if x_axis is XAxis.STEP:
        return pd.to_numeric(frame["step"], errors="coerce")
    t = pd.to_numeric(frame["time"], errors="coerce")
    if x_axis is XAxis.RELATIVE_TIME:
        return t - t.min()
    if t.max() < _EPOCH_THRESHOLD_S:
        t = t + (started_at or 0.0)
    return pd.to_datetime(t, unit="s", utc=True)


def compute_curve(
    metrics: pd.DataFrame,
    key: str,
    *,
    x_axis: XAxis = XAxis.STEP,
    smoothing: float = 0.6,
    max_points: int = 4000,
    ranks: Sequence[int] | None = None,
    started_at: float | None = None,
) -> pd.DataFrame:
    """Return one curve per rank, smoothed then downsampled, with columns CURVE_COLUMNS.

    ``x`` is the step, the wall time (UTC datetimes) or the seconds since the rank's first
    sample (``time`` values that are not Unix times are offset by ``started_at``, the run's
    start as a Unix time); ``smoothed`` is the debiased EMA over the full series (computed before
    downsampling so it does not depend on the zoom level); rows with no finite ``value`` are
    dropped. ``ranks`` None keeps every rank. ``max_points`` is per rank.

    Raises KeyError when ``key`` is not a column of ``metrics``, ValueError for a bad
    smoothing weight or max_points.
    """
    if key not in metrics.columns:
        raise KeyError(f"metric {key!r} is not logged; logged keys: {', '.join(list_curve_keys(metrics))}")
    frame = metrics
    if "rank" not in frame.columns:
        frame = frame.assign(rank=0)
    if ranks is not None:
        frame = frame[frame["rank"].isin(list(ranks))]
    parts: list[pd.DataFrame] = []
    for rank, group in frame.groupby("rank", sort=True):
        values = pd.to_numeric(group[key], errors="coerce").to_numpy(np.float64, na_value=np.nan)
        ok = np.isfinite(values)
        if not ok.any():
            continue
        group = group.loc[ok]
        values = values[ok]
        smoothed = debiased_ema(values, smoothing)
        keep = minmax_downsample_indices(values, max_points)
        x = _x_values(group, x_axis, started_at).to_numpy()[keep]
        steps = pd.to_numeric(group["step"], errors="coerce").to_numpy()[keep] if "step" in group else keep
        parts.append(
            pd.DataFrame(
                {"rank": int(rank), "step": steps, "x": x, "value": values[keep], "smoothed": smoothed[keep]}
            )
        )
    if not parts:
        return pd.DataFrame(columns=CURVE_COLUMNS)
    return pd.concat(parts, ignore_index=True)[CURVE_COLUMNS]


def compute_rank_band(
    metrics: pd.DataFrame, key: str, *, smoothing: float = 0.6, max_points: int = 4000
) -> pd.DataFrame:
    """Return, per step, the spread of ``key`` over every rank (BAND_COLUMNS): how many ranks
    logged it, their minimum, median and maximum, the debiased EMA of the median, and the rank
    holding the maximum (the straggler, for a step time). For runs with too many ranks to
    overlay one line each. Steps are downsampled on both the minimum and the maximum, so the
    extremes of every rank survive.

    Raises KeyError when ``key`` is not logged.
    """
    if key not in metrics.columns:
        raise KeyError(f"metric {key!r} is not logged; logged keys: {', '.join(list_curve_keys(metrics))}")
    frame = pd.DataFrame({
        "step": pd.to_numeric(metrics["step"], errors="coerce"),
        "rank": pd.to_numeric(metrics["rank"], errors="coerce") if "rank" in metrics else 0,
        "value": pd.to_numeric(metrics[key], errors="coerce"),
    })
    frame = frame[np.isfinite(frame["value"]) & frame["step"].notna()]
    if frame.empty:
        return pd.DataFrame(columns=BAND_COLUMNS)
    grouped = frame.groupby("step", sort=True)["value"]
    band = grouped.agg(ranks="count", value_min="min", value_median="median", value_max="max").reset_index()
    band["max_rank"] = frame.loc[grouped.idxmax().to_numpy(), "rank"].to_numpy().astype(np.int64)
    band["smoothed_median"] = debiased_ema(band["value_median"].to_numpy(), smoothing)
    half = max(4, max_points // 2)
    keep = np.union1d(minmax_downsample_indices(band["value_max"].to_numpy(), half),
                      minmax_downsample_indices(band["value_min"].to_numpy(), half))
    return band.iloc[keep][BAND_COLUMNS].reset_index(drop=True)
