"""Simulation study that chose the interval of inference latency quantiles (docs/compare.md, "Inference latency").

Synthetic per-call latencies, candidate = true ratio x an independent series of the same process:
lognormal base (sigma 0.15), a share of slow calls (x U(2, 5): a page fault, a preempted thread),
and in the ``ar`` scenarios AR(1) correlation of the log base and slow calls that come in
episodes (contention lasts several calls). Scaling a series by r scales each of its quantiles by
r, so the true ratio of the p50, p90 and p99 is r itself.

Methods (``app.analysis.compare.latency``): ``bootstrap`` (percentile, iid), ``block_bootstrap``
(moving blocks of ceil(n^(1/3)) calls), ``maritz_jarrett`` (normal interval of the log ratio
with each side's Maritz–Jarrett standard error) and ``order_statistic`` (each side's binomial
order-statistic interval at sqrt(95 %), divided). Coverage of r at nominal 95 %, power = the
interval excludes 1 on the right side, against 5, 10 and 25 % slower candidates. Because every
method is scale-equivariant, one pair of samples per replicate serves every effect size.

    python benchmarks/latency_study.py --out benchmarks/results/latency_study.json   # ~2 min, 2 busy cores
    python benchmarks/latency_study.py --quick                                        # ~20 s
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.analysis.compare import latency as L
from app.analysis.stats.dist import normal_quantile

SCENARIOS: dict[str, dict[str, float]] = {
    "iid": {"sigma": 0.15, "p_slow": 0.03, "rho": 0.0, "episode": 1},
    "ar0.5": {"sigma": 0.15, "p_slow": 0.03, "rho": 0.5, "episode": 8},
}
NS = [100, 300, 1000]
EFFECTS = [1.05, 1.10, 1.25]
CONFIDENCE = 0.95


def series(n: int, rng: np.random.Generator, sigma: float, p_slow: float, rho: float, episode: float) -> np.ndarray:
    """One run's latencies (seconds, median about 1 ms)."""
    e = rng.normal(0.0, sigma, n)
    if rho:
        z = np.empty(n)
        z[0] = e[0]
        scale = math.sqrt(1 - rho * rho)
        for i in range(1, n):
            z[i] = rho * z[i - 1] + scale * e[i]
        e = z
    slow = np.ones(n)
    starts = np.flatnonzero(rng.random(n) < p_slow / episode)
    for s in starts:
        k = int(rng.integers(1, 2 * episode)) if episode > 1 else 1
        slow[s:s + k] = rng.uniform(2.0, 5.0)
    out: np.ndarray = 1e-3 * np.exp(e) * slow
    return out


def _intervals(a: np.ndarray, b: np.ndarray, method: str, resamples: int, rng: np.random.Generator
               ) -> dict[float, tuple[float, float]]:
    """(lo, hi) of the ratio b/a per quantile (effect 1); NaN where the method gives none."""
    out: dict[float, tuple[float, float]] = {}
    alpha = (1 - CONFIDENCE) / 2
    if method == "block_bootstrap":
        ra, rb = L._block_quantiles(a, L.QUANTILES, resamples, rng), L._block_quantiles(b, L.QUANTILES, resamples, rng)
        for i, q in enumerate(L.QUANTILES):
            r = rb[i] / ra[i]
            out[q] = float(np.quantile(r, alpha)), float(np.quantile(r, 1 - alpha))
        return out
    for q in L.QUANTILES:
        if method == "bootstrap":
            r = L._boot_quantiles(b, q, resamples, rng) / L._boot_quantiles(a, q, resamples, rng)
            out[q] = float(np.quantile(r, alpha)), float(np.quantile(r, 1 - alpha))
        elif method == "maritz_jarrett":
            qa, qb = L._order_value(a, q), L._order_value(b, q)
            se = math.hypot(L._mj_se(a, q) / qa, L._mj_se(b, q) / qb)
            z = normal_quantile(0.5 + CONFIDENCE / 2)
            c = math.log(qb / qa)
            out[q] = math.exp(c - z * se), math.exp(c + z * se)
        else:
            la, ha = L._os_interval(a, q, math.sqrt(CONFIDENCE))
            lb, hb = L._os_interval(b, q, math.sqrt(CONFIDENCE))
            out[q] = lb / ha, hb / la
    return out


def run_cell(scenario: str, n: int, method: str, reps: int, resamples: int, seed: int) -> list[dict[str, object]]:
    """Coverage and power of one method on one scenario and size, for every quantile."""
    p = SCENARIOS[scenario]
    data_rng = np.random.default_rng([seed, n, list(SCENARIOS).index(scenario)])
    boot_rng = np.random.default_rng([seed, n, 99])
    covered = dict.fromkeys(L.QUANTILES, 0)
    missing = dict.fromkeys(L.QUANTILES, 0)
    power = {(q, e): 0 for q in L.QUANTILES for e in EFFECTS}
    widths: dict[float, list[float]] = {q: [] for q in L.QUANTILES}
    for _ in range(reps):
        a = series(n, data_rng, **p)
        b = series(n, data_rng, **p)
        for q, (lo, hi) in _intervals(a, b, method, resamples, boot_rng).items():
            if not (math.isfinite(lo) and math.isfinite(hi)):
                missing[q] += 1
                continue
            covered[q] += lo <= 1.0 <= hi
            widths[q].append(math.log(hi / lo))
            for e in EFFECTS:
                power[(q, e)] += e * lo > 1.0
    rows: list[dict[str, object]] = []
    for q in L.QUANTILES:
        ok = reps - missing[q]
        rows.append({"scenario": scenario, "n": n, "method": method, "quantile": q, "reps": reps,
                     "no_interval": missing[q] / reps,
                     "coverage": covered[q] / ok if ok else None,
                     "median_log_width": float(np.median(widths[q])) if widths[q] else None,
                     **{f"power_{round((e - 1) * 100)}": power[(q, e)] / reps for e in EFFECTS}})
    return rows


def table(rows: list[dict[str, object]]) -> str:
    """Markdown table for docs/compare.md."""
    head = "| scenario | n | quantile | method | coverage | power +5 % | power +10 % | power +25 % |"
    lines = [head, "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        cov = "—" if r["coverage"] is None else f"{r['coverage']:.3f}"
        lines.append(f"| {r['scenario']} | {r['n']} | p{round(float(r['quantile']) * 100)} | {r['method']} | {cov} | "
                     f"{r['power_5']:.2f} | {r['power_10']:.2f} | {r['power_25']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--resamples", type=int, default=499)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="80 replicates, n 100 and 300")
    ap.add_argument("--methods", default=",".join(L.METHODS))
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    reps, ns = (80, NS[:2]) if a.quick else (a.reps, NS)
    t0 = time.perf_counter()
    rows: list[dict[str, object]] = []
    for scenario in SCENARIOS:
        for n in ns:
            for method in a.methods.split(","):
                rows.extend(run_cell(scenario, n, method, reps, a.resamples, a.seed))
    rows.sort(key=lambda r: (str(r["scenario"]), int(r["n"]), float(r["quantile"]), str(r["method"])))  # type: ignore[call-overload]
    print(table(rows))
    print(f"\n{len(rows)} rows in {time.perf_counter() - t0:.0f} s")
    if a.out:
        a.out.write_text(json.dumps({"confidence": CONFIDENCE, "reps": reps, "resamples": a.resamples,
                                     "seed": a.seed, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
