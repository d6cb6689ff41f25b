"""Page render times: each Run page tab and the Runs page's store table, cold and warm (benchmark).

    python -m benchmarks.page_render --root runs [--runs 1000]

Tabs are rendered in Streamlit's bare mode (no server: st.* calls build nothing visible), so the
numbers are the Python cost of loading, analysing and building figures, which is what a user
waits for; the browser's drawing time is not included. "cold" is the first render of a run (traces
parsed or read from the columnar cache), "warm" the second (Streamlit caches hit). With
``--runs N`` a synthetic store of N hand-made runs is timed for the Runs page as well.

``--apptest`` times what a user waits for on a first visit instead: the whole Run page (header,
every tab) through ``streamlit.testing.v1.AppTest``, each run in a fresh interpreter (imports
included) on a fresh copy of the store (no trace or analysis cache), then a second visit (warm).
``--profile DIR`` also writes a cProfile of each cold visit's script thread there.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _quiet() -> None:
    # Bare mode warns on every st.* call ("missing ScriptRunContext"); streamlit's loggers are
    # created lazily, so silence everything below ERROR rather than a list of names.
    logging.disable(logging.WARNING)


def time_tabs(run_dir: Path, root: Path) -> list[tuple[str, float, float]]:
    """(tab, cold seconds, warm seconds) for every tab of the Run page on ``run_dir``."""
    from app.ui.run_view import RUN_TABS, build_context

    out = []
    ctx = build_context(run_dir, root, None)
    for module in RUN_TABS:
        name = module.__name__.rsplit(".", 1)[-1]
        times = []
        for _ in range(2):
            t = time.perf_counter()
            try:
                module.render(ctx)
            except Exception as e:  # noqa: BLE001 - a benchmark reports and goes on
                print(f"  {name}: {type(e).__name__}: {e}", file=sys.stderr)
            times.append(time.perf_counter() - t)
        out.append((name, times[0], times[1]))
    return out


def time_store(n: int) -> tuple[float, float, float]:
    """(cold s, warm s, load_store s) to summarise a synthetic store of ``n`` runs."""
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import write_run  # the tests' realistic hand-made runs

    from app.ui.store import cached_store_view
    from app.workspace.catalog import load_catalog as load_store

    root = Path(tempfile.mkdtemp(prefix="ts-bench-store-"))
    for i in range(n):
        write_run(root, f"run{i}", steps=50, logs=False)
    t = time.perf_counter()
    cached_store_view(root)
    cold = time.perf_counter() - t
    t = time.perf_counter()
    cached_store_view(root)
    warm = time.perf_counter() - t
    t = time.perf_counter()
    load_store(root)
    plain = time.perf_counter() - t
    return cold, warm, plain


def time_page(run_dir: Path, root: Path, profile: Path | None = None) -> tuple[float, float, float, float]:
    """(cold s, cold CPU s, warm s, warm CPU s) of two AppTest visits of the Run page of ``run_dir``
    in this process. CPU = this process's user + system time (every thread): on a machine shared
    with other jobs it moves less than wall time. Call it in a fresh interpreter on a store
    without caches for a true first visit."""
    import cProfile

    from tests.app.helpers import (  # AppTest lives with the tests
        profiled_script_runs,
        run_page_app,
        use_store,
    )

    use_store(root)
    at = run_page_app(run_dir.name, timeout=900)
    prof = cProfile.Profile() if profile else None
    with profiled_script_runs(prof):
        t, c = time.perf_counter(), time.process_time()
        at.run()
        cold, cold_cpu = time.perf_counter() - t, time.process_time() - c
    if prof is not None and profile is not None:
        prof.dump_stats(str(profile))
    problems = [e.value for e in at.exception] + [e.value for e in at.error]
    if problems:
        print(f"  {run_dir.name}: {problems[:2]}", file=sys.stderr)
    t, c = time.perf_counter(), time.process_time()
    at.run()
    return cold, cold_cpu, time.perf_counter() - t, time.process_time() - c


def _apptest_store(root: Path, profile_dir: Path | None) -> None:
    """Each run of ``root``: a cold and a warm page visit in a fresh interpreter on a fresh copy."""
    import shutil
    import subprocess

    from profiler_agent import runformat as rf

    for run_dir, m in rf.list_runs(root).runs:
        tmp = Path(tempfile.mkdtemp(prefix="ts-bench-page-"))
        try:
            copy = tmp / "runs"
            shutil.copytree(root, copy, ignore=shutil.ignore_patterns(".cache"))
            prof = str(profile_dir / f"{run_dir.name}.prof") if profile_dir else ""
            code = ("import sys, logging; logging.disable(logging.WARNING); from pathlib import Path; "
                    "from benchmarks.page_render import time_page; "
                    f"r = time_page(Path({str(copy / run_dir.name)!r}), Path({str(copy)!r}), "
                    f"Path({prof!r}) if {prof!r} else None); print(' '.join(f'{{x:.2f}}' for x in r))")
            env = {**__import__("os").environ, "TORCHSCOPE_CACHE": str(tmp / "cache")}
            out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
            if out.returncode != 0:
                print(f"\n{m.name}: failed\n{out.stderr[-2000:]}")
                continue
            cold, cold_cpu, warm, warm_cpu = (float(x) for x in out.stdout.split()[-4:])
            print(f"\n{m.name} ({run_dir.name}): Run page first visit {cold:.2f} s (CPU {cold_cpu:.2f} s), "
                  f"second {warm:.2f} s (CPU {warm_cpu:.2f} s)")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", help="store whose runs' tabs are timed")
    p.add_argument("--runs", type=int, default=0, help="also time a synthetic store of this many runs")
    p.add_argument("--apptest", action="store_true",
                   help="time whole first and second Run page visits (AppTest, fresh interpreter, no caches)")
    p.add_argument("--profile", type=Path, help="with --apptest: write a cProfile of each cold visit here")
    args = p.parse_args(argv)
    _quiet()
    from profiler_agent import runformat as rf

    if args.root and args.apptest:
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
        _apptest_store(Path(args.root), args.profile)
    elif args.root:
        for run_dir, m in rf.list_runs(args.root).runs:
            rows = time_tabs(run_dir, Path(args.root))
            total_cold = sum(r[1] for r in rows)
            total_warm = sum(r[2] for r in rows)
            print(f"\n{m.name} ({run_dir.name}): all tabs cold {total_cold:.2f} s, warm {total_warm:.2f} s")
            for name, cold, warm in rows:
                print(f"  {name:10s} cold {cold * 1e3:8.1f} ms   warm {warm * 1e3:8.1f} ms")
    if args.runs:
        cold, warm, plain = time_store(args.runs)
        print(
            f"\nRuns page store of {args.runs} runs: cold {cold:.2f} s, warm {warm:.3f} s "
            f"(uncached load_store {plain:.2f} s); warm/cold = {warm / cold:.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
