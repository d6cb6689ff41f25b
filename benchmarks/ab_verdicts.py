"""A/A and power of Torchscope's verdicts: identical runs must come out `same`, real slowdowns `slower`.

    python -m benchmarks.ab_verdicts                      # every part, issue 10's sizes (~20-30 min)
    python -m benchmarks.ab_verdicts --parts aa hog       # some parts only
    python -m benchmarks.ab_verdicts --quick              # 1 pair per part, short jobs: a smoke test

Every run is a real ``torchscope run`` of ``benchmarks/ab_job.py`` (a tiny MLP, ~25 ms steps,
one thread) into a fresh temporary store; every verdict is what a user gets from
``torchscope diff A B --json --fail-if-slower 5`` or ``torchscope ab ... --json``. Parts:

- ``aa``: pairs of identical single runs on a quiet machine -> counts of same / inconclusive /
  faster / slower, and how many pairs the gate ``--fail-if-slower 5`` fails (target: same >= 9
  of 10, inconclusive <= 1, no gate failure);
- ``hog``: identical pairs with busy-loop processes (one per core, not pinned) running during one
  side only, the hogged side alternating -> never faster or slower;
- ``power``: single-run pairs, candidate with a 25 % injected per-step slowdown -> slower in >= 18 of 20;
- ``interleaved``: ``torchscope ab`` with 3 runs per side, candidate +15 % -> slower in >= 8 of 10.

The A/A part also yields the run-to-run margin: the 95th percentile of |log(ratio)| over its
pairs, to set against ``RUN_TO_RUN_MARGIN`` (app.analysis.stats.ratio). In single-run pairs the side
that runs first alternates. Results go to benchmarks/results/ab_verdicts.json and a markdown
table on stdout. Hogs and children run in their own process groups and are always killed.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
JOB = "benchmarks/ab_job.py"
PARTS = ("aa", "hog", "power", "interleaved")
VERDICTS = ("same", "inconclusive", "faster", "slower")
GATE_PCT = 5.0
CHILD_TIMEOUT_S = 600


@dataclass(frozen=True)
class Part:
    """One part of the benchmark: how many pairs, what the candidate does, and the acceptance target."""

    name: str
    pairs: int
    slowdown_pct: float
    target: str
    hog: bool = False
    replicates: int = 1


def parts_for(args: argparse.Namespace) -> list[Part]:
    n = args.pairs
    table = {
        "aa": Part("aa", n or 10, 0.0, "same >= 90 %, inconclusive <= 10 %, no gate failure"),
        "hog": Part("hog", n or 10, 0.0, "never faster or slower", hog=True),
        "power": Part("power", n or 20, 25.0, "slower >= 90 %"),
        "interleaved": Part("interleaved", n or 10, 15.0, "slower >= 80 %", replicates=args.replicates),
    }
    return [table[p] for p in args.parts]


# --- child processes: each in its own process group, always killed -------------------------------

_LIVE: set[subprocess.Popen[bytes]] = set()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    # The whole group: a launcher that is gone may leave its job (or the job's workers) behind.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    _LIVE.discard(proc)


def kill_all() -> None:
    for proc in list(_LIVE):
        _kill(proc)


def _spawn(argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, start_new_session=True, **kw)
    _LIVE.add(proc)
    return proc


def _call(argv: list[str]) -> tuple[int, str, str]:
    """Run ``argv`` to the end (killed after CHILD_TIMEOUT_S); return (exit code, stdout, stderr)."""
    proc = _spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _kill(proc)
        return 124, "", f"timed out after {CHILD_TIMEOUT_S} s: {shlex.join(argv)}"
    finally:
        _kill(proc)
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


class Hog:
    """``count`` busy-loop processes for the duration of a ``with`` block (killed on exit, whatever happens)."""

    def __init__(self, count: int, *, pin: bool = False) -> None:
        self.count = count
        self.pin = pin  # hog k on core k % cpus, instead of wherever the scheduler puts it
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Hog:
        cpus = sorted(os.sched_getaffinity(0))
        for k in range(self.count):
            pin = f"import os; os.sched_setaffinity(0, {{{cpus[k % len(cpus)]}}}); " if self.pin else ""
            self.procs.append(_spawn([sys.executable, "-c", f"{pin}\nwhile True: pass"]))
        time.sleep(0.5)  # let the scheduler see them before the job starts
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            _kill(proc)


# --- one pair ------------------------------------------------------------------------------------

def job_command(args: argparse.Namespace, slowdown_pct: float) -> list[str]:
    cmd = [sys.executable, JOB, "--steps", str(args.steps)]
    return [*cmd, "--slowdown", f"{slowdown_pct:g}"] if slowdown_pct else cmd


def _run_options(args: argparse.Namespace, store: Path) -> list[str]:
    return ["--root", str(store), *([] if args.profile else ["--no-profile"])]


def record(args: argparse.Namespace, store: Path, name: str, slowdown_pct: float) -> None:
    """One ``torchscope run`` named ``name``; raises RuntimeError when it fails."""
    rc, _, err = _call([sys.executable, "-m", "app", "run", "--name", name, *_run_options(args, store), "--",
                        *job_command(args, slowdown_pct)])
    if rc != 0:
        raise RuntimeError(f"run {name} failed (exit {rc}): {err.strip()[-600:]}")


def summarize(doc: dict[str, Any], rc: int) -> dict[str, Any]:
    """The fields of a diff/ab JSON document this benchmark reports."""
    head = doc.get("headline") or {}
    st = doc.get("step_time") or {}
    ratio = head.get("ratio", st.get("ratio"))
    return {"verdict": head.get("verdict", st.get("verdict")), "ratio": ratio,
            "ci95": head.get("ci95", st.get("ci95")), "quantity": head.get("quantity", "step_time"),
            "method": head.get("method"), "reasons": head.get("reasons", []), "exit_code": rc,
            "gate_failed": bool((doc.get("gates") or {}).get("failures")),
            "abs_log_ratio": abs(math.log(ratio)) if ratio and ratio > 0 else None}


def single_pair(args: argparse.Namespace, store: Path, part: Part, i: int) -> dict[str, Any]:
    a, b = f"{part.name}-{i:02d}-a", f"{part.name}-{i:02d}-b"
    hogged = "b" if i % 2 == 0 else "a"
    sides = [(a, 0.0, hogged == "a"), (b, part.slowdown_pct, hogged == "b")]
    first = "a" if i % 2 == 0 else "b"
    for name, slowdown, hog in sides if first == "a" else sides[::-1]:
        if part.hog and hog:
            with Hog(args.hogs, pin=args.pin_hogs):
                record(args, store, name, slowdown)
        else:
            record(args, store, name, slowdown)
    rc, out, err = _call([sys.executable, "-m", "app", "diff", a, b, "--root", str(store), "--json",
                          "--no-advice", "--fail-if-slower", f"{GATE_PCT:g}"])
    if rc not in (0, 1, 3):
        raise RuntimeError(f"diff {a} {b} failed (exit {rc}): {err.strip()[-600:]}")
    return {"pair": i, "first": first, **({"hogged": hogged} if part.hog else {}), **summarize(json.loads(out), rc)}


def interleaved_pair(args: argparse.Namespace, store: Path, part: Part, i: int) -> dict[str, Any]:
    rc, out, err = _call([sys.executable, "-m", "app", "ab", shlex.join(job_command(args, 0.0)),
                          shlex.join(job_command(args, part.slowdown_pct)), "--runs", str(part.replicates),
                          "--name", f"{part.name}-{i:02d}", *_run_options(args, store), "--json",
                          "--fail-if-slower", f"{GATE_PCT:g}"])
    if rc not in (0, 1, 3):
        raise RuntimeError(f"ab pair {i} failed (exit {rc}): {err.strip()[-600:]}")
    doc = json.loads(out)
    return {"pair": i, "replicates": part.replicates, **summarize(doc, rc),
            "median_steps_s": [r["median_step_s"] for r in doc.get("ab", {}).get("runs", [])]}


# --- parts and results ---------------------------------------------------------------------------

def _one_pair(args: argparse.Namespace, store: Path, part: Part, i: int) -> dict[str, Any]:
    """One pair's record; a run or diff that fails becomes verdict "error" (counted, reported) so
    that one broken pair does not throw away a 20-minute benchmark."""
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    try:
        pair = (interleaved_pair if part.replicates > 1 else single_pair)(args, store, part, i)
    except (RuntimeError, ValueError) as e:  # ValueError: a document that is not JSON
        pair = {"pair": i, "verdict": "error", "error": str(e), "ratio": None, "gate_failed": False,
                "abs_log_ratio": None}
    pair |= {"load_1min": load, "wall_s": round(time.perf_counter() - t0, 1)}
    ratio = f"ratio {pair['ratio']:.4f}" if pair.get("ratio") else pair.get("error", "no ratio")
    print(f"  {part.name} {i + 1}/{part.pairs}: {pair['verdict']} {ratio} ({pair['wall_s']} s, load {load:.2f})",
          file=sys.stderr, flush=True)
    return pair


def run_part(args: argparse.Namespace, store: Path, part: Part) -> dict[str, Any]:
    pairs = [_one_pair(args, store, part, i) for i in range(part.pairs)]
    counts = {v: sum(p["verdict"] == v for p in pairs) for v in (*VERDICTS, "error")}
    gate_failures = sum(p["gate_failed"] for p in pairs)
    return {"pairs": pairs, "counts": counts, "gate_failures": gate_failures, "target": part.target,
            "slowdown_pct": part.slowdown_pct, "replicates": part.replicates,
            "met": acceptance(part, counts, gate_failures, len(pairs))}


def acceptance(part: Part, counts: dict[str, int], gate_failures: int, n: int) -> bool:
    """Issue 10's targets, scaled to ``n`` pairs (9 of 10, 18 of 20, 8 of 10); a pair in error fails it."""
    if counts.get("error"):
        return False
    if part.name == "aa":
        return counts["same"] >= 0.9 * n and counts["inconclusive"] <= 0.1 * n and gate_failures == 0
    if part.name == "hog":
        return counts["faster"] == 0 and counts["slower"] == 0
    return counts["slower"] >= (0.9 if part.name == "power" else 0.8) * n


def margin(aa: dict[str, Any]) -> dict[str, Any]:
    """Run-to-run noise from the A/A pairs: the 95th percentile of |log ratio| (and what stats assumes)."""
    logs = [p["abs_log_ratio"] for p in aa["pairs"] if p["abs_log_ratio"] is not None]
    try:  # the stats stream's constant, through the comparison's own fallback
        from app.analysis.compare.estimators import RUN_TO_RUN_MARGIN as provisional
    except ImportError:
        provisional = None
    p95 = float(np.percentile(logs, 95)) if logs else None
    return {"abs_log_ratios": logs, "p95_abs_log_ratio": p95, "max_abs_log_ratio": max(logs) if logs else None,
            "p95_as_fraction": math.expm1(p95) if p95 is not None else None, "pairs": len(logs),
            "run_to_run_margin_in_code": provisional}


def markdown(results: dict[str, Any]) -> str:
    rows = ["| part | pairs | slowdown | same | inconclusive | faster | slower | `--fail-if-slower 5` fails | "
            "target | met |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, r in results["parts"].items():
        c = r["counts"]
        rep = f", {r['replicates']} runs/side" if r["replicates"] > 1 else ""
        errors = f" (+{c['error']} in error)" if c.get("error") else ""
        rows.append(f"| {name} | {len(r['pairs'])}{errors} | {r['slowdown_pct']:g} %{rep} | {c['same']} | "
                    f"{c['inconclusive']} | {c['faster']} | {c['slower']} | {r['gate_failures']} | {r['target']} | "
                    f"{'yes' if r['met'] else '**no**'} |")
    m = results.get("margin")
    if m and m["p95_abs_log_ratio"] is not None:
        rows.append(f"\nA/A run-to-run noise: p95 |log ratio| = {m['p95_abs_log_ratio']:.4f} "
                    f"(×{math.exp(m['p95_abs_log_ratio']):.3f}), max {m['max_abs_log_ratio']:.4f}, over {m['pairs']} "
                    f"pairs; RUN_TO_RUN_MARGIN in code: {m['run_to_run_margin_in_code']}")
    return "\n".join(rows)


def _meta(args: argparse.Namespace) -> dict[str, Any]:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit.stdout.strip(),
            "cpus": os.cpu_count(), "machine": platform.processor() or platform.machine(),
            "python": platform.python_version(), "load_1min_start": os.getloadavg()[0], "steps": args.steps,
            "profile": args.profile, "hogs": args.hogs, "pin_hogs": args.pin_hogs, "quick": args.quick}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="parts to run (default all)")
    p.add_argument("--pairs", type=int, default=None, help="pairs per part (default 10, 10, 20, 10)")
    p.add_argument("--replicates", type=int, default=3, help="runs per side in the interleaved part (default 3)")
    p.add_argument("--steps", type=int, default=300,
                   help="optimizer steps per run (default 300: ~9 s of ~30 ms steps; see benchmarks/README.md for why)")
    p.add_argument("--hogs", type=int, default=os.cpu_count() or 1, help="busy-loop processes of the hog part "
                   "(default: one per core)")
    p.add_argument("--pin-hogs", action="store_true", help="pin hog k to core k (default: not pinned)")
    p.add_argument("--profile", action="store_true", help="keep torch.profiler on in the runs (default --no-profile)")
    p.add_argument("--quick", action="store_true", help="smoke test: 1 pair per part, 2 runs per side, 40 steps")
    p.add_argument("--store", type=Path, default=None, help="run store to fill (default a temporary folder, deleted)")
    p.add_argument("--out", type=Path, default=None,
                   help="results file (default benchmarks/results/ab_verdicts.json; ab_verdicts.quick.json with --quick, "
                        "so a smoke test never overwrites measured results)")
    args = p.parse_args(argv)
    if args.out is None:
        args.out = ROOT / "benchmarks" / "results" / f"ab_verdicts{'.quick' if args.quick else ''}.json"
    if args.quick:
        args.pairs, args.replicates, args.steps = args.pairs or 1, min(args.replicates, 2), min(args.steps, 40)
    if (args.pairs is not None and args.pairs < 1) or args.replicates < 2 or args.steps < 10:
        p.error("--pairs must be >= 1, --replicates >= 2, --steps >= 10")
    return args


def write_results(results: dict[str, Any], out: Path) -> None:
    if "aa" in results["parts"]:
        results["margin"] = margin(results["parts"]["aa"])
    results["meta"]["load_1min_end"] = os.getloadavg()[0]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally below on a plain kill
    results: dict[str, Any] = {"meta": _meta(args), "parts": {}}
    if results["meta"]["load_1min_start"] > 0.5:
        print(f"warning: load average {results['meta']['load_1min_start']:.2f}: the machine is not quiet; "
              "A/A results will be pessimistic", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="ab-verdicts-") as tmp:
        store = args.store or Path(tmp)
        try:
            for part in parts_for(args):
                print(f"{part.name}: {part.pairs} pair(s)", file=sys.stderr, flush=True)
                results["parts"][part.name] = run_part(args, store, part)
                write_results(results, args.out)  # after each part: an interrupted run keeps what it measured
        finally:
            kill_all()
    write_results(results, args.out)
    print(markdown(results))
    print(f"\nwritten: {args.out}", file=sys.stderr)
    return 0 if all(r["met"] for r in results["parts"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
