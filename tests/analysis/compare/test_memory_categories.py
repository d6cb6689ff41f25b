"""Per-category memory deltas on real torch.profiler memory timelines (tiny MLPs recorded here)."""
from __future__ import annotations

import gzip
from pathlib import Path

import pandas as pd
import pytest

from app.analysis.compare.memory_categories import (
    CATEGORY_DIFF_COLUMNS,
    combine_category_peaks,
    compare_side_memory_categories,
    compute_category_peaks,
    diff_memory_categories,
    memory_category_records,
)
from app.analysis.memory.snapshot import compute_category_peak, compute_category_timeline
from app.data.snapshot import load_memory_timeline_raw
from app.workspace.memory import load_category_peaks, load_memory_categories
from app.workspace.sides import load_side
from tests.memory_timeline_helpers import add_memory_timeline, mlp_param_bytes, record_memory_timeline

SMALL, BIG = 128, 512


@pytest.fixture(scope="module")
def timelines(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    folder = tmp_path_factory.mktemp("memory_timelines")
    return {h: record_memory_timeline(folder / f"mlp{h}.raw.json.gz", hidden=h) for h in (SMALL, BIG)}


def _peaks(path: Path) -> pd.DataFrame:
    return compute_category_peaks(load_memory_timeline_raw(path))


def _row(table: pd.DataFrame, category: str) -> pd.Series:
    return table.set_index("category").loc[category]


def test_parameters_gradients_and_momentum_are_exactly_the_model_size(timelines) -> None:
    for hidden, path in timelines.items():
        t = _peaks(path)
        assert t["category"].iloc[0] == "total"
        for cat in ("parameter", "gradient", "optimizer_state"):  # SGD momentum: one buffer per parameter
            assert _row(t, cat)["peak_bytes"] == mlp_param_bytes(hidden), (hidden, cat)
        # The at-peak split adds up to the total peak, and no category exceeds its own peak.
        body = t[t["category"] != "total"]
        assert body["at_peak_bytes"].sum() == _row(t, "total")["at_peak_bytes"] == _row(t, "total")["peak_bytes"]
        assert (body["at_peak_bytes"] <= body["peak_bytes"]).all()
        assert _row(t, "activation")["peak_bytes"] > 0


def test_peaks_agree_with_the_memory_tab_category_timeline(timelines) -> None:
    raw = load_memory_timeline_raw(timelines[BIG])
    t = _peaks(timelines[BIG])
    full = compute_category_timeline(raw, max_points=10**9)
    assert _row(t, "total")["peak_bytes"] == int(full["total_bytes"].max())
    for cat in t["category"][1:]:
        assert _row(t, cat)["peak_bytes"] == max(int(full[f"{cat}_bytes"].max()), 0)
    at = compute_category_peak(full).set_index("category")["bytes"]
    for cat, b in at.items():
        assert _row(t, cat)["at_peak_bytes"] == b


def test_shared_real_timeline(shared_data: Path) -> None:
    path = shared_data / "memory" / "memory_timeline.raw.gz"
    if not path.is_file():
        pytest.skip("no shared memory timeline")
    t = _peaks(path)
    assert _row(t, "total")["peak_bytes"] == t["at_peak_bytes"].iloc[1:].sum()
    assert _row(t, "activation")["at_peak_bytes"] / _row(t, "total")["at_peak_bytes"] > 0.5


def test_diff_of_small_vs_big_model(timelines) -> None:
    d = diff_memory_categories(_peaks(timelines[SMALL]), _peaks(timelines[BIG])).set_index("category")
    grow = mlp_param_bytes(BIG) - mlp_param_bytes(SMALL)
    for cat in ("parameter", "gradient", "optimizer_state"):
        assert d.loc[cat, "peak_delta_bytes"] == grow
        assert d.loc[cat, "peak_ratio"] == pytest.approx(mlp_param_bytes(BIG) / mlp_param_bytes(SMALL))
    assert d.loc["total", "delta_bytes"] == d.loc["total", "candidate_bytes"] - d.loc["total", "baseline_bytes"] > 0
    # Mirror image: swapping the sides flips every delta.
    back = diff_memory_categories(_peaks(timelines[BIG]), _peaks(timelines[SMALL])).set_index("category")
    assert (back["delta_bytes"] == -d["delta_bytes"]).all()
    assert (back["peak_delta_bytes"] == -d["peak_delta_bytes"]).all()


def test_missing_side_is_null_not_zero(timelines) -> None:
    d = diff_memory_categories(None, _peaks(timelines[SMALL]))
    assert list(d.columns) == CATEGORY_DIFF_COLUMNS
    assert d["baseline_bytes"].isna().all() and d["baseline_peak_bytes"].isna().all()
    assert d["delta_bytes"].isna().all() and d["ratio"].isna().all()
    assert (d["candidate_bytes"].notna()).all()
    recs = memory_category_records(d)
    assert recs[0]["category"] == "total" and recs[0]["baseline_bytes"] is None
    assert isinstance(recs[0]["candidate_bytes"], int) and recs[0]["candidate_bytes"] > 0
    assert diff_memory_categories(None, None).empty


def test_category_only_on_one_side_is_zero_on_the_other() -> None:
    a = pd.DataFrame({"category": ["total", "parameter"], "peak_bytes": [100, 100], "at_peak_bytes": [100, 100]})
    b = pd.DataFrame({"category": ["total", "parameter", "activation"], "peak_bytes": [300, 100, 250],
                      "at_peak_bytes": [300, 100, 200]})
    d = diff_memory_categories(a, b).set_index("category")
    assert d.loc["activation", "baseline_bytes"] == 0 and d.loc["activation", "delta_bytes"] == 200
    assert pd.isna(d.loc["activation", "ratio"])  # nothing to divide by
    assert d.loc["total", "ratio"] == pytest.approx(3.0)


def test_windows_combine_peak_per_category_and_split_of_highest_window() -> None:
    w1 = pd.DataFrame({"category": ["total", "activation", "gradient"], "peak_bytes": [500, 400, 300],
                       "at_peak_bytes": [500, 400, 100]})
    w2 = pd.DataFrame({"category": ["total", "activation", "gradient"], "peak_bytes": [600, 200, 450],
                       "at_peak_bytes": [600, 150, 450]})
    c = combine_category_peaks([w1, w2]).set_index("category")
    assert c.loc["activation", "peak_bytes"] == 400 and c.loc["gradient", "peak_bytes"] == 450
    assert c.loc["total", "at_peak_bytes"] == 600 and c.loc["activation", "at_peak_bytes"] == 150


def test_run_folder_lowest_rank_and_unreadable_window(timelines, tmp_path: Path) -> None:
    run = tmp_path / "run"
    add_memory_timeline(run, timelines[SMALL], rank=0, time_ns=1)
    add_memory_timeline(run, timelines[BIG], rank=1, time_ns=2)  # other rank: not used
    peaks = load_category_peaks(run)
    assert peaks.rank == 0 and len(peaks.files) == 1
    assert _row(peaks.table, "parameter")["peak_bytes"] == mlp_param_bytes(SMALL)
    bad = add_memory_timeline(run, timelines[SMALL], rank=0, time_ns=3)
    bad.write_bytes(gzip.compress(b'{"not": "a list"}'))
    peaks = load_category_peaks(run)
    assert len(peaks.files) == 1 and len(peaks.problems) == 1 and bad.name in peaks.problems[0]
    assert load_category_peaks(tmp_path / "nothing") is None


def test_compare_sides_of_agent_runs(timelines, make_run) -> None:
    base, cand = make_run("baseline"), make_run("candidate")
    add_memory_timeline(base, timelines[SMALL])
    add_memory_timeline(cand, timelines[BIG])
    cmp = compare_side_memory_categories(load_side(base, with_traces=False), load_side(cand, with_traces=False))
    assert cmp.available and not cmp.notes
    assert _row(cmp.table, "parameter")["peak_delta_bytes"] == mlp_param_bytes(BIG) - mlp_param_bytes(SMALL)
    only = load_memory_categories(base, make_run("none"))
    assert only.candidate is None and only.table["candidate_bytes"].isna().all()
    assert any("--memory-timeline" in n for n in only.notes)
    neither = load_memory_categories(make_run("a"), None)
    assert not neither.available and not neither.notes


def test_reports_list_memory_categories_and_the_peak_quantity(timelines, make_run) -> None:
    from app.analysis.compare.comparison import diff_sides
    from app.presentation.report import format_report_html, format_report_markdown, format_verdict_text

    base, cand = make_run("small"), make_run("big")
    add_memory_timeline(base, timelines[SMALL])
    add_memory_timeline(cand, timelines[BIG])
    cmp = diff_sides(load_side(base, with_traces=False), load_side(cand, with_traces=False))
    grow = f"+{(mlp_param_bytes(BIG) - mlp_param_bytes(SMALL)) / 1024:,.2f} KiB"
    md = format_report_markdown(cmp)
    assert "#### Memory by category" in md and "| parameter | " in md and grow in md
    assert "peak memory (host RSS)" in md
    text = format_verdict_text(cmp)
    assert "memory by category" in text and grow in text
    assert "<h2>Memory by category" in format_report_html(cmp) and grow in format_report_html(cmp)
    plain = diff_sides(load_side(make_run("a"), with_traces=False), load_side(make_run("b"), with_traces=False))
    assert "Memory by category" not in format_report_markdown(plain)
    assert "--memory-timeline" in format_report_html(plain)


_AGENT_JOB = """
import sys
import torch
from profiler_agent import ProfileSchedule, Run

hidden = int(sys.argv[2])
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
with Run("mlp", root=sys.argv[1], memory_timeline=True, graph=False,
         schedule=ProfileSchedule(wait=1, warmup=1, active=2)) as run:
    for _ in range(6):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        run.step(loss=loss.item())
"""


def _record_with_agent(root: Path, hidden: int) -> Path:
    """A run of the tiny MLP recorded by the agent's API with ``memory_timeline=True``, in a fresh
    process: torch's CPU memory reporter keeps counting tensors that earlier profiling sessions of
    the same process allocated, which would shift the trace's totals."""
    import os
    import subprocess
    import sys

    from profiler_agent import runformat as rf

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    proc = subprocess.run([sys.executable, "-c", _AGENT_JOB, str(root), str(hidden)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (run_dir, _), = rf.list_runs(root).runs
    return run_dir


def test_agent_recorded_timeline_agrees_with_the_trace_peak(tmp_path: Path) -> None:
    run_dir = _record_with_agent(tmp_path, SMALL)
    peaks = load_category_peaks(run_dir)
    assert peaks is not None and len(peaks.files) == 1 and not peaks.problems
    assert _row(peaks.table, "parameter")["peak_bytes"] == mlp_param_bytes(SMALL)
    # The first window of a process: the timeline's total = the trace's allocator peak + what
    # existed before the window (parameters, momentum buffers, the batch).
    side = load_side(run_dir)
    trace_peak = int(side.analysis.memory_peaks["peak_allocated_bytes"].max())
    assert _row(peaks.table, "total")["peak_bytes"] - peaks.preexisting_bytes == trace_peak
    assert peaks.preexisting_bytes > 2 * mlp_param_bytes(SMALL)
