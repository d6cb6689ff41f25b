"""Parallel ingest benchmark: N rank traces of S MB parsed with 1 and with 2 (or more) local workers.

    python -m benchmarks.parallel_ingest                       # 64 files x 50 MB, workers 1 and 2
    python -m benchmarks.parallel_ingest --files 16 --mb 10 --out benchmarks/results/parallel_ingest.json

The rank set is a synthetic DDP job (benchmarks/gen_ranks.py): one rank of about ``--mb`` MB is
generated, then copied once per rank with its ``distributedInfo.rank`` rewritten (same events, so
every file costs the same). Each measurement is a whole process (``--child``), as a user runs it,
with an empty trace cache (the files themselves are in the OS page cache: the benchmark never
drops it, that would slow everyone's machine):

- ``workers=1``: app.workspace.ingest.ingest_files in the process itself, one file after the other
  (what the automatic plan does below its threshold: no pool);
- ``workers=K``: the same with a pool of K spawned local processes.

``ingest_s`` is the ingest call alone, ``process_s`` the whole process (imports and pool start
included). Scaling efficiency = ingest_s(1) / (K × ingest_s(K)). A last process (``analysis``)
opens the now cached set and computes the set analysis (ops, kernels, steps of all ranks), the
part that stays in the calling process; its cost per rank enters the 1,000-rank estimate, which
is printed with its formula (it is arithmetic on the figures measured here, not a measurement).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _rank_header(text: str, rank: int, n_ranks: int) -> str:
    return text.replace('"rank": 0, "world_size": 1', f'"rank": {rank}, "world_size": {n_ranks}', 1)


def make_rank_set(out: Path, n_files: int, mb: float) -> list[Path]:
    """``n_files`` traces of about ``mb`` MB each in ``out``: one generated, the others copies with their rank."""
    from benchmarks.gen_ranks import rank_file_name, write_rank_set

    probe = write_rank_set(out / "probe", 1, slow_rank=None, steps=4, kernels_per_step=50)[0]
    per_step = probe.stat().st_size / 4
    steps = max(1, round(mb * 1e6 / per_step))
    base = write_rank_set(out / "base", 1, slow_rank=None, steps=steps, kernels_per_step=50)[0]
    paths = []
    for k in range(n_files):
        dst = out / rank_file_name(k)
        with base.open("r", encoding="utf-8") as src, dst.open("w", encoding="utf-8") as f:
            f.write(_rank_header(src.readline(), k, n_files))
            shutil.copyfileobj(src, f, 1 << 20)
        paths.append(dst)
    shutil.rmtree(out / "probe")
    shutil.rmtree(out / "base")
    return paths


def _cpu_s() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _child(args: argparse.Namespace) -> int:
    """One measurement in this (fresh) process; prints one JSON line."""
    os.environ["TORCHSCOPE_CACHE"] = str(args.cache)
    import app.workspace.traces  # noqa: F401  (the readers and the analysis: their import is not the ingest)

    imports = _cpu_s()
    files = sorted(Path(args.dir).glob("rank*.pt.trace.json"), key=lambda p: int(p.name[4:].split(".")[0]))
    if args.child == "analysis":
        from app.workspace.traces import analyze_trace_set, load_trace_set

        t0 = time.perf_counter()
        traces = load_trace_set(args.dir)
        analyze_trace_set(traces, use_cache=False)
        out = {"analysis_s": time.perf_counter() - t0, "ranks": len(traces)}
    else:
        from app.workspace.ingest import ingest_files

        t0 = time.perf_counter()
        results = ingest_files(files, workers=args.workers)
        wall = time.perf_counter() - t0
        out = {"ingest_s": wall, "task_s": sum(r.seconds for r in results), "files": len(results),
               "workers_seen": len({r.worker for r in results})}
    out["cpu_s"] = _cpu_s()  # this process and its reaped children (the pool's workers)
    out["import_cpu_s"] = imports
    print(json.dumps(out))
    return 0


def _measure(folder: Path, what: str, workers: int, cache: Path) -> dict[str, float]:
    cmd = [sys.executable, "-m", "benchmarks.parallel_ingest", "--child", what, "--dir", str(folder),
           "--cache", str(cache), "--workers", str(workers)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TORCHSCOPE_DASK_SCHEDULER", None)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, cwd=ROOT)
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["process_s"] = time.perf_counter() - t0
    return res


def estimate(per_file_s: float, analysis_per_rank_s: float, efficiency: float, *, ranks: int = 1000,
             workers: int = 32, start_s: float = 2.0) -> dict[str, float]:
    """Paper estimate: ranks/workers rounds of one file each at the measured per-file cost divided by
    the measured efficiency, plus cluster start-up, plus the calling process's set analysis."""
    rounds = math.ceil(ranks / workers)
    ingest = start_s + rounds * per_file_s / max(efficiency, 1e-9)
    analysis = ranks * analysis_per_rank_s
    return {"ranks": ranks, "workers": workers, "rounds": rounds, "ingest_s": ingest, "analysis_s": analysis,
            "total_s": ingest + analysis, "serial_s": ranks * per_file_s + analysis}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=64)
    p.add_argument("--mb", type=float, default=50.0, help="size of each rank file (MB)")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    p.add_argument("--keep", type=Path, default=None, help="generate the files here and keep them")
    p.add_argument("--child", choices=["ingest", "analysis"], default=None, help=argparse.SUPPRESS)
    p.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--cache", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        a.workers = a.workers[0]
        return _child(a)
    work = Path(tempfile.mkdtemp(prefix="parallel-ingest-"))
    try:
        folder = a.keep or work / "ranks"
        t0 = time.perf_counter()
        files = make_rank_set(folder, a.files, a.mb)
        size_mb = sum(f.stat().st_size for f in files) / a.files / 1e6
        print(f"{a.files} files of {size_mb:.1f} MB generated in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        runs = {}
        for w in a.workers:
            runs[w] = _measure(folder, "ingest", w, work / f"cache-{w}")
            print(f"workers={w}: {json.dumps(runs[w])}", file=sys.stderr)
        analysis = _measure(folder, "analysis", 1, work / f"cache-{a.workers[0]}")
        base = runs[min(runs)]
        per_file = base["ingest_s"] / a.files * min(runs)
        # CPU seconds per file of the in-process run: the cost on a core of its own (on a shared
        # machine the wall figure is mostly waiting for a core)
        per_file_cpu = (base["cpu_s"] - base["import_cpu_s"]) / a.files
        scaling = {w: {"speedup": base["ingest_s"] / r["ingest_s"],
                       "efficiency": base["ingest_s"] / r["ingest_s"] / (w / min(runs))} for w, r in runs.items()}
        eff = scaling[max(runs)]["efficiency"]
        scale = 50.0 / size_mb  # the estimate is for 50 MB ranks: cost linear in bytes (docs/trace-engine.md)
        est = estimate(per_file * scale, analysis["analysis_s"] / a.files * scale, eff)
        est_cpu = estimate(per_file_cpu * scale, (analysis["cpu_s"] - analysis["import_cpu_s"]) / a.files * scale, 1.0)
        doc = {"files": a.files, "file_mb": size_mb, "cpus": os.cpu_count(), "load_avg": os.getloadavg(),
               "runs": runs, "scaling": scaling, "analysis": analysis, "per_file_s": per_file,
               "per_file_cpu_s": per_file_cpu, "estimate_1000_ranks_32_workers_50mb": est,
               "estimate_from_cpu_s_dedicated_cores": est_cpu}
        print(json.dumps(doc, indent=2))
        if a.out is not None:
            a.out.parent.mkdir(parents=True, exist_ok=True)
            a.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
