"""The Run page's first visit does only what the Overview shows (issue 16): the StepAnalysis of the
run's traces (no op, kernel or breakdown table) and the open tab's module; the numbers are those of
the whole TraceAnalysis; the other tabs compute the rest, reusing what the Overview cached."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from app.analysis.run.summary import compute_peak_memory
from app.analysis.trace.summary import ANALYSIS_TABLES, STEP_TABLES, analyze_traces
from app.charts.steps import DEVICE_CATEGORIES, breakdown_chart
from app.data import trace_analysis_cache as tac
from app.presentation.names import final_name
from app.presentation.units import format_bytes
from app.workspace import traces as ws_traces
from app.workspace.artifacts import load_run
from app.workspace.catalog_rows import row_from_records
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout
from tests.app.helpers import assert_clean, open_app, show_tab
from tests.conftest import PROJECT_ROOT, SHARED_DATA

TINY = PROJECT_ROOT / "tests" / "data" / "traces" / "cpu_torch213" / "tiny_mlp.pt.trace.json.gz"
TWO_RANKS = SHARED_DATA / "traces" / "two_ranks"


def _traced_run(make_run: Any, name: str = "traced") -> Path:
    """An agent-like run (metrics, system samples) with the tiny CPU trace (3 profiled steps)."""
    run = make_run(name)
    (run / layout.TRACES_DIR).mkdir(exist_ok=True)
    shutil.copy(TINY, run / layout.TRACES_DIR / "host_1_rank0.1700000000000000000.pt.trace.json.gz")  # the agent names it so
    return run


def _count_analyses(monkeypatch: pytest.MonkeyPatch) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """Record (tables asked for, tables already known) of every analysis the workspace computes."""
    asked: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    real = ws_traces.compute_analysis_tables

    def counted(traces: Any, names: Any = ANALYSIS_TABLES, *, known: Any = None) -> dict[str, pd.DataFrame]:
        asked.append((tuple(names), tuple(sorted(known or {}))))
        return real(traces, names, known=known)

    monkeypatch.setattr(ws_traces, "compute_analysis_tables", counted)
    return asked


def _cached_tables(run: Path) -> list[list[str]]:
    return [json.loads((d / "analysis.json").read_text())["tables"]
            for d in sorted(run.rglob(f"{tac.PREFIX}*")) if d.is_dir()]


def _join_prefetches() -> None:
    from app.ui import cache

    for thread in list(cache._prefetches.values()):
        thread.join(timeout=120)
        assert not thread.is_alive()


def _chart_data(block: Any) -> list[list[dict[str, Any]]]:
    return [[layer["data"] for layer in json.loads(c.proto.spec)["layer"]] for c in block.get("vega_lite_chart")]


def test_overview_first_visit_computes_only_the_step_tables(monkeypatch: pytest.MonkeyPatch, make_run: Any) -> None:
    run = _traced_run(make_run)
    _join_prefetches()  # another test's background analysis must not be counted here
    asked = _count_analyses(monkeypatch)
    at = open_app(monkeypatch, run.parent, run=run.name)
    assert_clean(at)
    assert asked[0] == (STEP_TABLES, ())  # the page drew on the step analysis alone: no ops, kernels, breakdown

    # The same numbers as the whole analysis (the pure one, without any cache)
    full = analyze_traces(ws_traces.load_trace_set(run, use_cache=False))
    peak, source = compute_peak_memory(load_run(run).system, None, full.memory_peaks)
    assert source != "rss"  # the tile takes the traces' tensor peak: the step analysis was read for it
    tiles = {m.label: m.value for m in at.metric}
    assert format_bytes(peak) in tiles.values()
    expected = [layer["data"] for layer in json.loads(json.dumps(breakdown_chart(full.steps, DEVICE_CATEGORIES)))["layer"]]
    assert expected in _chart_data(at)  # "Where a step's time goes", bar for bar

    # Once drawn, the Overview left the rest to a background thread, which reads the step tables back
    _join_prefetches()
    assert asked[1:] == [(ANALYSIS_TABLES, tuple(sorted(STEP_TABLES)))]  # the steps are not parsed again
    assert _cached_tables(run) == [sorted(ANALYSIS_TABLES)]
    operators = show_tab(at, "Operators")  # the tab that needs the op table finds it computed
    assert_clean(at)
    assert len(asked) == 2
    shown = operators.dataframe[0].value
    assert len(shown) and len(full.ops)

    show_tab(at, "Overview")  # back: the cached step analysis, nothing computed
    assert_clean(at)
    assert len(asked) == 2 and {m.label: m.value for m in at.metric} == tiles


def test_the_step_analysis_is_the_whole_analysis_s_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sets = [TINY] + ([TWO_RANKS] if TWO_RANKS.is_dir() else [])
    for source in sets:
        folder = tmp_path / source.name
        (shutil.copytree if source.is_dir() else lambda a, b: (b.mkdir(), shutil.copy(a, b)))(source, folder)
        full = analyze_traces(ws_traces.load_trace_set(folder, use_cache=False))
        steps = ws_traces.analyze_trace_steps(ws_traces.load_trace_set(folder))  # cold: computed and cached
        again = ws_traces.analyze_trace_steps(ws_traces.load_trace_set(folder))
        assert not steps.from_cache and again.from_cache
        for part in (steps, again):
            for name in ("steps", "memory_peaks", "overlap", "collectives"):
                pd.testing.assert_frame_equal(getattr(part, name), getattr(full, name), check_exact=True)
            assert part.rank_summary == full.rank_summary and part.traces == full.traces
        # the whole analysis then reads the step tables back and computes the others: the same tables
        later = ws_traces.analyze_trace_set(ws_traces.load_trace_set(folder))
        assert not later.from_cache
        for name in ("steps", "breakdown", "ops", "kernels", "memory_peaks", "rank_skew", "overlap", "collectives"):
            pd.testing.assert_frame_equal(getattr(later, name), getattr(full, name), check_exact=True)
        assert ws_traces.analyze_trace_set(ws_traces.load_trace_set(folder)).from_cache
        assert ws_traces.analyze_trace_steps(ws_traces.load_trace_set(folder)).from_cache  # from the whole entry
    assert len(sets) == 1 or len(full.rank_summary) == 2  # the two-rank set has a rank summary to compare


def test_the_run_page_imports_only_the_open_tab() -> None:
    code = ("import sys, app.ui.run_view, app.ui.tabs.overview\n"
            "print(sorted(m for m in sys.modules if m.startswith(('app.ui.tabs.', 'app.analysis.advisor', "
            "'app.analysis.compare', 'app.ui.rank_view', 'app.workspace.sides'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT_ROOT,
                         env={"PYTHONPATH": str(PROJECT_ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    # the Overview's module alone: not the advisor (Findings), the comparison (Ranks), the other tabs
    assert json.loads(out.stdout.strip().replace("'", '"')) == ["app.ui.tabs.overview"]


def test_every_tab_spec_names_its_module_s_title() -> None:
    from app.ui.run_view import RUN_TAB_SPECS, RUN_TABS

    assert [s.title for s in RUN_TAB_SPECS] == [m.TITLE for m in RUN_TABS]
    assert [s.load() for s in RUN_TAB_SPECS] == list(RUN_TABS)


def test_a_final_value_has_one_name() -> None:
    from app.analysis.run.final_value import final_label

    # the Metrics chart's line, the Overview tile and the Runs page say "final loss"
    assert final_label(final_name("loss"), 4) == "final loss (median of last 4)"
    assert final_name("val_loss") == "validation loss" and final_name("my_score") == "my_score"


def test_catalog_row_of_a_trace_only_import_reads_its_peak(tmp_path: Path) -> None:
    from app.workspace.imports import SUMMARY_KEY

    run = tmp_path / "run"
    run.mkdir()
    manifest = rf.Manifest(id="run", name="imported", extra={SUMMARY_KEY: {"steps": 3, "step_time_s": 0.2,
                                                                           "peak_memory_bytes": 52_000_000}})
    row = row_from_records(run, manifest, rf.RunStatus.FINISHED, [], [])
    assert row["peak_memory_bytes"] == 52_000_000
    sampled = row_from_records(run, manifest, rf.RunStatus.FINISHED, [], [{"time": 0.0, "rss_bytes": 7 << 20}])
    assert sampled["peak_memory_bytes"] == 7 << 20  # system samples, when there are any, come first
    for bad in (None, "many", float("nan"), -1, True):
        odd = rf.Manifest(id="run", name="x", extra={SUMMARY_KEY: {"peak_memory_bytes": bad}})
        assert row_from_records(run, odd, rf.RunStatus.FINISHED, [], [])["peak_memory_bytes"] is None
