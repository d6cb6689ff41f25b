"""Curve downsampling benchmark: torchscope's min/max buckets vs a stride sample and tsdownsample.

    .venv/bin/pip install -r benchmarks/requirements.txt      # tsdownsample, benchmark only
    .venv/bin/python benchmarks/curves.py --sizes 100000 1000000 10000000 [--out benchmarks/results/curves.json]

For each size a loss-like curve is generated (a decaying noisy random walk, seeded) with
``--spikes`` single-point spikes (half up, half down) at random places. Every method reduces it
to ``--points`` points; we report the median time of ``--repeat`` runs, the points kept,
whether the global minimum and maximum survive and how many of the spikes survive. Peers in the
same run:

- ``stride``: ``y[::n // points]``, what a naive chart does;
- ``tsdownsample <name>``: the Rust downsamplers behind plotly-resampler (MinMax, M4, LTTB,
  MinMaxLTTB), when the package is installed.

It also times the full ``compute_curve`` (debiased EMA over every point + downsampling), the
call the Metrics tab makes per curve.
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

from app.analysis.curves.smoothing import compute_curve, minmax_downsample_indices  # noqa: E402


def make_curve(n: int, spikes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Return (values, spike positions): a decaying noisy loss with isolated spikes."""
    rng = np.random.default_rng(seed)
    steps = np.arange(n, dtype=np.float64)
    y = 2.0 / (1.0 + steps / (n / 50)) + np.cumsum(rng.normal(0, 0.002, n)) * 0.01 + rng.normal(0, 0.05, n)
    where = rng.choice(n, size=spikes, replace=False)
    y[where[: spikes // 2]] += 10.0
    y[where[spikes // 2:]] -= 10.0
    return y, where


def methods(points: int) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    out: dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "torchscope_minmax": lambda y: minmax_downsample_indices(y, points),
        "stride": lambda y: np.arange(0, len(y), max(1, len(y) // points)),
    }
    try:
        from tsdownsample import LTTBDownsampler, M4Downsampler, MinMaxDownsampler, MinMaxLTTBDownsampler
    except ImportError:
        return out
    # tsdownsample wants n_out even (MinMax) or a multiple of 4 (M4).
    n_out = points - points % 4
    for name, cls in (("minmax", MinMaxDownsampler), ("m4", M4Downsampler), ("lttb", LTTBDownsampler),
                      ("minmaxlttb", MinMaxLTTBDownsampler)):
        out[f"tsdownsample_{name}"] = lambda y, cls=cls: cls().downsample(y, n_out=n_out)
    return out


def measure(fn: Callable[[np.ndarray], np.ndarray], y: np.ndarray, spikes: np.ndarray, repeat: int) -> dict:
    times = []
    idx = np.asarray([])
    for _ in range(repeat):
        t0 = time.perf_counter()
        idx = np.asarray(fn(y))
        times.append(time.perf_counter() - t0)
    kept = y[idx]
    return {
        "seconds": statistics.median(times),
        "points": int(len(idx)),
        "keeps_min_and_max": bool(kept.min() == y.min() and kept.max() == y.max()),
        "spikes_kept": int(np.isin(spikes, idx).sum()),
        "spikes": int(len(spikes)),
    }


def run(sizes: list[int], points: int, spikes: int, repeat: int) -> dict:
    import pandas as pd

    results: dict = {"points": points, "spikes": spikes, "repeat": repeat, "sizes": {}}
    for n in sizes:
        y, where = make_curve(n, spikes)
        row = {name: measure(fn, y, where, repeat) for name, fn in methods(points).items()}
        metrics = pd.DataFrame({"step": np.arange(n), "time": np.arange(n) * 0.05, "rank": 0, "loss": y})
        t0 = time.perf_counter()
        curve = compute_curve(metrics, "loss", smoothing=0.9, max_points=points)
        row["compute_curve_with_ema"] = {"seconds": time.perf_counter() - t0, "points": int(len(curve))}
        results["sizes"][str(n)] = row
        base = row["torchscope_minmax"]["seconds"]
        print(f"n={n:,}")
        for name, r in row.items():
            extra = (f"  min/max {'yes' if r['keeps_min_and_max'] else 'NO '}  spikes {r['spikes_kept']}/{r['spikes']}"
                     if "spikes" in r else "")
            print(f"  {name:28s} {r['seconds'] * 1000:9.2f} ms  ×{r['seconds'] / base:6.2f}  "
                  f"{r['points']:6d} pts{extra}")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--points", type=int, default=4000, help="points per curve after downsampling (4000)")
    parser.add_argument("--spikes", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = run(args.sizes, args.points, args.spikes, args.repeat)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
