"""Tests of app.analysis.curves.smoothing: debiased EMA and spike-preserving downsampling."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.analysis.curves.smoothing import (
    CURVE_COLUMNS,
    XAxis,
    compute_curve,
    debiased_ema,
    list_curve_keys,
    minmax_downsample_indices,
)

finite_floats = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False)


def _reference_ema(x: list[float], w: float) -> list[float]:
    out, acc = [], 0.0
    for i, v in enumerate(x, start=1):
        acc = w * acc + (1 - w) * v
        out.append(acc / (1 - w**i))
    return out


def test_ema_matches_tensorboard_formula() -> None:
    x = [1.0, 2.0, 4.0, 8.0, 3.0]
    got = debiased_ema(x, 0.6)
    assert got == pytest.approx(_reference_ema(x, 0.6))
    # Debiasing: the first smoothed value is the first value, not 0.4 * it.
    assert got[0] == pytest.approx(1.0)


def test_ema_weight_zero_is_identity_and_constant_is_fixed_point() -> None:
    assert debiased_ema([3.0, -1.0], 0.0).tolist() == [3.0, -1.0]
    assert debiased_ema([5.0] * 50, 0.95) == pytest.approx([5.0] * 50)


def test_ema_skips_non_finite_values() -> None:
    got = debiased_ema([1.0, float("nan"), 3.0, float("inf")], 0.5)
    assert np.isnan(got[1]) and np.isnan(got[3])
    assert got[[0, 2]] == pytest.approx(_reference_ema([1.0, 3.0], 0.5))


@pytest.mark.parametrize("w", [-0.1, 1.0, 2.0])
def test_ema_rejects_bad_weight(w: float) -> None:
    with pytest.raises(ValueError, match="smoothing weight"):
        debiased_ema([1.0], w)


@settings(max_examples=60, deadline=None)
@given(st.lists(finite_floats, min_size=1, max_size=300), st.floats(0.0, 0.99))
def test_ema_stays_within_range_of_values(x: list[float], w: float) -> None:
    got = debiased_ema(x, w)
    span = max(abs(v) for v in x) * 1e-9 + 1e-9
    assert (got >= min(x) - span).all() and (got <= max(x) + span).all()


@settings(max_examples=80, deadline=None)
@given(st.lists(finite_floats, min_size=1, max_size=2000), st.integers(4, 200))
def test_downsample_keeps_global_extremes_and_ends(y: list[float], max_points: int) -> None:
    idx = minmax_downsample_indices(y, max_points)
    arr = np.asarray(y)
    assert len(idx) <= max(max_points, len(y) if len(y) <= max_points else max_points)
    assert (np.diff(idx) > 0).all()  # sorted, no duplicates
    kept = arr[idx]
    assert kept.max() == arr.max() and kept.min() == arr.min()
    assert idx[0] == 0 and idx[-1] == len(y) - 1


@settings(max_examples=60, deadline=None)
@given(
    st.integers(500, 20_000),
    st.integers(0, 19_999),
    st.floats(1.0, 1e6),
    st.integers(8, 400),
    st.booleans(),
)
def test_downsample_keeps_a_single_spike(n: int, where: int, height: float, max_points: int, down: bool) -> None:
    rng = np.random.default_rng(where)
    y = rng.normal(0.0, 0.01, n)
    where %= n
    y[where] = -height if down else height
    idx = minmax_downsample_indices(y, max_points)
    assert where in idx
    assert len(idx) <= max_points


def test_downsample_is_not_a_stride_sample_and_handles_nan() -> None:
    y = np.zeros(100_000)
    y[12_345] = 7.0
    y[50_000:50_100] = np.nan
    idx = minmax_downsample_indices(y, 100)
    assert 12_345 in idx
    assert len(idx) <= 100
    assert np.isfinite(y[idx]).all()


def test_downsample_short_series_unchanged_and_bad_budget() -> None:
    assert minmax_downsample_indices([1.0, 2.0, 3.0], 10).tolist() == [0, 1, 2]
    with pytest.raises(ValueError):
        minmax_downsample_indices([1.0] * 10, 3)


def _metrics() -> pd.DataFrame:
    rows = []
    for rank in (0, 1):
        for step in range(10):
            rows.append({"step": step, "time": 100.0 + step, "rank": rank, "loss": 1.0 / (step + 1) + rank,
                         "lr": 0.1, "note": "x", "flag": True})
    df = pd.DataFrame(rows)
    df.loc[3, "loss"] = np.nan
    return df


def test_list_curve_keys_excludes_index_and_text_columns() -> None:
    assert list_curve_keys(_metrics()) == ["loss", "lr"]


def test_compute_curve_per_rank_axes_and_nan_rows() -> None:
    df = _metrics()
    curve = compute_curve(df, "loss", smoothing=0.0)
    assert list(curve.columns) == CURVE_COLUMNS
    assert sorted(curve["rank"].unique()) == [0, 1]
    assert len(curve[curve["rank"] == 0]) == 9  # the NaN row is dropped
    assert (curve["value"] == curve["smoothed"]).all()
    only1 = compute_curve(df, "loss", ranks=[1], x_axis=XAxis.RELATIVE_TIME)
    assert set(only1["rank"]) == {1}
    assert only1["x"].iloc[0] == 0.0 and only1["x"].iloc[-1] == 9.0
    wall = compute_curve(df, "loss", ranks=[0], x_axis=XAxis.WALL_TIME, started_at=1_700_000_000.0)
    assert wall["x"].iloc[0] == pd.Timestamp(1_700_000_100.0, unit="s", tz="UTC")


def test_compute_curve_downsamples_each_rank_and_smooths_on_full_series() -> None:
    n = 50_000
    df = pd.DataFrame({"step": np.arange(n), "time": np.arange(n, dtype=float), "rank": 0,
                       "loss": np.ones(n)})
    df.loc[31_337, "loss"] = 1e3
    curve = compute_curve(df, "loss", max_points=500, smoothing=0.9)
    assert len(curve) <= 500
    assert curve["value"].max() == 1e3
    assert 31_337 in curve["step"].tolist()
    full = debiased_ema(df["loss"].to_numpy(), 0.9)
    assert curve["smoothed"].to_numpy() == pytest.approx(full[curve["step"].to_numpy()])


def test_compute_curve_unknown_key_and_empty() -> None:
    with pytest.raises(KeyError, match="not logged"):
        compute_curve(_metrics(), "accuracy")
    empty = compute_curve(_metrics().assign(loss=np.nan), "loss")
    assert empty.empty and list(empty.columns) == CURVE_COLUMNS


def test_rank_band_names_the_straggler_and_keeps_extremes() -> None:
    from app.analysis.curves.smoothing import BAND_COLUMNS, compute_rank_band

    steps, ranks = 20_000, 16
    rng = np.random.default_rng(1)
    df = pd.DataFrame({"step": np.repeat(np.arange(steps), ranks), "rank": np.tile(np.arange(ranks), steps),
                       "step_time_s": 0.1 + rng.normal(0, 0.001, steps * ranks)})
    slow = (df["step"] == 12_345) & (df["rank"] == 7)
    df.loc[slow, "step_time_s"] = 2.0
    band = compute_rank_band(df, "step_time_s", max_points=400)
    assert list(band.columns) == BAND_COLUMNS
    assert len(band) <= 400
    row = band[band["step"] == 12_345].iloc[0]
    assert row["value_max"] == 2.0 and row["max_rank"] == 7 and row["ranks"] == ranks
    assert band["value_min"].min() == df["step_time_s"].min()
    assert (band["value_min"] <= band["value_median"]).all() and (band["value_median"] <= band["value_max"]).all()
    with pytest.raises(KeyError):
        compute_rank_band(df, "loss")
    assert compute_rank_band(df.assign(step_time_s=np.nan), "step_time_s").empty
