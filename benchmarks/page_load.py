"""Page loads in a real browser, each next to an empty Streamlit page loaded in the same run (benchmark).

    python -m benchmarks.page_load [--root STORE] [--run baseline] [--compare baseline,optimized] [--rounds 3]
                                   [--run-charts 2]

Four servers of the same streamlit run side by side: the app on a copy of the store, a page
whose whole script is one ``st.write``, and that page with a small plotly chart or a Vega-Lite one.
Headless Chromium (Playwright) then times, in each round:

- ``empty``: the empty page, loaded three times (the median is the round's yardstick);
- ``plotly_floor``: a page of one ``st.write`` and one three-bar plotly chart, loaded three times
  (median): what any page with a plotly chart costs in this browser before the app does any work
  (plotly.js, ~4.7 MB, is loaded and compiled in each fresh browser context). Not a goal, a second
  yardstick: pages with plotly charts pay it;
- ``vega_floor``: the same page with the three bars as a Vega-Lite chart (median of three): what
  the Run page's Overview, its Operators tab and Compare's first tab pay for their charts, which
  are Vega-Lite since issue 16's last round;
- ``run_page``: the first visit of the run's Run page, caches cold (the store is a fresh copy
  without ``.cache`` folders and the server has not seen the run), after the Runs page was
  opened once: the server is up and its modules are imported, as when a user arrives from the
  Runs page;
- ``tab_switch``: a click on another tab of that page (``--tab``, Operators by default), until every
  chart in it is drawn (and, for Operators, its table);
- ``compare``: the Compare page of the two runs (the second run's caches cold).

A page is ready when Streamlit's script is no longer running (``data-test-script-state`` is
``notRunning``) and the page's expected elements are visible: on the Run page every chart of the
Overview (``--run-charts``, 2 for an agent run with traces; plotly figures or Vega-Lite charts),
the switched-to tab's charts (and Operators' table), Compare's first table. Work the server does after that in the background (the rest of the trace analysis, the
comparison's op and kernel deltas) is not shown on those pages and counts for the next one; its
CPU seconds count for the page during which it ran. Reported: each time in seconds and its ratio
to the round's empty page; the goals of issue 16 are run_page ≤ 3×, tab_switch ≤ 1×,
compare ≤ 4×; and the CPU seconds the app's server spent on each (user + system, from the
process's own counters: on a busy machine the steadier figure). Without ``--root`` the sample
runs are recorded first (``sample_models.record``).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu"]
GOALS = {"run_page": 3.0, "tab_switch": 1.0, "compare": 4.0}
_READY = "[data-testid='stApp'][data-test-script-state='notRunning']"
# Every chart in the open tab drawn, once the script is done: each Vega-Lite chart has its marks and
# each plotly figure its svg (the first chart alone would stop the clock before the slower ones).
_ALL_DRAWN = """() => {
  const panel = [...document.querySelectorAll("[role='tabpanel']")].find(p => p.offsetParent !== null);
  if (!panel) return false;
  const vega = [...panel.querySelectorAll("[data-testid='stVegaLiteChart']")];
  const plotly = [...panel.querySelectorAll(".js-plotly-plot")];
  return vega.every(c => c.querySelector("svg.marks, canvas.marks")) && plotly.every(c => c.querySelector(".main-svg"));
}"""
# The open tab has its first chart drawn, or its rerun has ended with elements but no chart (the
# Kernels tab of a CPU run): the panel of a tab never opened is empty until its rerun fills it, and
# the script state reads "running" from before the first element until the run ends.
_TAB_BUILT = """() => {
  const panel = [...document.querySelectorAll("[role='tabpanel']")].find(p => p.offsetParent !== null);
  if (!panel) return false;
  if (panel.querySelector(".js-plotly-plot, [data-testid='stVegaLiteChart'] :is(svg, canvas).marks")) return true;
  const state = document.querySelector("[data-testid='stApp']")?.getAttribute("data-test-script-state");
  return state === "notRunning" && !panel.querySelector("[data-testid='stVegaLiteChart'], [data-testid='stPlotlyChart']")
    && !!panel.querySelector("[data-testid='stElementContainer']");
}"""
_TIMEOUT_MS = 300_000
# A drawn chart: a plotly figure, or a Vega-Lite chart's rendered marks.
# Vega-Lite draws on a canvas instead of SVG for large data (the Memory tab's timeline): either counts.
_CHART = ".js-plotly-plot, [data-testid='stVegaLiteChart'] :is(svg, canvas).marks"


def _server(script: Path, store: Path, home: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``streamlit run SCRIPT`` on a free port, as the browser tests start the app; (process, URL)."""
    from tests.browser.conftest import _free_port
    from tests.servers import wait_healthy

    port = _free_port()
    env = {**os.environ, "TORCHSCOPE_RUNS": str(store), "HOME": str(home), "PYTHONPATH": str(ROOT)}
    with open(home / f"{script.stem}.log", "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", str(script), "--server.headless", "true",
             "--server.port", str(port), "--server.address", "127.0.0.1",
             "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=ROOT,
            start_new_session=True)
    why = wait_healthy(proc, port, 120)
    if why is not None:
        from tests.browser.conftest import stop_server

        stop_server(proc)
        raise RuntimeError(f"streamlit on {script.name}: {why}")
    return proc, f"http://127.0.0.1:{port}"


def _timed(action: Callable[[], None], ready: Callable[[], None]) -> float:
    t = time.perf_counter()
    action()
    ready()
    return time.perf_counter() - t


class _ServerCpu:
    """CPU seconds (user + system, with its children's) that a server process has used so far."""

    def __init__(self, pid: int) -> None:
        import psutil

        self._proc = psutil.Process(pid)

    def __call__(self) -> float:
        t = self._proc.cpu_times()
        return t.user + t.system + t.children_user + t.children_system


def _visit(browser, url: str, expect: Callable[[object], None]) -> float:  # noqa: ANN001 - a Playwright browser
    context = browser.new_context(viewport={"width": 1440, "height": 1400})
    page = context.new_page()
    page.set_default_timeout(_TIMEOUT_MS)
    try:
        return _timed(lambda: page.goto(url), lambda: (expect(page), page.wait_for_selector(_READY)))
    finally:
        context.close()


def _run_page_and_tab(browser, url: str, cpu: Callable[[], float],  # noqa: ANN001 - a Playwright browser
                      charts: int, tab: str = "Operators") -> tuple[float, float, float, float]:
    context = browser.new_context(viewport={"width": 1440, "height": 1400})
    page = context.new_page()
    page.set_default_timeout(_TIMEOUT_MS)
    try:
        def first_ready() -> None:
            page.get_by_role("tab", name="Overview").wait_for()
            page.wait_for_selector(_READY)
            # every chart of the Overview drawn (time per step, the breakdown), not the first only;
            # plotly's or Vega-Lite's (whose marks are drawn once its svg.marks is in the page)
            page.locator(f"[role='tabpanel']:visible :is({_CHART})").nth(charts - 1).wait_for()
            page.wait_for_selector(_READY)

        c0 = cpu()
        cold = _timed(lambda: page.goto(url), first_ready)
        c1 = cpu()

        def tab_ready() -> None:  # every chart of the tab drawn; for the Operators tab also its table
            page.get_by_role("tab", name=tab).and_(page.locator("[aria-selected='true']")).wait_for()
            page.wait_for_function(_TAB_BUILT)  # its first chart, or its whole build for a tab without one
            if tab == "Operators":
                page.locator("[role='tabpanel']:visible [data-testid='stDataFrame']").first.wait_for()
            page.wait_for_selector(_READY)
            page.wait_for_function(_ALL_DRAWN)

        switch = _timed(lambda: page.get_by_role("tab", name=tab).click(), tab_ready)
        return cold, switch, c1 - c0, cpu() - c1
    finally:
        context.close()


_PLOTLY_PAGE = ('import plotly.graph_objects as go\nimport streamlit as st\n\nst.write("empty page")\n'
                'st.plotly_chart(go.Figure(go.Bar(x=[1, 2, 3], y=[3, 1, 2])))\n')
# The same three bars as a Vega-Lite chart, as the Overview's and Compare's first charts are drawn.
_VEGA_PAGE = ('import streamlit as st\n\nst.write("empty page")\n'
              'st.vega_lite_chart({"data": {"values": [{"x": 1, "y": 3}, {"x": 2, "y": 1}, {"x": 3, "y": 2}]},'
              ' "mark": "bar", "encoding": {"x": {"field": "x", "type": "ordinal"},'
              ' "y": {"field": "y", "type": "quantitative"}}})\n')


def _plotly_drawn(page) -> None:  # noqa: ANN001 - a Playwright page
    page.locator(".js-plotly-plot").first.wait_for()


def _vega_drawn(page) -> None:  # noqa: ANN001 - a Playwright page
    page.locator("[data-testid='stVegaLiteChart'] svg.marks").first.wait_for()


def _fresh_store(source: Path, into: Path) -> Path:
    store = into / "store"
    shutil.copytree(source, store, symlinks=True)
    for cache in list(store.rglob(".cache")):
        shutil.rmtree(cache, ignore_errors=True)
    return store


def _round(browser, source: Path, run: str, pair: str, work: Path, charts: int,  # noqa: ANN001
           tab: str = "Operators") -> dict[str, float]:
    from tests.browser.conftest import stop_server

    store = _fresh_store(source, work)
    empty_script = work / "empty_page.py"
    empty_script.write_text('import streamlit as st\n\nst.write("empty page")\n')
    floor_script = work / "plotly_page.py"
    floor_script.write_text(_PLOTLY_PAGE)
    vega_script = work / "vega_page.py"
    vega_script.write_text(_VEGA_PAGE)
    app, app_url = _server(ROOT / "app" / "streamlit_app.py", store, work)
    empty, empty_url = _server(empty_script, store, work)
    floor, floor_url = _server(floor_script, store, work)
    vega, vega_url = _server(vega_script, store, work)
    try:
        _visit(browser, empty_url, lambda p: p.get_by_text("empty page").wait_for())  # the servers warmed the
        _visit(browser, floor_url, _plotly_drawn)
        _visit(browser, vega_url, _vega_drawn)
        _visit(browser, f"{app_url}/", lambda p: p.get_by_role("heading", name="Runs").wait_for())  # same way
        empties = [_visit(browser, empty_url, lambda p: p.get_by_text("empty page").wait_for()) for _ in range(3)]
        floors = [_visit(browser, floor_url, _plotly_drawn) for _ in range(3)]
        vegas = [_visit(browser, vega_url, _vega_drawn) for _ in range(3)]
        cpu = _ServerCpu(app.pid)
        cold, switch, run_cpu, switch_cpu = _run_page_and_tab(browser, f"{app_url}/run?run={run}", cpu, charts, tab)
        before = cpu()
        compare = _visit(browser, f"{app_url}/compare?runs={pair}",
                         lambda p: p.locator("[data-testid='stDataFrame']").first.wait_for())
        compare_cpu = cpu() - before
    finally:
        stop_server(app)
        stop_server(empty)
        stop_server(floor)
        stop_server(vega)
    return {"empty": statistics.median(empties), "plotly_floor": statistics.median(floors),
            "vega_floor": statistics.median(vegas), "run_page": cold, "tab_switch": switch, "compare": compare,
            "run_page_cpu": run_cpu, "tab_switch_cpu": switch_cpu, "compare_cpu": compare_cpu}


def _record_samples(into: Path) -> Path:
    store = into / "samples"
    subprocess.run([sys.executable, "-m", "sample_models.record", "--root", str(store), "--steps", "20"],
                   check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True)
    return store


def _run_id(store: Path, name: str) -> str:
    from profiler_agent import runformat as rf

    for path, manifest in rf.list_runs(store).runs:
        if name in (manifest.name, path.name):
            return path.name
    raise SystemExit(f"no run named {name!r} in {store}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, help="a run store (default: record the sample runs)")
    parser.add_argument("--run", default="baseline", help="the run whose Run page is timed")
    parser.add_argument("--compare", default="baseline,optimized", help="the two runs compared")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--run-charts", type=int, default=2,
                        help="plotly charts the run's Overview draws, all awaited (2: time per step, breakdown)")
    parser.add_argument("--tab", default="Operators",
                        help="the Run page tab the tab switch opens (ready: every chart of it drawn; Operators: and its table)")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="page_load_") as tmp:
        source = args.root or _record_samples(Path(tmp))
        run = _run_id(source, args.run)
        pair = ",".join(_run_id(source, r) for r in args.compare.split(","))
        rows = []
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
            try:
                for i in range(args.rounds):
                    work = Path(tmp) / f"round{i}"
                    work.mkdir()
                    rows.append(_round(browser, source, run, pair, work, args.run_charts, args.tab))
                    r = rows[-1]
                    print(f"round {i + 1}: empty {r['empty']:.2f} s · plotly floor {r['plotly_floor']:.2f} s "
                          f"({r['plotly_floor'] / r['empty']:.1f}×) · Vega-Lite floor {r['vega_floor']:.2f} s "
                          f"({r['vega_floor'] / r['empty']:.1f}×) · " + " · ".join(
                        f"{k} {r[k]:.2f} s ({r[k] / r['empty']:.1f}×)" for k in GOALS)
                        + " · server CPU: " + ", ".join(f"{k} {r[k + '_cpu']:.2f} s" for k in GOALS), flush=True)
            finally:
                browser.close()
    print(f"\n{'page':<12} {'median s':>9} {'× empty':>8} {'goal':>6}")
    print(f"{'empty':<12} {statistics.median(r['empty'] for r in rows):>9.2f}")
    print(f"{'plotly floor':<12} {statistics.median(r['plotly_floor'] for r in rows):>9.2f} "
          f"{statistics.median(r['plotly_floor'] / r['empty'] for r in rows):>7.1f}×  (a page of one plotly chart)")
    print(f"{'vega floor':<12} {statistics.median(r['vega_floor'] for r in rows):>9.2f} "
          f"{statistics.median(r['vega_floor'] / r['empty'] for r in rows):>7.1f}×  (the same, one Vega-Lite chart)")
    ok = True
    for k, goal in GOALS.items():
        ratio = statistics.median(r[k] / r["empty"] for r in rows)
        ok &= ratio <= goal
        print(f"{k:<12} {statistics.median(r[k] for r in rows):>9.2f} {ratio:>7.1f}× {goal:>5.0f}×"
              f"{'' if ratio <= goal else '  over'}")
    print("server CPU (median s): " + ", ".join(
        f"{k} {statistics.median(r[k + '_cpu'] for r in rows):.2f}" for k in GOALS))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
