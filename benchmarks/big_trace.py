"""Big-trace benchmark: whole processes, cold, as a user runs them — ingest memory and time from 20 MB to 1 GB.

    python -m benchmarks.big_trace --sizes 20 100 300 1000 [--gzip 1000] [--rounds 3] [--out benchmarks/results/big_trace.json]

For each size a trace is generated (benchmarks/gen_trace.py: real A100 steps replicated, the size in
MB of uncompressed JSON) and each case runs as its own process, one after the other, in the same
run; wall seconds, CPU seconds (user + system, from ``os.wait4``) and the peak resident size
(``ru_maxrss`` of that child: interpreter and libraries included; the driver imports nothing
heavy and generates the traces in children, so no child starts from a large parent) are recorded:

- ``orjson``: ``python -c "import orjson; orjson.loads(open(f, 'rb').read())"`` — the floor of any
  Python JSON reader, which builds no table;
- ``ingest``: ``load_trace(f)`` with an empty cache — parse, clean, sort, write the columnar cache
  (app/data/trace*.py; the tables are then read from the cache when used);
- ``analyze_cold``: ``python -m app.cli analyze --json f`` with an empty cache — ingest + analysis;
- ``analyze_warm``: the same command again — the cached trace, analysis and document;
- ``hta_json``: HTA's fastest backend (``parse_trace_dataframe``, json) when ``hta`` is installed
  (``pip install -r benchmarks/requirements.txt``), else left out and said so;
- ``hta_ijson_batch_and_compress``: HTA's leanest backend (the lowest peak in "Trace ingest"), the
  reference of the memory goal;
- ``imports``: a process that imports what a cold ``analyze`` imports (the CLI, numpy, pyarrow, the
  parser, pandas, the analysis) and reads nothing: the floor of any analysis written on pandas;
- ``analyze_cold_base``: ``analyze_cold`` run from another checkout (``--baseline-root DIR``, e.g. a
  ``git worktree`` of the commit before a change), for before/after pairs in the same rounds.

``ru_maxrss`` is the largest process of a tree, not the tree's memory: a cold ``analyze`` of one big
plain trace forks a second process (app.data.trace_split), so each row also has, from the
high-water marks (``VmHWM`` in ``/proc``) read every 10 ms, ``tree_peak_rss_mb``: the largest sum,
at one sample, of the high-water marks of the processes alive at that sample (what the tree held at
once, at most; pages shared after the fork counted in each), and ``tree_peak_rss_sum_mb``: the sum
of every process's own peak, reached at different moments (the helper's peak is while it parses,
the command's after it ends), a looser upper bound; and ``tree_peak_pss_mb``: the largest sum, at one
sample, of the live processes' proportional set sizes (``Pss`` in ``smaps_rollup``: a page shared by
n processes, such as the libraries both map, counted 1/n in each), what the tree held in memory. The
memory goal's ratio is given for all four (the peers' too are sampled the same way). Reading
``/proc`` so often costs the driver a few percent of a core, which a command using both cores
feels and a one-process peer does not: so each case runs twice in its round, first timed (the
seconds and ``ru_maxrss`` of the row) with nothing read meanwhile, then again from the same cache
state for the tree figures (its wall time is kept as ``sampled_wall_s``).

``--source FILE`` is the trace gen_trace replicates (default: the shared A100 trace next to the
checkout). ``--peer-path DIR`` puts DIR on the peers' ``PYTHONPATH`` only (HTA installed with ``pip install
--target DIR``, away from the project's environment). With ``--rounds N`` the cases of a size run
one after the other, N times (A B C A B C): each round's ratios compare processes of the same minute.

``--gzip SIZE ...`` also measures ``ingest`` of the gzip-compressed trace of those sizes (made with
level 1). Ratios printed: peak RSS / uncompressed size (goal ≤ 0.40 for the ingest), seconds per
MB (linear growth), warm analyze / orjson (goal ≤ 0.35). Generated files and caches are
deleted as soon as their size is done.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CASES = ["orjson", "ingest", "analyze_cold", "analyze_warm", "hta_json", "hta_ijson_batch_and_compress",
         "analyze_cold_base", "imports"]
HTA_CASES = ("hta_json", "hta_ijson_batch_and_compress")

_SNIPPETS = {
    "orjson": "import orjson,sys; orjson.loads(open(sys.argv[1],'rb').read())",
    "ingest": "import sys; from app.data.trace import load_trace; load_trace(sys.argv[1])",
    # what a cold analyze imports (the CLI, numpy, pyarrow, the parser, pandas, the analysis), and nothing else
    "imports": "import gc; gc.disable(); import app.cli.analyze_cmd as a, app.data.trace_parse; a._import_analysis()",
}
_HTA = ("import sys, logging; logging.disable(logging.WARNING)\n"
        "from hta.common.trace_parser import parse_trace_dataframe\n"
        "from hta.configs.parser_config import ParserBackend, ParserConfig\n"
        "cfg = ParserConfig(ParserConfig.get_minimum_args()); cfg.set_parser_backend(ParserBackend({backend!r}))\n"
        "parse_trace_dataframe(sys.argv[1], cfg)")
for _case in HTA_CASES:
    _SNIPPETS[_case] = _HTA.format(backend=_case[len("hta_"):])


def _have_hta(peer_path: str | None) -> bool:
    probe = subprocess.run([sys.executable, "-c", "import hta"], capture_output=True,
                           env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [peer_path, str(ROOT)]))})
    return probe.returncode == 0


def _command(case: str, trace: Path) -> list[str]:
    if case.startswith("analyze"):
        return [sys.executable, "-m", "app.cli", "analyze", "--json", str(trace)]
    return [sys.executable, "-c", _SNIPPETS[case], str(trace)]


def _run(case: str, trace: Path, cache: Path, timeout: float, *, peer_path: str | None = None,
         base_root: Path | None = None, sample: bool = True) -> dict:
    """One process of ``case``: wall and CPU seconds, peak RSS, and with ``sample`` the tree's
    memory read from /proc every 10 ms (that reading costs the driver ~0.7 ms of a core per
    process and sample, which a command using both cores of the machine feels: timed runs go
    without it)."""
    root = base_root if case == "analyze_cold_base" and base_root is not None else ROOT
    path = os.pathsep.join(filter(None, [peer_path if case in HTA_CASES else None, str(root)]))
    env = {**os.environ, "TORCHSCOPE_CACHE": str(cache), "PYTHONPATH": path}
    t0 = time.perf_counter()
    proc = subprocess.Popen(_command(case, trace), env=env, cwd=root, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = t0 + timeout
    hwm: dict[int, int] = {}  # each process of the tree: its high-water mark of RSS, kB (last read)
    together = 0  # the largest sum, over one sample, of the high-water marks of the processes alive then
    pss = 0  # the largest sum, over one sample, of the processes' proportional set sizes (shared pages split)
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            pid, status, ru = os.wait4(proc.pid, 0)
            return {"case": case, "error": f"timed out after {timeout:.0f} s"}
        if not sample:
            time.sleep(0.005)
            continue
        alive = _sample_tree(proc.pid, hwm)
        together = max(together, sum(hwm[p] for p in alive))
        pss = max(pss, sum(_pss_kb(p) for p in alive))
        time.sleep(0.01)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    out = {"case": case, "wall_s": round(wall, 3), "cpu_s": round(ru.ru_utime + ru.ru_stime, 3),
           "peak_rss_mb": round(ru.ru_maxrss / 1024, 1)}
    if proc.returncode:
        out["error"] = err.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
    if not sample:
        return out
    # ru_maxrss is the largest process of the tree, not their sum: a command that forks a helper
    # (app.data.trace_split) is also charged, from /proc read every 10 ms, (1) the tree's peak: the
    # largest sum, at one moment, of the high-water marks of the processes alive at that moment (an
    # upper bound of what they held together then: shared pages counted in each), and (2) the sum
    # of every process's own peak, reached at different moments (an upper bound of (1)).
    kids = {p: v for p, v in hwm.items() if p != proc.pid}
    out["processes"] = 1 + len(kids)
    out["tree_peak_rss_mb"] = round(max(together, ru.ru_maxrss) / 1024, 1)
    out["tree_peak_rss_sum_mb"] = round((max(hwm.get(proc.pid, 0), 0 if kids else ru.ru_maxrss)
                                         + sum(kids.values())) / 1024, 1)
    # (3) the tree's proportional set size at its largest sample: each page shared by n processes
    # (the libraries both map, what the fork left shared) counted 1/n in each, so once in the sum
    # (sampled: a peak shorter than 10 ms can be missed; (1) bounds it from above)
    out["tree_peak_pss_mb"] = round(pss / 1024, 1)
    return out


_TREE = ("processes", "tree_peak_rss_mb", "tree_peak_rss_sum_mb", "tree_peak_pss_mb")


def _run_twice(case: str, trace: Path, cache: Path, timeout: float, **kw: Any) -> dict:
    """``case`` timed without sampling, then again (from the same cache state) sampled for the
    tree's memory: the row has the first run's seconds and peak RSS and the second's tree figures
    (its wall seconds as ``sampled_wall_s``)."""
    cold = case != "analyze_warm"
    if cold:
        shutil.rmtree(cache, ignore_errors=True)
    timed = _run(case, trace, cache, timeout, sample=False, **kw)
    if "error" in timed:
        return timed
    if cold:
        shutil.rmtree(cache, ignore_errors=True)
    sampled = _run(case, trace, cache, timeout, **kw)
    if "error" in sampled:
        return sampled
    timed.update({k: sampled[k] for k in _TREE}, sampled_wall_s=sampled["wall_s"])
    return timed


def _proc_kb(pid: int, name: str, field: bytes) -> int:
    """A kB figure of ``/proc/PID/NAME`` (the line that starts with ``field``); 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _pss_kb(pid: int) -> int:
    """The process's proportional set size (shared pages split among the processes sharing them)."""
    return _proc_kb(pid, "smaps_rollup", b"Pss:")


def _hwm_kb(pid: int) -> int:
    """The process's RSS high-water mark."""
    return _proc_kb(pid, "status", b"VmHWM:")


def _sample_tree(root: int, hwm: dict[int, int]) -> list[int]:
    """Note the RSS high-water mark of ``root`` and of every process under it (Linux /proc);
    return the processes found alive."""
    todo, alive = [root], []
    while todo:
        pid = todo.pop()
        kb = _hwm_kb(pid)
        if kb:
            hwm[pid] = max(hwm.get(pid, 0), kb)
            alive.append(pid)
        try:
            with open(f"/proc/{pid}/task/{pid}/children", "rb") as f:
                todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            pass
    return alive


def _gzip(src: Path, dst: Path) -> None:
    with src.open("rb") as f, gzip.open(dst, "wb", compresslevel=1) as g:
        shutil.copyfileobj(f, g, 1 << 20)


def _load_avg() -> float:
    return round(os.getloadavg()[0], 2)


def _generate(trace: Path, mb: float, source: Path | None = None) -> int:
    """Generate in a child process: the driver stays small, since a child's ``ru_maxrss`` starts
    from the size of the process it was forked from."""
    more = ["--source", str(source)] if source is not None else []
    out = subprocess.run([sys.executable, "-m", "benchmarks.gen_trace", "--mb", str(mb), "--out", str(trace), *more],
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True,
                         capture_output=True, text=True).stdout
    return int(out.rsplit(" MB, ", 1)[1].split()[0].replace(",", ""))


def _measure(sizes: list[float], gz: set[float], cases: list[str], work: Path, timeout: float,
             rounds: int = 1, *, peer_path: str | None = None, base_root: Path | None = None,
             source: Path | None = None) -> list[dict]:
    rows = []
    for mb in sizes:
        trace = work / f"big_{mb:g}mb.json"
        n = _generate(trace, mb, source)
        size = trace.stat().st_size
        files = [(trace, cases)]
        if mb in gz:
            zipped = trace.with_suffix(".json.gz")
            _gzip(trace, zipped)
            files.append((zipped, ["ingest"]))
        for f, wanted in files:
            cache = work / f"cache-{f.name}"
            # rounds: the cases one after the other, again and again (A B C A B C), so that each
            # round's ratios compare processes run in the same minute of a shared machine
            for rnd, case in ((r, c) for r in range(1, rounds + 1) for c in wanted):
                # analyze_warm reuses analyze_cold's cache; ingest and the baseline have their own
                c = work / f"cache-{case}" if case in ("ingest", "analyze_cold_base") else cache
                r = _run_twice(case, f, c, timeout, peer_path=peer_path, base_root=base_root)
                r.update(round=rnd, trace=f.name, mb=mb, events=n, uncompressed_bytes=size, file_bytes=f.stat().st_size,
                         load_avg=_load_avg())
                if "peak_rss_mb" in r:
                    r["peak_rss_ratio"] = round(r["peak_rss_mb"] * 2**20 / size, 3)
                rows.append(r)
                print(json.dumps(r), flush=True)
            for c in (cache, work / "cache-ingest", work / "cache-analyze_cold_base"):
                shutil.rmtree(c, ignore_errors=True)
            if f != trace:
                f.unlink()
        trace.unlink()
    return rows


def _table(rows: list[dict]) -> str:
    orj = {(r["mb"], r.get("round", 1)): r for r in rows if r["case"] == "orjson" and "wall_s" in r}
    lines = ["| round | trace | case | wall s | CPU s | peak RSS MB | tree at once MB | tree, sum of peaks MB "
             "| tree PSS MB | peak / size | vs orjson (wall) | vs orjson (CPU) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r.get('round', 1)} | {r['trace']} | {r['case']} | {r['error']} | | | | | | | | |")
            continue
        o = orj.get((r["mb"], r.get("round", 1)))
        ratio = f"{r['wall_s'] / o['wall_s']:.2f}×" if o and r["case"] != "orjson" else ""
        cpu = f"{r['cpu_s'] / o['cpu_s']:.2f}×" if o and o["cpu_s"] and r["case"] != "orjson" else ""
        lines.append(f"| {r.get('round', 1)} | {r['trace']} | {r['case']} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} "
                     f"| {r['peak_rss_mb']:.0f} | {r.get('tree_peak_rss_mb', 0):.0f} | {r.get('tree_peak_rss_sum_mb', 0):.0f} "
                     f"| {r.get('tree_peak_pss_mb', 0):.0f} | {r['peak_rss_ratio']:.2f} | {ratio} | {cpu} |")
    return "\n".join(lines)


def _median(xs: list[float]) -> float | None:
    xs = sorted(xs)
    return None if not xs else xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def goals(rows: list[dict]) -> list[dict]:
    """Issue 13's cold goals per size, from the rounds' ratios (medians over rounds; each ratio
    compares processes of one round): HTA's fastest backend / cold analyze (goal ≥ 8; the faster of
    HTA's two backends in that round, ``hta_fastest``: neither is the faster at every size, and
    json's alone is given too), cold analyze / a bare orjson process (goal ≤ 1), cold analyze's
    peak / HTA's leanest peak (goal ≤ 0.5), and the baseline checkout's cold analyze / this one's
    (> 1: this checkout is faster)."""
    by: dict[tuple[float, int], dict[str, dict]] = {}
    for r in rows:
        if "error" not in r and r["trace"].endswith(".json"):
            by.setdefault((r["mb"], r.get("round", 1)), {})[r["case"]] = r
    for cases in by.values():
        hta = [cases[c] for c in HTA_CASES if c in cases]
        if hta:
            cases["hta_fastest"] = {u: min(r[u] for r in hta) for u in ("wall_s", "cpu_s")}
    ratios = {"hta_fastest / analyze_cold": ("hta_fastest", "analyze_cold", "num"),
              "hta_fastest / imports": ("hta_fastest", "imports", "num"),
              "hta_json / analyze_cold": ("hta_json", "analyze_cold", "num"),
              "analyze_cold / orjson": ("analyze_cold", "orjson", "num"),
              "analyze_cold_base / analyze_cold": ("analyze_cold_base", "analyze_cold", "num"),
              "peak analyze_cold / hta_ijson_batch_and_compress": ("analyze_cold", "hta_ijson_batch_and_compress", "peak")}
    out = []
    for mb in sorted({k[0] for k in by}):
        rounds = [v for k, v in sorted(by.items()) if k[0] == mb]
        doc: dict = {"mb": mb, "rounds": len(rounds)}
        for label, (a, b, kind) in ratios.items():
            for unit in (("peak_rss_mb", "tree_peak_rss_mb", "tree_peak_rss_sum_mb", "tree_peak_pss_mb") if kind == "peak"
                         else ("wall_s", "cpu_s")):
                vals = [r[a][unit] / r[b][unit] for r in rounds if a in r and b in r and r[b].get(unit) and unit in r[a]]
                if vals:
                    doc[f"{label} ({unit})"] = {"median": round(_median(vals) or 0, 3),
                                                "rounds": [round(v, 3) for v in vals]}
        out.append(doc)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=float, nargs="+", default=[20, 100, 300, 1000], help="MB of uncompressed JSON")
    ap.add_argument("--gzip", type=float, nargs="*", default=[], help="sizes whose .gz is ingested too")
    ap.add_argument("--cases", nargs="+", default=CASES, choices=CASES)
    ap.add_argument("--workdir", type=Path, default=None, help="where traces and caches go (default: a temp folder)")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--rounds", type=int, default=1, help="run the cases of each size this many times, interleaved")
    ap.add_argument("--peer-path", help="a folder put on the peers' PYTHONPATH only (HTA installed with pip --target)")
    ap.add_argument("--baseline-root", type=Path,
                    help="another checkout of the project: adds case analyze_cold_base, run from there")
    ap.add_argument("--source", type=Path,
                    help="the trace whose steps are replicated (default: gen_trace's, the shared A100 trace)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    cases = list(args.cases)
    note = None
    if any(c in cases for c in HTA_CASES) and not _have_hta(args.peer_path):
        cases = [c for c in cases if c not in HTA_CASES]
        note = "hta is not installed (pip install -r benchmarks/requirements.txt): HTA left out"
        print(note, file=sys.stderr)
    if args.baseline_root is None and "analyze_cold_base" in cases:
        cases.remove("analyze_cold_base")
    elif args.baseline_root is not None and "analyze_cold_base" not in cases:
        cases.append("analyze_cold_base")
    if args.workdir is not None:
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="torchscope-big-", dir=args.workdir))
    try:
        rows = _measure(args.sizes, set(args.gzip), cases, work, args.timeout, max(1, args.rounds),
                        peer_path=args.peer_path, base_root=args.baseline_root.resolve() if args.baseline_root else None,
                        source=args.source)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(_table(rows))
    summary = goals(rows)
    for g in summary:
        print(json.dumps(g))
    if args.out:
        doc = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "python": sys.version.split()[0],
               "cpus": os.cpu_count(), "note": note, "baseline_root": args.baseline_root.name if args.baseline_root else None,
               "goals": summary, "rows": rows}
        args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
