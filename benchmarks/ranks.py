"""Multi-rank analysis benchmark: synthetic DDP rank sets of 64 and 256 ranks, is the slowed rank found, at what cost.

    python -m benchmarks.ranks --ranks 64 256 [--steps 4 --kernels-per-step 10] [--out benchmarks/results/ranks.json]

For each size a rank set is generated (benchmarks/gen_ranks.py: one trace per rank, per-rank clock
offsets, rank n/3 slowed by 30 % of a step in compute). Each case runs in a fresh process, as a
user runs it; wall seconds are measured around the whole process, CPU seconds and peak RSS
(VmHWM) by the process itself:

- ``analyze cold``: ``python -m app analyze DIR --json`` with an empty cache (parse every rank,
  write the caches, analyse, print ``rank_summary``);
- ``analyze warm``: the same again (traces and analysis read from the caches);
- ``summaries``: ``load_traces`` (warm) + ``summarize_rank`` of each rank one after the other + the
  cross-rank ``rank_summary``: the work a parallel-ingest worker does per rank, serially; ``per_rank_s``
  is its CPU seconds per rank and ``cross_rank_s`` the cross-rank step alone.

Every case checks that the slowed rank has the highest straggler score and that its cause is
``compute``; ``found`` records it.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = ("analyze_cold", "analyze_warm", "summaries")


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _peak_rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _top(rows: list[dict]) -> dict:
    return max(rows, key=lambda r: (r["straggler_score"] or 0.0, -r["rank"]))


def _one(case: str, folder: str, slow: int) -> dict:
    """Run one case in this process (a fresh one per case)."""
    sys.path.insert(0, str(ROOT))
    out: dict = {"case": case}
    if case.startswith("analyze"):
        from app.cli import main
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            main(["analyze", folder, "--json"])
        rows = json.loads(buf.getvalue())["rank_summary"]
    else:
        from app.analysis.trace.ranks import rank_summary, summarize_rank
        from app.data.trace import load_traces
        traces = load_traces(Path(folder))
        c0 = _cpu()
        summaries = {t.rank: summarize_rank(t) for t in traces}
        c1 = _cpu()
        rows = rank_summary({r: s for r, s in summaries.items() if s is not None})
        out |= {"per_rank_s": (c1 - c0) / len(traces), "cross_rank_s": _cpu() - c1}
    top = _top(rows)
    return out | {"cpu_seconds": _cpu(), "peak_rss_mb": _peak_rss_mb(), "ranks": len(rows),
                  "found": top["rank"] == slow and top["cause"] == "compute", "top_score": top["straggler_score"]}


def _run(case: str, folder: Path, slow: int, cache: Path) -> dict:
    env = {**os.environ, "TORCHSCOPE_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "benchmarks.ranks", "--one", case, str(folder), str(slow)],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=3600)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        return {"case": case, "error": (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]}
    return json.loads(p.stdout.strip().splitlines()[-1]) | {"seconds": wall}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--kernels-per-step", type=int, default=10)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "torchscope-bench-ranks")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--one", nargs=3, metavar=("CASE", "FOLDER", "SLOW"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(_one(args.one[0], args.one[1], int(args.one[2]))))
        return 0
    sys.path.insert(0, str(ROOT))
    from benchmarks.gen_ranks import write_rank_set
    results = []
    for n in args.ranks:
        folder, cache, slow = args.workdir / f"ranks{n}", args.workdir / f"cache{n}", n // 3
        for old in (folder, cache):
            if old.exists():
                for f in sorted(old.rglob("*"), reverse=True):
                    f.rmdir() if f.is_dir() else f.unlink()
        t0 = time.perf_counter()
        paths = write_rank_set(folder, n, slow_rank=slow, steps=args.steps, kernels_per_step=args.kernels_per_step)
        gen = time.perf_counter() - t0
        mb = sum(p.stat().st_size for p in paths) / 1e6
        for case in CASES:
            r = _run(case, folder, slow, cache) | {"n_ranks": n, "set_mb": mb, "generate_s": gen}
            results.append(r)
            extra = (f"  per rank {r['per_rank_s'] * 1e3:.0f} ms, cross-rank {r['cross_rank_s'] * 1e3:.0f} ms"
                     if "per_rank_s" in r else "")
            print(f"{n:4d} ranks ({mb:5.1f} MB) {case:13s} " + (r["error"] if "error" in r else
                  f"{r['seconds']:6.2f} s wall, {r['cpu_seconds']:6.2f} s CPU, {r['peak_rss_mb']:5.0f} MB peak, "
                  f"found {r['found']} (score {r['top_score']:.2f}){extra}"), flush=True)
    if args.out:
        given = argv if argv is not None else sys.argv[1:]
        public = [a for i, a in enumerate(given) if a != "--workdir" and (i == 0 or given[i - 1] != "--workdir")]
        args.out.write_text(json.dumps({"command": " ".join(["python -m benchmarks.ranks", *public]),
                                        "cpus": os.cpu_count(), "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
