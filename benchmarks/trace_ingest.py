"""Trace ingest benchmark: torchscope vs Holistic Trace Analysis (each backend) vs plain orjson.loads.

    .venv/bin/pip install -r benchmarks/requirements.txt      # HTA + ijson, benchmark only
    .venv/bin/python benchmarks/trace_ingest.py --sizes 20 100 [--out benchmarks/results/trace_ingest.json]

For each size a trace is generated (benchmarks/gen_trace.py: real A100 steps replicated). Each
measurement runs in a fresh subprocess, so its peak memory is its own: ``peak_rss_mb`` is the
process's raw peak (VmHWM; ru_maxrss where /proc is absent), interpreter and imported libraries
included; ``import_rss_mb`` is the resident size after the case's imports, measured in the same
process just before it starts reading; ``peak_increment_mb`` = peak − that, the memory of the
reading itself. Cases:

- ``orjson``: ``orjson.loads`` of the file's bytes (the floor for any JSON reader in Python);
- ``torchscope cold``: ``load_trace`` with an empty cache (parse + clean + write the Arrow cache + DataFrames);
- ``torchscope warm``: ``load_traces`` from the cache + ``analyze_traces`` (steps, breakdown, op,
  kernel tables, memory peaks, overlap) read from the derived-table cache, which an unmeasured
  ``analyze_traces`` run fills first (what every page open after the first pays);
- ``torchscope warm compute``: ``load_trace`` from the cache + steps + breakdown + op table computed
  from the events (no derived-table cache: the first analysis of an already ingested trace);
- ``hta <backend>``: ``hta.common.trace_parser.parse_trace_dataframe`` with that backend.

Both wall seconds and CPU seconds (user + system of the measuring process) are recorded; on a
shared machine CPU seconds are the steadier figure. The best of ``--repeat`` runs is kept.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = ["orjson", "torchscope_cold", "torchscope_warm", "torchscope_warm_compute", "hta_json", "hta_ijson",
         "hta_ijson_batched", "hta_ijson_batch_and_compress"]


def _one(case: str, path: str, cache: str) -> dict:
    """Run one case in this process; return seconds and peak RSS."""
    sys.path.insert(0, str(ROOT))
    os.environ["TORCHSCOPE_CACHE"] = cache
    if case.startswith("torchscope"):
        from app.analysis.trace.breakdown import compute_breakdown
        from app.analysis.trace.ops import compute_op_table
        from app.analysis.trace.steps import compute_steps
        from app.analysis.trace.summary import analyze_traces
        from app.data.trace import load_trace, load_traces
    elif case.startswith("hta"):
        import logging

        logging.disable(logging.WARNING)
        from hta.common.trace_parser import parse_trace_dataframe
        from hta.configs.parser_config import ParserBackend, ParserConfig
    else:
        import orjson
    import_rss = _status_mb("VmRSS:")
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = ru0.ru_utime + ru0.ru_stime
    t0 = time.perf_counter()
    n = 0
    if case == "orjson":
        n = len(orjson.loads(Path(path).read_bytes())["traceEvents"])
    elif case == "torchscope_cold":
        n = load_trace(path).n_events
    elif case == "torchscope_prime":  # fills the derived-table cache; not measured
        n = analyze_traces(load_traces(path)).traces[0]["events"]
    elif case == "torchscope_warm":
        traces = load_traces(path)
        analysis = analyze_traces(traces)
        assert traces[0].from_cache and analysis.from_cache, "warm case needs the prime case to have run first"
        n = traces[0].n_events
    elif case == "torchscope_warm_compute":
        tr = load_trace(path)
        assert tr.from_cache, "warm case needs the cold case to have run first"
        steps = compute_steps([tr])
        compute_breakdown([tr], steps)
        compute_op_table([tr], steps_us=float(steps["duration_us"].sum()))
        n = tr.n_events
    else:
        cfg = ParserConfig.get_default_cfg()
        cfg.parser_backend = ParserBackend(case[len("hta_"):])
        _, df, _ = parse_trace_dataframe(path, cfg)
        n = len(df)
    secs = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    peak = _peak_rss_mb()
    out = {"case": case, "seconds": secs, "cpu_seconds": ru.ru_utime + ru.ru_stime - cpu0,
           "peak_rss_mb": peak, "rows": n}
    if import_rss is not None:
        out |= {"import_rss_mb": import_rss, "peak_increment_mb": peak - import_rss}
    return out


def _status_mb(field: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _peak_rss_mb() -> float:
    """Peak RSS of this process. ru_maxrss survives exec (it would report the parent's size at
    fork time), so /proc's VmHWM, which restarts with the new program, is preferred on Linux."""
    hwm = _status_mb("VmHWM:")
    return hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _run(case: str, path: Path, cache: Path, timeout: float) -> dict:
    cmd = [sys.executable, __file__, "--one", case, str(path), str(cache)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"case": case, "error": f"timeout after {timeout:.0f}s"}
    if p.returncode != 0:
        return {"case": case, "error": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description="trace ingest benchmark")
    ap.add_argument("--sizes", type=float, nargs="+", default=[20, 100])
    ap.add_argument("--cases", nargs="+", default=CASES)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "torchscope-bench")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--repeat", type=int, default=3, help="runs of the torchscope and orjson cases (best kept)")
    ap.add_argument("--repeat-peers", type=int, default=1, help="runs of each HTA case (best kept)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--one", nargs=3, metavar=("CASE", "PATH", "CACHE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(_one(*args.one)))
        return
    sys.path.insert(0, str(ROOT))
    from benchmarks.gen_trace import DEFAULT_SOURCE, generate

    results = []
    args.workdir.mkdir(parents=True, exist_ok=True)
    for mb in args.sizes:
        path = args.workdir / f"trace_{mb:g}mb.json"
        if not path.exists():
            generate(DEFAULT_SOURCE, path, mb)
        cache = Path(tempfile.mkdtemp(dir=args.workdir, prefix="cache-"))
        size_mb = path.stat().st_size / 1e6
        for case in args.cases:
            reps = args.repeat if case.startswith(("torchscope", "orjson")) else args.repeat_peers
            runs = []
            if case == "torchscope_warm":
                _run("torchscope_prime", path, cache, args.timeout)
            for _ in range(reps):
                if case == "torchscope_cold":  # a cold run needs an empty cache; warm reuses the last one
                    cache = Path(tempfile.mkdtemp(dir=args.workdir, prefix="cache-"))
                runs.append(_run(case, path, cache, args.timeout))
            ok = [r for r in runs if "error" not in r]
            r = min(ok, key=lambda r: r["cpu_seconds"]) if ok else runs[0]
            if ok:
                r["seconds"] = min(x["seconds"] for x in ok)
                r["cpu_seconds_runs"] = [round(x["cpu_seconds"], 3) for x in ok]
            r |= {"size_mb": round(size_mb, 1), "repeats": reps}
            results.append(r)
            print(json.dumps(r), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
