"""Reference distributions for the interval methods: Student's t and Mann–Whitney's U (analysis layer).

Pure Python/numpy because scipy is not a dependency. ``t_quantile`` inverts the t CDF written
with the regularized incomplete beta function (continued fraction, Numerical Recipes §6.4);
``mann_whitney_lower_count`` gives the rank of the order statistic of the pairwise differences
that bounds the distribution-free shift interval, exactly for small samples.
"""
from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist

import numpy as np

__all__ = ["mann_whitney_lower_count", "normal_quantile", "t_quantile", "t_upper_tail"]

# m * n up to this uses the exact null distribution of U (C(200, 100) ~ 1e59 fits a float).
_EXACT_MAX_CELLS = 10_000


def normal_quantile(p: float) -> float:
    """Return the standard normal quantile at ``p`` (0 < p < 1)."""
    return NormalDist().inv_cdf(p)


def _betacf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(c) > tiny else 1.0 + aa / tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(c) > tiny else 1.0 + aa / tiny
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln_front) * _betacf(b, a, 1.0 - x) / b


def _t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_upper_tail(t: float, df: float) -> float:
    """P(T >= t) for Student's t with ``df`` (> 0) degrees of freedom: a one-sided p-value."""
    if math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t > 0 else 1.0 - tail


def _t_pdf(t: float, df: float) -> float:
    log_c = math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(df * math.pi)
    return math.exp(log_c - (df + 1.0) / 2.0 * math.log1p(t * t / df))


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """Return the quantile of Student's t with ``df`` (> 0, real) degrees of freedom at ``p``.

    Newton steps on the CDF kept inside a bisection bracket, to 1e-12 relative; raises
    ValueError for p outside (0, 1) or df <= 0.
    """
    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    z = normal_quantile(p)
    x = z + (z**3 + z) / (4.0 * df)  # Cornish-Fisher start
    lo, hi = 0.0, max(1.0, x)
    while _t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    x = min(max(x, lo), hi)
    for _ in range(200):
        err = _t_cdf(x, df) - p
        if err < 0:
            lo = x
        else:
            hi = x
        density = _t_pdf(x, df)
        step = x - err / density if density > 0 else math.nan
        x = step if lo < step < hi else 0.5 * (lo + hi)
        if hi - lo < 1e-12 * max(1.0, hi) or abs(err) < 1e-15:
            break
    return x


@lru_cache(maxsize=512)
def _u_null_cdf(m: int, n: int) -> np.ndarray:
    """CDF of the Mann–Whitney U statistic under H0 (no ties), index u = 0..m*n.

    The counts are the coefficients of the Gaussian binomial [m+n choose m]_q
    = prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i), built by multiplying and dividing polynomials.
    """
    m, n = min(m, n), max(m, n)
    size = m * n + 1
    poly = np.zeros(size + n + m + 1)
    poly[0] = 1.0
    for i in range(1, m + 1):
        shifted = np.zeros_like(poly)
        shifted[n + i:] = poly[: poly.size - (n + i)]
        poly = poly - shifted
        # Division by (1 - q^i): p[k] += p[k - i], a running sum along each residue class mod i.
        pad = (-poly.size) % i
        view = np.concatenate([poly, np.zeros(pad)]).reshape(-1, i)
        poly = np.cumsum(view, axis=0).ravel()[: poly.size]
    counts = np.clip(poly[:size], 0.0, None)
    return np.asarray(np.cumsum(counts) / counts.sum(), dtype=float)


def mann_whitney_lower_count(m: int, n: int, alpha: float, variance_factor: float = 1.0) -> int:
    """Return k, the 1-based rank such that the m*n pairwise differences' order statistics
    D_(k) and D_(m*n+1-k) bound a two-sided (1 - alpha) interval for a location shift.

    k is the largest integer with P(U <= k - 1) <= alpha / 2 under H0, exact for
    m * n <= 10,000, normal with continuity correction above. ``variance_factor`` (>= 1)
    inflates Var(U) for serial correlation (normal approximation), and the smaller of the two
    ranks is returned. 0 means no interval reaches that confidence (too few values).
    """
    if m < 1 or n < 1:
        return 0
    cells = m * n
    z = normal_quantile(1.0 - alpha / 2.0)
    var_iid = cells * (m + n + 1) / 12.0
    if cells <= _EXACT_MAX_CELLS:
        cdf = _u_null_cdf(m, n)
        k = int(np.searchsorted(cdf, alpha / 2.0 * (1.0 + 1e-12), side="right"))
    else:
        k = int(math.floor(cells / 2.0 + 0.5 - z * math.sqrt(var_iid)))
    if variance_factor > 1.0:
        k = min(k, int(math.floor(cells / 2.0 + 0.5 - z * math.sqrt(var_iid * variance_factor))))
    return max(0, min(k, (cells + 1) // 2))
