"""Simulation study that chose the step-time interval (docs/compare.md, "Choosing the interval").

Synthetic per-step series, candidate = true ratio x an independent series of the same process:
lognormal base (sigma), a share of slow outliers (x U(1.3, 2)), AR(1) correlation of the log
base, a slow linear drift (the same on both sides). Every method estimates a location ratio that
is scale-equivariant, and for two series that differ by a factor r every such ratio (ratio of
the base distributions' medians, of the mixtures' medians, the Hodges-Lehmann shift of the logs,
the ratio of trimmed geometric means) is r itself: the true ratio is that factor.

Within-run methods (one run per side; coverage of r, power = interval excludes 1 on the right
side, against 5, 10 and 25 % changes):

- ``bootstrap-median``: percentile bootstrap of the ratio of medians (the method before this study);
- ``bca-median``: BCa bootstrap of the log ratio of medians (two-sample jackknife acceleration);
- ``mbb-median``: moving-block bootstrap of the ratio of medians, blocks of ceil(n^(1/3)) steps;
- ``yuen-log``: Welch t on 20 % trimmed means of the logs (Yuen), Welch-Satterthwaite df;
- ``yuen-log-ess``: the same, each side's squared standard error and df (floored at 3) scaled by its serial
  correlation factor (``app.analysis.stats.ratio.estimate_ratio``, the method chosen);
- ``hl-mw``: Hodges-Lehmann shift of the logs, Mann-Whitney interval, iid;
- ``hl-mw-ess``: the same widened for serial correlation (``stats_rank.hodges_lehmann_ratio``).

Replicated runs (2, 3, 5 runs per side with a per-run factor exp(N(0, tau)), tau 3 or 8 %):
``run-t`` (``hierarchical_ratio``), ``hier-bootstrap`` (resample runs, then steps within runs)
and ``pooled-hl-mw-ess`` (every step pooled, runs ignored).

Bootstrap methods use ``--resamples`` (999); the others need none. Every row depends only on its
method and the seeded data of its cell, so ``--methods`` reruns some rows exactly.

    python benchmarks/stats_study.py --out benchmarks/results/stats_study.json   # ~7 min, 2 busy cores
    python benchmarks/stats_study.py --quick                                      # ~1 min
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from statistics import NormalDist

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.analysis.stats import rank as R
from app.analysis.stats import ratio as S
from app.analysis.stats.bootstrap import bootstrap_medians
from app.analysis.stats.dist import mann_whitney_lower_count, t_quantile

SCENARIOS: dict[str, dict[str, float]] = {
    "clean": {"sigma": 0.05, "p_out": 0.0, "rho": 0.0, "drift": 0.0},
    "outliers": {"sigma": 0.10, "p_out": 0.20, "rho": 0.0, "drift": 0.0},
    "heavy": {"sigma": 0.20, "p_out": 0.35, "rho": 0.0, "drift": 0.0},
    "ar0.4": {"sigma": 0.10, "p_out": 0.20, "rho": 0.4, "drift": 0.05},
    "ar0.7": {"sigma": 0.10, "p_out": 0.20, "rho": 0.7, "drift": 0.10},
}
NS = [5, 8, 12, 20, 30, 50, 100, 200, 500]
EFFECTS = [1.0, 1.05, 1.10, 1.25]
HIER_RUNS = [2, 3, 5]
HIER_STEPS = [12, 50]
HIER_TAU = [0.03, 0.08]
HIER_SCENARIO = "ar0.4"
Z = NormalDist()

Interval = tuple[float, float]


def series(rng: np.random.Generator, reps: int, n: int, sc: dict[str, float]) -> np.ndarray:
    """(reps, n) step times of median ~1 in time order."""
    rho = sc["rho"]
    z = rng.standard_normal((reps, n))
    e = np.empty_like(z)
    e[:, 0] = z[:, 0]
    scale = math.sqrt(1.0 - rho * rho)
    for t in range(1, n):
        e[:, t] = rho * e[:, t - 1] + scale * z[:, t]
    log_x = sc["sigma"] * e
    if sc["drift"]:
        log_x += sc["drift"] * (np.arange(n) / max(n - 1, 1) - 0.5)
    x = np.exp(log_x)
    if sc["p_out"]:
        out = rng.random((reps, n)) < sc["p_out"]
        x = np.where(out, x * rng.uniform(1.3, 2.0, (reps, n)), x)
    return x


# --- methods: (baseline, candidate, resamples, seed) -> (lo, hi) of the ratio ---------------


def m_bootstrap(a: np.ndarray, b: np.ndarray, r: int, seed: int) -> Interval:
    e = S.bootstrap_ratio_of_medians(a, b, resamples=r, seed=seed)
    return e.lo, e.hi


def _jackknife_log_medians(x: np.ndarray) -> np.ndarray:
    """Log medians of the n leave-one-out samples (order of sorted x), in O(n log n)."""
    xs = np.sort(x)
    n = xs.size
    i = np.arange(n)[:, None]

    def kept(j: int) -> np.ndarray:  # j-th smallest once the i-th smallest is left out
        return np.where(j < i[:, 0], xs[j], xs[min(j + 1, n - 1)])

    m = n - 1
    med = kept(m // 2) if m % 2 else 0.5 * (kept(m // 2 - 1) + kept(m // 2))
    return np.log(med)


def m_bca(a: np.ndarray, b: np.ndarray, r: int, seed: int) -> Interval:
    theta = math.log(np.median(b)) - math.log(np.median(a))
    boot = np.sort(np.log(bootstrap_medians(b, r, seed)) - np.log(bootstrap_medians(a, r, seed)))
    below = (np.searchsorted(boot, theta, "left") + np.searchsorted(boot, theta, "right")) / 2.0
    z0 = Z.inv_cdf(min(max(below / r, 0.5 / r), 1 - 0.5 / r))
    num = den = 0.0
    for x in (a, b):
        j = _jackknife_log_medians(x)
        u = j.mean() - j
        num += float((u**3).sum()) / x.size**3
        den += float((u**2).sum()) / x.size**2
    acc = num / (6.0 * den**1.5) if den > 0 else 0.0
    out = []
    for q in (0.025, 0.975):
        zq = z0 + Z.inv_cdf(q)
        p = Z.cdf(z0 + zq / (1.0 - acc * zq))
        out.append(math.exp(boot[min(max(int(p * r), 0), r - 1)]))
    return out[0], out[1]


def _mbb_medians(x: np.ndarray, r: int, rng: np.random.Generator) -> np.ndarray:
    n = x.size
    block = max(1, math.ceil(n ** (1 / 3)))
    blocks = math.ceil(n / block)
    starts = rng.integers(0, n - block + 1, (r, blocks))
    idx = (starts[:, :, None] + np.arange(block)).reshape(r, -1)[:, :n]
    v = np.sort(x[idx], axis=1)  # a full sort beats np.median's partition here
    return 0.5 * (v[:, (n - 1) // 2] + v[:, n // 2])


def m_mbb(a: np.ndarray, b: np.ndarray, r: int, seed: int) -> Interval:
    rng = np.random.default_rng(seed)
    ratios = np.sort(_mbb_medians(b, r, rng) / _mbb_medians(a, r, rng))
    k = int(0.025 * r)
    return float(ratios[k]), float(ratios[r - 1 - k])


def _trimmed(x: np.ndarray, cut: float = 0.2) -> tuple[float, float, int]:
    """Trimmed mean, squared standard error (winsorized variance) and effective size."""
    x = np.sort(x)
    n = x.size
    g = int(math.floor(cut * n))
    h = n - 2 * g
    w = np.clip(x, x[g], x[n - 1 - g])
    var_w = float(w.var(ddof=1)) if n > 1 else 0.0
    return float(x[g:n - g].mean()), (n - 1) * var_w / (h * (h - 1)) if h > 1 else math.inf, h


def m_yuen(a: np.ndarray, b: np.ndarray, r: int, seed: int, ess: bool = False) -> Interval:
    la, lb = np.log(a), np.log(b)
    ta, da, ha = _trimmed(la)
    tb, db, hb = _trimmed(lb)
    fa, fb = (S._serial_variance_factor(la), S._serial_variance_factor(lb)) if ess else (1.0, 1.0)
    da, db = da * fa, db * fb
    se2 = da + db
    if not math.isfinite(se2) or se2 <= 0:
        return (math.nan, math.nan)
    df = se2**2 / (da**2 / S._side_df(ha, fa) + db**2 / S._side_df(hb, fb)) if ess else \
        se2**2 / (da**2 / (ha - 1) + db**2 / (hb - 1))
    half = t_quantile(0.975, df) * math.sqrt(se2)
    return math.exp(tb - ta - half), math.exp(tb - ta + half)


def m_yuen_ess(a: np.ndarray, b: np.ndarray, r: int, seed: int) -> Interval:
    e = S.estimate_ratio(a, b)  # the chosen method, as shipped (test: same as m_yuen(ess=True))
    return e.lo, e.hi


def m_hl_iid(a: np.ndarray, b: np.ndarray, r: int, seed: int) -> Interval:
    xa, xb = np.sort(np.log(a)), np.sort(np.log(b))
    cells = a.size * b.size
    k = mann_whitney_lower_count(a.size, b.size, 0.05)
    if k < 1:
        return (math.nan, math.nan)
    lo, hi = R._kth_differences(xa, xb, np.array([k, cells + 1 - k]))
    return math.exp(lo), math.exp(hi)


def m_hl_ess(a: np.ndarray, b: np.ndarray, r: int, seed: int) -> Interval:
    e = R.hodges_lehmann_ratio(a, b)
    return e.lo, e.hi


WITHIN: dict[str, Callable[[np.ndarray, np.ndarray, int, int], Interval]] = {
    "bootstrap-median": m_bootstrap,
    "bca-median": m_bca,
    "mbb-median": m_mbb,
    "yuen-log": m_yuen,
    "yuen-log-ess": m_yuen_ess,
    "hl-mw": m_hl_iid,
    "hl-mw-ess": m_hl_ess,
}


def h_run_t(a: list[np.ndarray], b: list[np.ndarray], r: int, seed: int) -> Interval:
    e = S.hierarchical_ratio(a, b)
    return e.lo, e.hi


def h_bootstrap(a: list[np.ndarray], b: list[np.ndarray], r: int, seed: int) -> Interval:
    rng = np.random.default_rng(seed)

    def side(runs: list[np.ndarray]) -> np.ndarray:
        k = len(runs)
        meds = np.log(np.stack([bootstrap_medians(x, r, seed + i) for i, x in enumerate(runs)]))
        pick = rng.integers(0, k, (r, k))
        return meds[pick, np.arange(r)[:, None]].mean(axis=1)

    d = np.sort(side(b) - side(a))
    k = int(0.025 * r)
    return math.exp(d[k]), math.exp(d[r - 1 - k])


def h_pooled(a: list[np.ndarray], b: list[np.ndarray], r: int, seed: int) -> Interval:
    e = R.hodges_lehmann_ratio(np.concatenate(a), np.concatenate(b))
    return e.lo, e.hi


HIER: dict[str, Callable[[list[np.ndarray], list[np.ndarray], int, int], Interval]] = {
    "run-t": h_run_t,
    "hier-bootstrap": h_bootstrap,
    "pooled-hl-mw-ess": h_pooled,
}


def summarise(intervals: dict[float, np.ndarray]) -> dict[str, object]:
    """Coverage over every effect (equivariant methods: same in distribution), power per effect."""
    covered, total, missing, power = 0, 0, 0, {}
    width = math.nan
    for effect, iv in intervals.items():
        lo, hi = iv[:, 0], iv[:, 1]
        none = ~(np.isfinite(lo) & np.isfinite(hi))
        covered += int((none | ((lo <= effect) & (effect <= hi))).sum())
        missing += int(none.sum())
        total += len(iv)
        if effect == 1.0:
            width = float(np.nanmedian(np.log(hi / lo))) if (~none).any() else math.nan
        else:
            power[f"{effect:.2f}"] = float(((lo > 1.0) & ~none).mean())
    return {"coverage": covered / total, "coverage_reps": total, "power": power,
            "median_log_width": width, "no_interval": missing / total}


def reps_for(reps: int, n: int) -> int:
    """Fewer replications for the long series (the block bootstrap costs O(resamples x n))."""
    return reps if n <= 100 else reps // 2 if n <= 200 else reps // 4


def run_within(reps_max: int, resamples: int, ns: list[int], scenarios: list[str], seed: int,
               methods: list[str]) -> list[dict]:
    rows = []
    for si, name in enumerate(scenarios):
        for n in ns:
            reps = reps_for(reps_max, n)
            rng = np.random.default_rng([seed, si, n])
            data = {e: (series(rng, reps, n, SCENARIOS[name]), e * series(rng, reps, n, SCENARIOS[name]))
                    for e in EFFECTS}
            t0 = time.perf_counter()
            for method in methods:
                fn = WITHIN[method]
                ivs = {e: np.array([fn(a[i], b[i], resamples, i) for i in range(reps)])
                       for e, (a, b) in data.items()}
                rows.append({"scenario": name, "n": n, "method": method, **summarise(ivs)})
            print(f"  {name:9s} n={n:4d}  {time.perf_counter() - t0:6.1f} s", file=sys.stderr, flush=True)
    return rows


def run_hier(reps: int, resamples: int, seed: int, runs_list: list[int], steps_list: list[int],
             taus: list[float]) -> list[dict]:
    rows = []
    sc = SCENARIOS[HIER_SCENARIO]
    for k in runs_list:
        for n in steps_list:
            for tau in taus:
                rng = np.random.default_rng([seed, 99, k, n, int(tau * 1000)])

                def side(effect: float) -> np.ndarray:  # (reps, k, n)
                    x = series(rng, reps * k, n, sc).reshape(reps, k, n)
                    return effect * x * np.exp(tau * rng.standard_normal((reps, k, 1)))

                data = {e: (side(1.0), side(e)) for e in EFFECTS}
                t0 = time.perf_counter()
                for method, fn in HIER.items():
                    ivs = {e: np.array([fn(list(a[i]), list(b[i]), resamples, i) for i in range(reps)])
                           for e, (a, b) in data.items()}
                    rows.append({"runs": k, "steps": n, "tau": tau, "method": method, **summarise(ivs)})
                took = time.perf_counter() - t0
                print(f"  hier k={k} n={n} tau={tau}  {took:6.1f} s", file=sys.stderr, flush=True)
    return rows


def run_issue_case(reps: int, resamples: int, seed: int, methods: list[str]) -> list[dict]:
    """Issue 10's 12-step case drawn at random: slow run U(150, 188) ms every step; fast run
    U(118, 127) ms except its steps 0, 3, 6, 9 (the first of each profiled span) at U(163, 203).
    Here the sides differ in shape, so the methods' targets differ: reported is how often each
    calls the right sign (interval below 1) and its median ratio."""
    rng = np.random.default_rng([seed, 10])
    slow = rng.uniform(0.150, 0.188, (reps, 12))
    fast = rng.uniform(0.118, 0.127, (reps, 12))
    fast[:, [0, 3, 6, 9]] = rng.uniform(0.163, 0.203, (reps, 4))
    rows = []
    for method in methods:
        iv = np.array([WITHIN[method](slow[i], fast[i], resamples, i) for i in range(reps)])
        rows.append({"method": method, "faster_called": float((iv[:, 1] < 1.0).mean()),
                     "median_hi": float(np.nanmedian(iv[:, 1])), "median_lo": float(np.nanmedian(iv[:, 0]))})
    return rows


def _cell(row: dict) -> str:
    p = row["power"]
    power = ", ".join(f"{100 * p[e]:.0f}" for e in ("1.05", "1.10", "1.25"))
    return f"{100 * row['coverage']:.1f} / {power}"


def markdown(within: list[dict], hier: list[dict], issue: list[dict] | None = None) -> str:
    lines = []
    methods = list(dict.fromkeys(r["method"] for r in within))
    for name in dict.fromkeys(r["scenario"] for r in within):
        lines += [f"\n{name}: coverage % / power % at 1.05, 1.10, 1.25", "",
                  "| n | " + " | ".join(methods) + " |", "| --- |" + " --- |" * len(methods)]
        for n in dict.fromkeys(r["n"] for r in within):
            cells = []
            for m in methods:
                r = next(x for x in within if x["scenario"] == name and x["n"] == n and x["method"] == m)
                cells.append(_cell(r))
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
    if hier:
        hm = list(dict.fromkeys(r["method"] for r in hier))
        lines += ["\nreplicated runs: coverage % / power % at 1.05, 1.10, 1.25", "",
                  "| runs | steps | tau | " + " | ".join(hm) + " |",
                  "| --- | --- | --- |" + " --- |" * len(hm)]
        for key in dict.fromkeys((r["runs"], r["steps"], r["tau"]) for r in hier):
            cells = []
            for m in hm:
                r = next(x for x in hier if (x["runs"], x["steps"], x["tau"]) == key and x["method"] == m)
                cells.append(_cell(r))
            lines.append(f"| {key[0]} | {key[1]} | {key[2]:.2f} | " + " | ".join(cells) + " |")
    if issue:
        lines += ["\nissue 10's 12-step case: share of draws whose interval lies below 1 (median lo-hi)", "",
                  "| method | faster called | median interval |", "| --- | --- | --- |"]
        lines += [f"| {r['method']} | {100 * r['faster_called']:.0f} % "
                  f"| {r['median_lo']:.3f}-{r['median_hi']:.3f} |" for r in issue]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=400, help="replications per cell and effect size")
    ap.add_argument("--hier-reps", type=int, default=400)
    ap.add_argument("--resamples", type=int, default=999, help="bootstrap resamples (bootstrap methods only)")
    ap.add_argument("--ns", type=int, nargs="+", default=NS, help="steps per side")
    ap.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    ap.add_argument("--methods", nargs="+", default=list(WITHIN), choices=list(WITHIN),
                    help="within-run methods (rows do not depend on which others run)")
    ap.add_argument("--no-hier", action="store_true", help="skip the replicated-runs cells")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="~1 minute: 40 reps, n 5/12/50/200, 299 resamples")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    hier_runs, hier_steps, taus = HIER_RUNS, HIER_STEPS, HIER_TAU
    if args.quick:
        args.reps, args.hier_reps, args.resamples, args.ns = 40, 40, 299, [5, 12, 50, 200]
        hier_runs, hier_steps, taus = [2, 3], [12], [0.03, 0.08]
    t0 = time.perf_counter()
    within = run_within(args.reps, args.resamples, args.ns, args.scenarios, args.seed, args.methods)
    hier = [] if args.no_hier else run_hier(args.hier_reps, args.resamples, args.seed,
                                            hier_runs, hier_steps, taus)
    issue = run_issue_case(args.reps, args.resamples, args.seed, args.methods)
    elapsed = time.perf_counter() - t0
    print(markdown(within, hier, issue))
    print(f"\n{elapsed:.0f} s", file=sys.stderr)
    if args.out:
        config = {"reps": args.reps, "hier_reps": args.hier_reps, "resamples": args.resamples, "ns": args.ns,
                  "scenarios": {k: SCENARIOS[k] for k in args.scenarios}, "effects": EFFECTS,
                  "outlier_factor": [1.3, 2.0], "hier_scenario": HIER_SCENARIO, "hier_runs": hier_runs,
                  "hier_steps": hier_steps, "hier_tau": taus, "seed": args.seed, "confidence": 0.95}
        result = {"config": config, "within": within, "hierarchical": hier, "issue_case": issue,
                  "elapsed_s": round(elapsed, 1)}
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
