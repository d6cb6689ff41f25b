"""How often the straggler verdict names a rank when there is none (A/A), and finds a slowed rank (A/B).

Two studies, both through the same functions `analyze` uses (`rank_summary`, then `find_straggler`):

- **Simulated** (``--trials`` rank sets per case, seeds 0…): a DDP-like job in which every rank
  computes ``--buckets`` gradient buckets per step and all-reduces each one (an all-reduce ends when
  the last rank has arrived, plus its transfer), then steps its optimizer. Each rank has its own
  clock offset. Noise models: ``gauss`` (each bucket's compute varies, CV 5 %), ``heavy`` (CV 2 %,
  and in 5 % of a rank's steps a hiccup of 20–60 % of a step, as a descheduled process or a page
  fault storm gives), ``sched`` (an oversubscribed CPU: each bucket waits an exponential time, mean
  10 % of a bucket), ``exit`` (as ``gauss``, and in 10 % of a rank's steps one of its exits is
  recorded 20–60 % of a step late, as a profiler thread descheduled after the collective ended
  gives; the rank itself goes on). A slowed rank computes ``δ`` longer in every step (``constant``) or ``2δ`` in
  half of them (``intermittent``). ``basis step``: the same jobs without their collectives (the
  verdict then reads step boundaries).
- **Real** (``--real-runs N``): ``torchscope run -- torchrun --nproc_per_node 4
  tests/agent/ddp_job.py`` (``--real-ranks`` processes instead of 4; gloo on CPU, ``--active``
  profiled steps, 3 by default), ``N`` times per ``--slow-ms`` value (0 is A/A: identical ranks, on
  however many cores the machine has).

Reports, per case: the false-positive rate (A/A: any rank named) or the power (the slowed rank
named), and how often another rank was named instead, with Wilson 95 % intervals; ``before``: the
same for the verdict without its consistency test (score ≥ 0.5 and lateness ≥ 2 % of a step only).

    python -m benchmarks.straggler_power --out benchmarks/results/straggler_power.json
    python -m benchmarks.straggler_power --trials 0 --real-runs 12 --slow-ms 0 2 5 20 --out r.json
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.analysis.trace.ranks import (
    CollectiveArrival,
    RankStepSummary,
    StepTimes,
    find_straggler,
    leading_rank,
    looks_late,
    rank_summary,
)

ROOT = Path(__file__).resolve().parents[1]
STEP_US = 10_000.0  # the compute of one step
COMM_US = 300.0  # one bucket's all-reduce once every rank has arrived
OPT_US = 500.0  # the optimizer step after the last all-reduce
NOISES = ("gauss", "heavy", "sched", "exit")


@dataclass(frozen=True)
class Case:
    ranks: int
    steps: int
    noise: str
    slow: float  # δ: the slowed rank's extra compute, a share of a step (0: A/A)
    pattern: str = "constant"  # or "intermittent"
    basis: str = "collective"  # or "step": the same job without collectives
    buckets: int = 4

    def label(self) -> str:
        kind = "A/A" if self.slow == 0 else f"+{self.slow:.0%} {self.pattern}"
        return f"{self.ranks} ranks, {self.steps} steps, {self.noise}, {self.basis}, {kind}"


def _compute(rng: np.random.Generator, noise: str, ranks: int, buckets: int) -> np.ndarray:
    """(ranks, buckets) compute times of one step, µs."""
    per = STEP_US / buckets
    if noise in ("gauss", "exit"):
        return per * np.clip(1 + 0.05 * rng.standard_normal((ranks, buckets)), 0.5, None)
    if noise == "heavy":
        c = per * np.clip(1 + 0.02 * rng.standard_normal((ranks, buckets)), 0.5, None)
        hit = rng.random(ranks) < 0.05
        where = rng.integers(0, buckets, ranks)
        c[hit, where[hit]] += STEP_US * rng.uniform(0.2, 0.6, int(hit.sum()))
        return c
    if noise == "sched":
        return per + rng.exponential(0.1 * per, (ranks, buckets))
    raise ValueError(f"unknown noise {noise!r}")


def simulate(case: Case, seed: int, slow_rank: int | None = None) -> dict[int, RankStepSummary]:
    """One simulated rank set (module docstring); ``slow_rank`` defaults to ranks // 3."""
    rng = np.random.default_rng(seed)
    r_n, k_n = case.ranks, case.buckets
    slow_rank = r_n // 3 if slow_rank is None else slow_rank
    offsets = rng.normal(0.0, 20_000.0, r_n)  # each rank's clock
    start = np.full(r_n, 0.0)
    steps: list[list[StepTimes]] = [[] for _ in range(r_n)]
    colls: list[list[CollectiveArrival]] = [[] for _ in range(r_n)]
    for s in range(case.steps):
        c = _compute(rng, case.noise, r_n, k_n)
        if case.slow and (case.pattern == "constant" or s % 2 == 0):
            c[slow_rank] += STEP_US * case.slow * (1 if case.pattern == "constant" else 2) / k_n
        arrive = start[:, None] + np.cumsum(c, axis=1)
        exits = np.empty(k_n)
        last = -math.inf
        for k in range(k_n):
            last = max(float(arrive[:, k].max()), last) + COMM_US
            exits[k] = last
        leave = exits[None, :] + rng.uniform(0, 5.0, (r_n, k_n))  # exits are simultaneous, to a few µs
        wait = np.sum(leave - arrive, axis=1)
        if case.noise == "exit":  # a rank's exit recorded late now and then; its thread goes on
            hit = rng.random(r_n) < 0.1
            leave[hit, rng.integers(0, k_n, r_n)[hit]] += STEP_US * rng.uniform(0.2, 0.6, int(hit.sum()))
        end = exits[-1] + OPT_US * (1 + 0.02 * rng.standard_normal(r_n))
        for r in range(r_n):
            steps[r].append(StepTimes(step=s + 1, start_us=start[r] + offsets[r], end_us=end[r] + offsets[r],
                                      compute_us=float(c[r].sum()), communication_us=float(wait[r]), overlap_us=0.0,
                                      dataloader_us=0.0, host_us=OPT_US, other_us=0.0))
            if case.basis == "collective":
                colls[r] += [CollectiveArrival("allreduce", s + 1, k, float(arrive[r, k] + offsets[r]),
                                               float(leave[r, k] + offsets[r])) for k in range(k_n)]
        start = end
    return {r: RankStepSummary(rank=r, steps=tuple(steps[r]), collectives=tuple(colls[r]), device=True)
            for r in range(r_n)}


def wilson(hits: int, n: int) -> tuple[float, float]:
    """The Wilson score 95 % interval of a proportion."""
    if n == 0:
        return (0.0, 1.0)
    z, p = 1.959964, hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def _verdicts(rows: list[dict[str, Any]]) -> tuple[int | None, int | None]:
    """(the rank named now, the rank the verdict named before its consistency test: score and lateness only)."""
    top, lead = find_straggler(rows), leading_rank(rows)
    before = lead is not None and looks_late(lead)
    return (None if top is None else int(top["rank"]), int(lead["rank"]) if before and lead is not None else None)


def _tally(named: list[int | None], slow_rank: int | None) -> dict[str, Any]:
    n = len(named)
    right = sum(r is not None and r == slow_rank for r in named)
    wrong = sum(r is not None and r != slow_rank for r in named)
    out: dict[str, Any] = {"trials": n, "named_wrong_rank": wrong, "wrong_rate": wrong / n if n else None}
    if slow_rank is None:
        out |= {"false_positives": wrong, "false_positive_rate": wrong / n if n else None,
                "fpr_ci95": wilson(wrong, n)}
    else:
        out |= {"found": right, "power": right / n if n else None, "power_ci95": wilson(right, n)}
    return out


SHAPES = ((2, 3), (4, 3), (4, 10), (8, 5), (64, 5), (256, 5))  # (ranks, steps)
QUICK_SHAPES = ((4, 3), (4, 10), (8, 5))


def simulated_cases(quick: bool, noises: tuple[str, ...] = NOISES,
                    shapes: tuple[tuple[int, int], ...] | None = None) -> Iterator[Case]:
    for ranks, steps in shapes or (QUICK_SHAPES if quick else SHAPES):
        for noise in noises:
            for slow in (0.0, 0.02, 0.05, 0.1, 0.3):
                yield Case(ranks, steps, noise, slow)
            yield Case(ranks, steps, noise, 0.1, pattern="intermittent")
            yield Case(ranks, steps, noise, 0.0, basis="step")
            yield Case(ranks, steps, noise, 0.1, basis="step")


def run_simulated(trials: int, quick: bool, noises: tuple[str, ...] = NOISES,
                  shapes: tuple[tuple[int, int], ...] | None = None) -> list[dict[str, Any]]:
    rows = []
    for case in simulated_cases(quick, noises, shapes):
        slow_rank = case.ranks // 3 if case.slow else None
        named, before = [], []
        for seed in range(trials):
            now, then = _verdicts(rank_summary(simulate(case, seed)))
            named.append(now)
            before.append(then)
        rows.append({"case": case.label(), **case.__dict__, **_tally(named, slow_rank),
                     "before": _tally(before, slow_rank)})
        _print_row(rows[-1])
    return rows


def _outcome(t: dict[str, Any]) -> str:
    if t.get("false_positive_rate") is not None:
        lo, hi = t["fpr_ci95"]
        return f"false positives {t['false_positives']}/{t['trials']} ({lo:.0%}–{hi:.0%})"
    lo, hi = t["power_ci95"]
    return f"found {t['found']}/{t['trials']} ({lo:.0%}–{hi:.0%}), wrong rank {t['named_wrong_rank']}"


def _print_row(row: dict[str, Any]) -> None:
    print(f"{row['case']:<58} {_outcome(row):<42} before: {_outcome(row['before'])}", flush=True)


def _record(store: Path, slow_ms: float, i: int, active: int, ranks: int = 4) -> Path:
    """One real run of ``ranks`` ranks (rank 2 slowed by ``slow_ms`` per step, ``active`` profiled steps); returns its folder."""
    torchrun = Path(sys.executable).parent / "torchrun"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHSCOPE_")} | {"PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "app", "run", "--root", str(store), "--name", f"r{ranks}-ms{slow_ms:g}-{i}",
            "--wait", "1", "--warmup", "1", "--active", str(active), "--", str(torchrun), "--standalone",
            "--nproc_per_node", str(ranks),
            str(ROOT / "tests" / "agent" / "ddp_job.py"), "--steps", str(active + 3), "--lr", "0.2", "--slow-rank", "2",
            "--slow-ms", str(slow_ms)]
    proc = subprocess.run(args, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"torchscope run failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    line = [ln for ln in proc.stderr.splitlines() if "→" in ln][-1]
    return Path(line.rsplit("→", 1)[1].strip())


def _rank_rows(run: Path) -> list[dict[str, Any]]:
    out = subprocess.run([sys.executable, "-m", "app", "analyze", "--json", "--no-cache", str(run)],
                         capture_output=True, text=True, cwd=ROOT, check=True).stdout
    return list(json.loads(out)["rank_summary"])


def run_real(n: int, slow_values: list[float], store: Path, active: int, n_ranks: int = 4) -> list[dict[str, Any]]:
    rows = []
    for slow_ms in slow_values:
        named, before, steps, t0 = [], [], [], time.perf_counter()
        for i in range(n):
            ranks = _rank_rows(_record(store, slow_ms, i, active, n_ranks))
            now, then = _verdicts(ranks)
            named.append(now)
            before.append(then)
            steps.append(float(np.median([r["step_time_s"] for r in ranks])))
        row = {"case": f"real torchrun, {n_ranks} ranks, {active} steps, {'A/A' if slow_ms == 0 else f'rank 2 +{slow_ms:g} ms'}",
               "slow_ms": slow_ms, "active": active, "median_step_s": float(np.median(steps)), "named": named,
               "wall_s": time.perf_counter() - t0, **_tally(named, 2 if slow_ms else None),
               "before": _tally(before, 2 if slow_ms else None), "named_before": before}
        rows.append(row)
        _print_row(row)
    return rows


def _shapes(p: argparse.ArgumentParser, given: list[str] | None) -> tuple[tuple[int, int], ...] | None:
    if not given:
        return None
    try:
        out = tuple((int(r), int(s)) for r, s in (g.lower().split("x") for g in given))
    except ValueError:
        p.error(f"--shape takes RANKSxSTEPS, e.g. 64x5 (got {' '.join(given)})")
    if any(r < 2 or s < 1 for r, s in out):
        p.error("--shape needs at least 2 ranks and 1 step")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--trials", type=int, default=400, help="simulated rank sets per case (0: none)")
    p.add_argument("--quick", action="store_true", help="fewer simulated cases (4 ranks x 3 and 10 steps, 8 x 5)")
    p.add_argument("--noise", nargs="+", choices=NOISES, default=list(NOISES), help="simulated noise models")
    p.add_argument("--shape", nargs="+", default=None, metavar="RANKSxSTEPS",
                   help="simulated rank sets, e.g. 64x5 (default: 2x3 4x3 4x10 8x5 64x5 256x5; --quick: 4x3 4x10 8x5)")
    p.add_argument("--real-runs", type=int, default=0, help="real torchrun runs per --slow-ms value")
    p.add_argument("--slow-ms", type=float, nargs="+", default=[0.0, 2.0, 5.0, 20.0])
    p.add_argument("--active", type=int, default=3, help="profiled steps of each real run")
    p.add_argument("--real-ranks", type=int, default=4, help="ranks (torchrun processes) of each real run")
    p.add_argument("--store", type=Path, default=None, help="where the real runs are recorded (default: a temporary folder)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    shapes = _shapes(p, args.shape)
    simulated = run_simulated(args.trials, args.quick, tuple(args.noise), shapes) if args.trials else []
    result: dict[str, Any] = {"simulated": simulated}
    if args.real_runs:
        with tempfile.TemporaryDirectory() as tmp:
            result["real"] = run_real(args.real_runs, args.slow_ms, args.store or Path(tmp), args.active,
                                      args.real_ranks)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
