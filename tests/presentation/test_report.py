"""Tests of app.presentation.report: number formatting, escaping, headline and document structure."""
from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from app.analysis.compare.comparison import diff_sides
from app.data.runs import load_run
from app.presentation.report import (
    format_ratio,
    format_report_html,
    format_report_markdown,
    format_value,
    format_verdict_text,
    headline,
    short_name,
)
from app.workspace.sides import CompareSide, SideKind
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout

EVIL = "<img src=x onerror=alert(1)>|`x`"


def _side(root: Path, name: str, mean: float) -> CompareSide:
    run_dir, _ = rf.create_run(root, name, config={"tag": EVIL})
    rng = np.random.default_rng(len(name))
    with rf.JsonlWriter(run_dir / layout.METRICS) as w:
        for i, t in enumerate(np.abs(rng.normal(mean, mean * 0.02, 30))):
            w.write({"step": i, "time": float(i), "rank": 0, "step_time_s": float(t)})
    steps = pd.DataFrame([{"rank": 0, "step": 100 + i, "duration_us": 1000.0, "cpu_exec_us": 1000.0}
                          for i in range(2)])
    ops = pd.DataFrame([{"name": EVIL, "calls": 2, "self_us": 2000.0 * mean, "total_us": 1.0, "device_self_us": 0.0}])
    analysis = SimpleNamespace(steps=steps, ops=ops, kernels=pd.DataFrame(columns=["name", "calls", "total_us"]))
    return CompareSide(label=name, path=run_dir, kind=SideKind.RUN, run=load_run(run_dir), analysis=analysis)


def test_format_value_units() -> None:
    assert format_value(0.0123, "s") == "12.30 ms"
    assert format_value(2.5, "s") == "2.500 s"
    assert format_value(3 * 2**30, "bytes") == "3.00 GiB"
    assert format_value(1500.0, "us") == "1.50 ms"
    assert format_value(None) == "–" and format_value(float("nan"), "s") == "–"
    assert format_ratio(0.5, 0.4, 0.6) == "0.500× [0.400, 0.600]"
    assert format_ratio(0.5) == "0.500×"


def test_short_name_collapses_templates() -> None:
    name = "void gemm_kernel<float, 128, " + "x" * 200 + ">(float const*, int)"
    assert short_name(name, 40) == "gemm_kernel<…>(…)"
    assert short_name("aten::mm") == "aten::mm"
    assert len(short_name("a" * 300, 50)) == 50


def test_markdown_and_text_escape_and_structure(tmp_path: Path) -> None:
    cmp = diff_sides(_side(tmp_path, "base", 0.1), _side(tmp_path, EVIL, 0.05))
    assert re.search(r"is 2\.0\d× faster than base", headline(cmp))
    md = format_report_markdown(cmp)
    assert "<img" not in md and "&lt;img" in md
    assert "\\|" in md  # pipes inside cells are escaped
    assert "#### Top 10 operator changes" in md
    text = format_verdict_text(cmp)
    assert "faster" in text and "top 10 operator changes" in text


def test_html_escapes_every_user_string(tmp_path: Path) -> None:
    cmp = diff_sides(_side(tmp_path, "base", 0.1), _side(tmp_path, EVIL, 0.05))
    page = format_report_html(cmp, [("Figure", "<div id='fig'></div>")])
    assert "<img" not in page
    assert page.count("&lt;img src=x onerror=alert(1)&gt;") >= 3  # title, headline, ops and config tables
    assert "<div id='fig'></div>" in page  # figure fragments are inserted as given


@pytest.mark.parametrize("verdict_word", ["no significant difference"])
def test_headline_for_same(tmp_path: Path, verdict_word: str) -> None:
    a = _side(tmp_path, "a", 0.1)
    assert verdict_word in headline(diff_sides(a, a))


def test_report_figures_and_waterfall_add_up(tmp_path: Path) -> None:
    from app.charts.compare import figures_to_html, make_report_figures, make_waterfall_figure

    base, cand = _side(tmp_path, "base", 0.1), _side(tmp_path, "cand", 0.05)
    cand.analysis.steps["duration_us"] = 600.0
    cand.analysis.steps["cpu_exec_us"] = 600.0
    cmp = diff_sides(base, cand)
    wf = make_waterfall_figure(cmp.breakdown, steps=cmp.breakdown_steps).data[0]
    n_a, n_b = cmp.breakdown_steps
    # The ends are trace means, labelled so nobody reads them as the verdict's median step time.
    assert list(wf.x) == [f"baseline: mean profiled step ({n_a} steps)", "cpu_exec",
                          f"candidate: mean profiled step ({n_b} steps)"]
    assert wf.y[0] + sum(wf.y[1:-1]) == pytest.approx(wf.y[-1])  # the bars add up to the candidate step
    figs = make_report_figures(cmp)
    titles = [t for t, _ in figs]
    assert titles[:2] == ["Step times", "Where the time went"] and "Operator changes" in titles
    html = figures_to_html(figs)
    assert len(html) == len(figs)
    assert len(html[0][1]) > 1_000_000 and len(html[1][1]) < 200_000  # plotly.js only in the first
