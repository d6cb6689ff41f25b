"""Tests of app.analysis.stats: bootstrap interval coverage, symmetry and verdicts."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.analysis.stats import (
    Direction,
    Verdict,
    bootstrap_ratio_of_medians,
    classify_ratio,
)


def test_clear_speedup_interval_excludes_one() -> None:
    rng = np.random.default_rng(1)
    base = rng.normal(0.100, 0.004, 60)
    cand = rng.normal(0.080, 0.004, 60)
    est = bootstrap_ratio_of_medians(base, cand)
    assert est.ratio == pytest.approx(np.median(cand) / np.median(base))
    assert est.lo <= est.ratio <= est.hi
    assert est.hi < 1.0
    assert 0.75 < est.lo and est.hi < 0.85
    assert classify_ratio(est.ratio, est.lo, est.hi) is Verdict.BETTER


def test_identical_samples_give_ratio_one_and_same() -> None:
    x = np.random.default_rng(2).lognormal(-3, 0.2, 40)
    est = bootstrap_ratio_of_medians(x, x.copy())
    assert est.ratio == 1.0 and est.lo == 1.0 and est.hi == 1.0
    assert classify_ratio(est.ratio, est.lo, est.hi) is Verdict.SAME


def test_same_distribution_is_same_in_most_seeds() -> None:
    # Two "seeds" of one config: the verdict must almost never claim a difference.
    rng = np.random.default_rng(3)
    verdicts = []
    for _ in range(40):
        a, b = rng.normal(0.05, 0.003, 50), rng.normal(0.05, 0.003, 50)
        e = bootstrap_ratio_of_medians(a, b, resamples=500)
        verdicts.append(classify_ratio(e.ratio, e.lo, e.hi))
    # Noise alone may exceed 2 % now and then; the 5 % test level bounds how often.
    assert verdicts.count(Verdict.SAME) >= 37


def test_interval_covers_true_ratio_at_about_95_percent() -> None:
    rng = np.random.default_rng(4)
    covered = 0
    trials = 200
    for _ in range(trials):
        a = rng.exponential(1.0, 80)
        b = rng.exponential(1.3, 80)
        e = bootstrap_ratio_of_medians(a, b, resamples=400, seed=int(rng.integers(1 << 30)))
        covered += e.lo <= 1.3 <= e.hi
    assert 0.88 <= covered / trials <= 0.99


def test_seeded_and_deterministic() -> None:
    rng = np.random.default_rng(5)
    a, b = rng.normal(1, 0.1, 30), rng.normal(1.1, 0.1, 30)
    assert bootstrap_ratio_of_medians(a, b, seed=7) == bootstrap_ratio_of_medians(a, b, seed=7)
    assert bootstrap_ratio_of_medians(a, b, seed=7).lo != bootstrap_ratio_of_medians(a, b, seed=8).lo


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0.001, 10.0), min_size=2, max_size=40),
    st.lists(st.floats(0.001, 10.0), min_size=2, max_size=40),
    st.integers(0, 2**31),
)
def test_swapping_sides_inverts_ratio_and_interval(a: list[float], b: list[float], seed: int) -> None:
    ab = bootstrap_ratio_of_medians(a, b, resamples=200, seed=seed)
    ba = bootstrap_ratio_of_medians(b, a, resamples=200, seed=seed)
    assert ab.ratio * ba.ratio == pytest.approx(1.0, rel=1e-12)
    assert ab.lo * ba.hi == pytest.approx(1.0, rel=1e-12)
    assert ab.hi * ba.lo == pytest.approx(1.0, rel=1e-12)
    assert ab.lo <= ab.hi
    v_ab = classify_ratio(ab.ratio, ab.lo, ab.hi)
    v_ba = classify_ratio(ba.ratio, ba.lo, ba.hi)
    flip = {Verdict.BETTER: Verdict.WORSE, Verdict.WORSE: Verdict.BETTER, Verdict.SAME: Verdict.SAME}
    # Exactly at the threshold boundary 1/(1+t) vs 1-t differ; allow SAME on one side only there.
    if v_ab is not flip[v_ba]:
        assert Verdict.SAME in (v_ab, v_ba) and abs(abs(ab.ratio - 1) - 0.02) < 0.001 + abs(ab.ratio - 1) * 0.05


def test_single_value_has_no_interval() -> None:
    e = bootstrap_ratio_of_medians([1.0], [2.0, 2.1])
    assert e.ratio == pytest.approx(2.05)
    assert math.isnan(e.lo) and not e.has_interval
    assert classify_ratio(e.ratio, e.lo, e.hi) is Verdict.WORSE  # only the threshold applies


def test_classify_threshold_and_directions() -> None:
    assert classify_ratio(1.015, 1.01, 1.02) is Verdict.SAME  # significant but below 2 %
    assert classify_ratio(1.10, 0.98, 1.2) is Verdict.SAME  # not significant
    assert classify_ratio(1.10, 1.05, 1.2) is Verdict.WORSE
    assert classify_ratio(1.10, 1.05, 1.2, direction=Direction.HIGHER) is Verdict.BETTER
    assert classify_ratio(1.10, 1.05, 1.2, direction=Direction.NONE) is Verdict.CHANGED
    assert classify_ratio(float("nan")) is Verdict.UNKNOWN
    assert classify_ratio(1.10, 1.05, 1.2, threshold=0.2) is Verdict.SAME


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="resamples"):
        bootstrap_ratio_of_medians([1, 2], [1, 2], resamples=10)
    with pytest.raises(ValueError, match="finite"):
        bootstrap_ratio_of_medians([float("nan")], [1.0])


@pytest.mark.parametrize("n", [2, 3, 7, 10, 51, 200])
def test_order_statistic_bootstrap_matches_direct_resampling(n: int) -> None:
    from app.analysis.stats import _bootstrap_medians

    rng = np.random.default_rng(n)
    x = rng.lognormal(0.0, 0.5, n)
    fast = _bootstrap_medians(x, 20_000, seed=1)
    idx = rng.integers(0, n, size=(20_000, n))
    direct = np.median(x[idx], axis=1)
    # Same distribution: the two empirical CDFs differ by sampling error only (Kolmogorov-Smirnov
    # distance of two 20k samples; 0.025 is far above its 99.9 % critical value 0.0195).
    grid = np.union1d(fast, direct)
    cdf_fast = np.searchsorted(np.sort(fast), grid, side="right") / fast.size
    cdf_direct = np.searchsorted(np.sort(direct), grid, side="right") / direct.size
    assert np.abs(cdf_fast - cdf_direct).max() < 0.025
    assert set(np.unique(fast)) <= set(np.unique(np.concatenate([x, (x[:, None] + x[None, :]).ravel() / 2])))
    assert fast.mean() == pytest.approx(direct.mean(), rel=0.02)


def test_large_samples_are_fast() -> None:
    import time

    x = np.random.default_rng(0).normal(1.0, 0.1, 1_000_000)
    t = time.perf_counter()
    e = bootstrap_ratio_of_medians(x, x * 0.97)
    assert time.perf_counter() - t < 5.0  # order statistics, not a resamples x n matrix
    assert e.ratio == pytest.approx(0.97) and e.lo < 0.97 < e.hi and e.hi - e.lo < 0.002
