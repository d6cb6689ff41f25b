"""Comparison benchmark: the step-time bootstrap against direct resampling, and a full diff.

    .venv/bin/python benchmarks/compare.py [--sizes 100 1000 10000 100000 1000000] [--out benchmarks/results/compare.json]

Bootstrap of the ratio of medians (2000 resamples, two samples of n steps each), peers in the same
run:

- ``torchscope``: ``app.analysis.stats.ratio.bootstrap_ratio_of_medians`` (each resample's median drawn
  as a Beta-distributed order statistic: O(resamples), exact);
- ``direct numpy``: the textbook vectorised bootstrap, a resamples x n index matrix and
  ``np.median(axis=1)`` per side (skipped above ``--direct-max`` steps: it needs 2000 x n x 16
  bytes);
- ``scipy.stats.bootstrap`` (percentile method, vectorised), when scipy is installed.

It also times ``diff_sides`` on the real GPU before/after pair of ../shared/data (traces already
in the columnar cache), the work behind ``torchscope diff`` once the traces are loaded.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.analysis.stats.ratio import bootstrap_ratio_of_medians  # noqa: E402

RESAMPLES = 2000


def _direct(a: np.ndarray, b: np.ndarray, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    ma = np.median(a[rng.integers(0, a.size, size=(RESAMPLES, a.size))], axis=1)
    mb = np.median(b[rng.integers(0, b.size, size=(RESAMPLES, b.size))], axis=1)
    lo, hi = np.quantile(mb / ma, [0.025, 0.975])
    return float(lo), float(hi)


def _scipy(a: np.ndarray, b: np.ndarray) -> tuple[float, float] | None:
    try:
        from scipy import stats
    except ImportError:
        return None

    def ratio(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.median(y, axis=axis) / np.median(x, axis=axis)

    res = stats.bootstrap((a, b), ratio, n_resamples=RESAMPLES, method="percentile", vectorized=True,
                          paired=False, random_state=0)
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _time(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def bench_bootstrap(sizes: list[int], direct_max: int, repeat: int) -> list[dict[str, object]]:
    rows = []
    for n in sizes:
        rng = np.random.default_rng(n)
        a = rng.lognormal(np.log(0.100), 0.05, n)
        b = rng.lognormal(np.log(0.097), 0.05, n)
        t_ours, est = _time(lambda: bootstrap_ratio_of_medians(a, b, resamples=RESAMPLES), repeat)
        row: dict[str, object] = {"n": n, "torchscope_s": t_ours, "torchscope_ci": [est.lo, est.hi]}
        if n <= direct_max:
            t_direct, ci = _time(lambda: _direct(a, b), repeat)
            row.update(direct_s=t_direct, direct_ci=list(ci), speedup_vs_direct=t_direct / t_ours)
        if n <= direct_max:
            t_scipy, ci = _time(lambda: _scipy(a, b), 1)
            if ci is not None:
                row.update(scipy_s=t_scipy, scipy_ci=list(ci), speedup_vs_scipy=t_scipy / t_ours)
        rows.append(row)
        print(json.dumps(row))
    return rows


def bench_diff(repeat: int) -> dict[str, object] | None:
    pair = ROOT.parent / "shared" / "data" / "traces" / "gpu_before_after"
    if not pair.is_dir():
        return None
    from app.analysis.compare.comparison import diff_sides
    from app.workspace.sides import load_side

    t_load, sides = _time(lambda: (load_side(pair / "control.json.gz"), load_side(pair / "test.json.gz")), 1)
    t_diff, cmp = _time(lambda: diff_sides(*sides), repeat)
    row = {"load_both_s": t_load, "diff_sides_s": t_diff, "ops": len(cmp.ops), "kernels": len(cmp.kernels)}
    print(json.dumps(row))
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10_000, 100_000, 1_000_000])
    p.add_argument("--direct-max", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    result = {"bootstrap": bench_bootstrap(args.sizes, args.direct_max, args.repeat), "diff": bench_diff(args.repeat)}
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
