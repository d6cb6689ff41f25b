"""Listing 1,000 and 10,000 runs through the catalog index, next to a loop that only json.loads every manifest (benchmark).

    python -m benchmarks.catalog_index [--sizes 1000 10000] [--repeat 3] [--keep DIR]

For each synthetic store (small manifests, 20 metrics lines per run, written directly, no fsync)
every figure is a whole process, timed in this run next to its peer:

- ``loop``: a plain Python process that lists the store and ``json.load``s every run.json (the peer);
- ``ls cold``: ``python -m app ls --json`` without an index (it reads every run and builds the index);
- ``ls warm``: the same with the index present and nothing else cached (goal: <= 0.2x the loop):
  the ``ls --json`` snapshot file (``.torchscope/ls-json.snapshot``, a copy of the last output) is
  deleted before each run, so the listing is printed from the index's rows and the change journal
  (app.workspace.printed_listing); the loop, ``ls warm``, the stat floor and ``ls snapshot`` are
  timed in interleaved rounds, and the per-round ratios are printed too;
- ``ls snapshot``: ``ls --json`` printed from the snapshot file (written again, untimed, by an
  ``ls --json --refresh`` before each run);
- ``stat floor``: a plain Python process that lists the store and ``stat``s every file the index
  signature covers (run.json, metrics.jsonl, system.jsonl: app.workspace.signatures.scan_store) and
  prints nothing: what a listing that checks every run pays (before the change journal, every
  listing; now ``ls --refresh``), index or not;
- ``ls --refresh``: ``ls --json --refresh``, the full check of every run's files (no change found);
- ``page``: the Runs page through AppTest in a fresh interpreter, index present: first render
  (imports included) and the second run in the same process right after it (goal: <= 0.05x the
  loop; judged on this one), then a run once the Run-page warm-up (app.ui.warmup) finished, and one
  past the store view's 2 s age (reused while the index vouches nothing changed);
- ``query``: ``torchscope query --by batch_size,num_workers`` as a process, and the query itself
  (index refresh + DuckDB) inside one process (goal: well under a second for 1,000 runs).

Wall seconds and CPU seconds (user + system of the child) are both printed: on a shared machine the
CPU figure moves less. Each figure is the median of ``--repeat`` runs.

The project's modules are byte-compiled first (``compileall``, into the git-ignored ``__pycache__``
folders), as an installed package is: with ``PYTHONDONTWRITEBYTECODE`` set and no bytecode, every
``ls`` process would compile its ~15 modules again (~0.03 s). ``--no-compile`` skips it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INDEX_DIR = ".torchscope"  # app.data.catalog_index.INDEX_DIR
SNAPSHOT_FILE = "ls-json.snapshot"  # app.data.catalog_index.LS_SNAPSHOT_FILE
STAMP_AGE_S = 1.0  # app.workspace.printed_listing.STAMP_AGE_NS: the store folder's stamp is kept this old

LOOP = """
import json, os, sys
root = sys.argv[1]
runs = []
for name in sorted(os.listdir(root), reverse=True):
    try:
        with open(os.path.join(root, name, "run.json")) as f:
            runs.append(json.load(f))
    except (OSError, ValueError):
        pass
print(len(runs))
"""

STAT_FLOOR = """
import os, sys
base = os.path.join(sys.argv[1], "")
leaves = [os.sep + leaf for leaf in sys.argv[2].split(",")]
n = 0
for name in sorted(os.listdir(base), reverse=True):
    for leaf in leaves:
        try:
            os.stat(base + name + leaf)
            n += 1
        except OSError:
            pass
print(n)
"""
SIGNATURE_FILES = "run.json,metrics.jsonl,system.jsonl"  # app.workspace.signatures.scan_store

PAGE = """
import logging, os, sys, time
logging.disable(logging.WARNING)
from pathlib import Path
from tests.app.helpers import runs_page_app, use_store  # AppTest lives with the tests
use_store(Path(sys.argv[1]))
at = runs_page_app(timeout=900)
t, c = time.perf_counter(), time.process_time(); at.run()
first, first_cpu = time.perf_counter() - t, time.process_time() - c
assert not at.exception, [e.value for e in at.exception]
t, c = time.perf_counter(), time.process_time(); at.run()
second, second_cpu = time.perf_counter() - t, time.process_time() - c
from app.ui.store import VIEW_MAX_AGE_S
from app.ui.warmup import warm_run_page
warm_run_page().join()  # the Run page's warm-up, started by the first render, finished
t, c = time.perf_counter(), time.process_time(); at.run()
warm, warm_cpu = time.perf_counter() - t, time.process_time() - c
time.sleep(VIEW_MAX_AGE_S + 0.1)  # past the store view's age: reused only while the index vouches for it
t, c = time.perf_counter(), time.process_time(); at.run()
aged, aged_cpu = time.perf_counter() - t, time.process_time() - c
print(f"{first:.4f} {second:.4f} {first_cpu:.4f} {second_cpu:.4f} {len(at.dataframe[0].value)} "
      f"{warm:.4f} {warm_cpu:.4f} {aged:.4f} {aged_cpu:.4f}")
"""

QUERY = """
import sys, time
t = time.perf_counter()
import duckdb
from app.workspace.catalog_query import load_runs_table, query_runs
imports = time.perf_counter() - t
t, c = time.perf_counter(), time.process_time()
table = load_runs_table(sys.argv[1])
result = query_runs(table, by=["batch_size", "num_workers"])
print(f"{time.perf_counter() - t:.4f} {imports:.4f} {time.process_time() - c:.4f} {len(table)} {len(result)}")
"""


def write_store(root: Path, n: int, seed: int = 0) -> None:
    """``n`` small finished runs: a manifest with a config of batch_size / num_workers / lr, tags,
    and 20 metrics lines whose step time depends on the config (written without the agent: fast)."""
    rnd = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    t0 = 1_764_000_000.0
    for i in range(n):
        started = t0 + 60.0 * i
        run_id = time.strftime("%Y%m%d-%H%M%S", time.gmtime(started)) + f"-run{i}-{i % 65536:04x}"
        d = root / run_id
        d.mkdir()
        bs, nw = (16, 32, 64)[i % 3], (0, 2, 4, 8)[i % 4]
        manifest = {"schema_version": 1, "id": run_id, "name": f"run{i}", "status": "finished", "started_at": started,
                    "ended_at": started + 30.0, "heartbeat": started + 30.0, "exit_code": 0,
                    "command": ["python", "train.py"], "cwd": "/w", "host": "bench", "pid": 1000 + i,
                    "git": {"commit": "0123456789abcdef", "dirty": False},
                    "versions": {"python": "3.11", "torch": "2.13.0"}, "devices": [],
                    "config": {"batch_size": bs, "num_workers": nw, "lr": 0.01}, "world_size": 1,
                    "tags": ["main"] if i % 2 else ["dev"], "notes": "", "artifacts": []}
        (d / "run.json").write_text(json.dumps(manifest, indent=2))
        step = 0.05 * (1 + bs / 64) / (1 + nw / 8)
        lines = [json.dumps({"step": s, "time": started + s * step, "rank": 0, "loss": 2.0 / (1 + s), "samples": bs,
                             "step_time_s": step * (1 + 0.1 * rnd.random())}) for s in range(20)]
        (d / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall s, CPU s of the child, its stdout) of one process. Its output is read as bytes and
    decoded after the clock stops: decoding ``ls --json``'s 6 MB into text here took ~10 ms of
    this process, which the wall time would have charged to the child (the loop prints 6 bytes)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        err = out.stderr.decode(errors="replace")
        raise SystemExit(f"{' '.join(argv[:4])}...: exit {out.returncode}\n{err[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out.stdout.decode()


def median_of(repeat: int, fn) -> tuple[float, float, str]:  # noqa: ANN001 - a () -> timed(...) closure
    runs = [fn() for _ in range(repeat)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs), runs[-1][2]


def bench_store(n: int, work: Path, repeat: int) -> None:
    store = work / f"runs{n}"
    t = time.perf_counter()
    write_store(store, n)
    print(f"\n== {n} runs (written in {time.perf_counter() - t:.1f} s; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}) ==")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TORCHSCOPE_CACHE": str(work / "cache")}
    py = sys.executable
    ls = [py, "-m", "app", "ls", "--root", str(store), "--json"]

    def cold() -> tuple[float, float, str]:
        shutil.rmtree(store / INDEX_DIR, ignore_errors=True)
        return timed(ls, env)

    ls_cold = median_of(1, cold)  # builds the index: reads every run once
    # The index keeps the store folder's stamp only from a listing a second after the folder's last
    # change (the index folder made by the cold run is one): one listing then, untimed.
    time.sleep(STAMP_AGE_S + 0.05)
    timed([*ls, "--refresh"], env)

    def index_only() -> tuple[float, float, str]:
        (store / INDEX_DIR / SNAPSHOT_FILE).unlink(missing_ok=True)
        return timed(ls, env)

    def from_snapshot() -> tuple[float, float, str]:
        timed([*ls, "--refresh"], env)  # writes the snapshot file again (untimed)
        assert (store / INDEX_DIR / SNAPSHOT_FILE).exists()
        return timed(ls, env)

    # Interleaved rounds (loop, ls, floor, snapshot, loop, ...): a load that changes during the run
    # moves each side alike; each figure is the median of its rounds, each ratio the median of
    # the rounds' own ratios.
    rounds: list[tuple[tuple[float, float, str], ...]] = []
    for _ in range(repeat):
        rounds.append((timed([py, "-c", LOOP, str(store)], env), index_only(),
                       timed([py, "-c", STAT_FLOOR, str(store), SIGNATURE_FILES], env), from_snapshot()))

    def med(i: int) -> tuple[float, float, str]:
        return (statistics.median(r[i][0] for r in rounds), statistics.median(r[i][1] for r in rounds),
                rounds[-1][i][2])

    loop, ls_warm, floor, ls_snap = med(0), med(1), med(2), med(3)
    assert len(json.loads(ls_warm[2])["runs"]) == n
    assert ls_snap[2] == ls_warm[2] == ls_cold[2]
    refresh = median_of(repeat, lambda: timed([*ls, "--refresh"], env))
    paired = [r[1][0] / r[0][0] for r in rounds]
    paired_cpu = [r[1][1] / max(r[0][1], 1e-9) for r in rounds]
    snap_paired = [r[3][0] / r[0][0] for r in rounds]
    page = median_of(repeat, lambda: timed([py, "-c", PAGE, str(store)], env))
    first, second, first_cpu, second_cpu, shown, warm, warm_cpu, aged, aged_cpu = (float(x) for x in page[2].split())
    query_proc = median_of(repeat, lambda: timed([py, "-m", "app", "query", "--root", str(store), "--by",
                                                  "batch_size,num_workers", "--json"], env))
    query_in = median_of(repeat, lambda: timed([py, "-c", QUERY, str(store)], env))
    q_s, q_imports, q_cpu = (float(x) for x in query_in[2].split()[:3])

    def line(label: str, fig: tuple[float, float, str], goal: str = "") -> None:
        print(f"  {label:34s} wall {fig[0]:7.3f} s  CPU {fig[1]:7.3f} s   {fig[0] / loop[0]:6.3f}x loop (wall), "
              f"{fig[1] / max(loop[1], 1e-9):6.3f}x (CPU){goal}")

    line("loop: json.load every manifest", loop)
    line("ls --json, no index (builds it)", ls_cold)
    line("ls --json, index present", ls_warm, "   goal <= 0.2x (snapshot file removed)")
    print(f"  {'  per round, ls / loop':34s} wall {' '.join(f'{x:.3f}' for x in paired)} (median "
          f"{statistics.median(paired):.3f}x), CPU {' '.join(f'{x:.3f}' for x in paired_cpu)} "
          f"(median {statistics.median(paired_cpu):.3f}x)")
    line("ls --json from the snapshot file", ls_snap)
    print(f"  {'  per round, snapshot / loop':34s} wall {' '.join(f'{x:.3f}' for x in snap_paired)} (median "
          f"{statistics.median(snap_paired):.3f}x)")
    line("stat floor: stat the signature files", floor)
    line("ls --json --refresh (full check)", refresh)
    line("Runs page process (AppTest)", page)
    print(f"  {'Runs page first render':34s} wall {first:7.3f} s  CPU {first_cpu:7.3f} s   "
          f"{first / loop[0]:6.3f}x loop (wall), {first_cpu / max(loop[1], 1e-9):6.3f}x (CPU); "
          f"{int(shown)} rows on the first page")
    print(f"  {'Runs page second render':34s} wall {second:7.3f} s  CPU {second_cpu:7.3f} s   "
          f"{second / loop[0]:6.3f}x loop (wall), {second_cpu / max(loop[1], 1e-9):6.3f}x (CPU)   goal <= 0.05x "
          "(judged here: the goal's second run, right after the first)")
    print(f"  {'  after the Run-page warm-up':34s} wall {warm:7.3f} s  CPU {warm_cpu:7.3f} s   "
          f"{warm / loop[0]:6.3f}x loop (wall), {warm_cpu / max(loop[1], 1e-9):6.3f}x (CPU)")
    print(f"  {'  past the view age (token)':34s} wall {aged:7.3f} s  CPU {aged_cpu:7.3f} s   "
          f"{aged / loop[0]:6.3f}x loop (wall), {aged_cpu / max(loop[1], 1e-9):6.3f}x (CPU)")
    line("query --by batch_size,num_workers", query_proc)
    print(f"  {'query in one process':34s} wall {q_s:7.3f} s  CPU {q_cpu:7.3f} s   (index refresh + table + "
          f"DuckDB, after {q_imports:.2f} s of imports; goal well under 1 s at 1,000)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    p.add_argument("--repeat", type=int, default=3, help="runs per figure (median)")
    p.add_argument("--keep", type=Path, help="write the stores here and keep them (default: a temp folder)")
    p.add_argument("--no-compile", action="store_true", help="do not byte-compile the project's modules first")
    args = p.parse_args(argv)
    if not args.no_compile:
        import compileall

        for package in ("app", "profiler_agent"):
            compileall.compile_dir(ROOT / package, quiet=1)
        print("project modules byte-compiled (as installed); --no-compile to time without bytecode")
    work = args.keep or Path(tempfile.mkdtemp(prefix="ts-bench-catalog-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        for n in args.sizes:
            bench_store(n, work, args.repeat)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
