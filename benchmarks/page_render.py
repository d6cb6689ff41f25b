"""Page render times: each Run page tab and the Runs page's store table, cold and warm (benchmark).

    python -m benchmarks.page_render --root runs [--runs 1000]

Tabs are rendered in Streamlit's bare mode (no server: st.* calls build nothing visible), so the
numbers are the Python cost of loading, analysing and building figures, which is what a user
waits for; the browser's drawing time is not included. "cold" is the first render of a run (traces
parsed or read from the columnar cache), "warm" the second (Streamlit caches hit). With
``--runs N`` a synthetic store of N hand-made runs is timed for the Runs page as well.
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
    for name in (
        "streamlit",
        "streamlit.runtime.caching.cache_data_api",
        "streamlit.runtime.scriptrunner_utils.script_run_context",
    ):
        logging.getLogger(name).setLevel(logging.ERROR)


def time_tabs(run_dir: Path, root: Path) -> list[tuple[str, float, float]]:
    """(tab, cold seconds, warm seconds) for every tab of the Run page on ``run_dir``."""
    from app.ui.run_view import build_context
    from app.ui.tabs import load_tab_modules

    out = []
    ctx = build_context(run_dir, root, None)
    for name, module in load_tab_modules():
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

    from app.data.runs import load_store
    from app.ui.store import cached_store_view

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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", help="store whose runs' tabs are timed")
    p.add_argument("--runs", type=int, default=0, help="also time a synthetic store of this many runs")
    args = p.parse_args(argv)
    _quiet()
    from profiler_agent import runformat as rf

    if args.root:
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
