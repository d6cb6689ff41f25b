"""app.analysis.run.step_time: the one headline step time, and its equality with Compare's step table."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from app.analysis.compare import steps as cs
from app.analysis.compare.many_runs import compute_sweep_table
from app.analysis.run.step_time import DropReason, auto_warmup, steady_step_time
from app.analysis.run.summary import compute_step_time_stats
from app.data import runs as runs_data
from app.workspace.catalog_rows import load_run_row
from app.workspace.sides import load_side
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout


def _steps(times: list[float], **extra: object) -> list[dict]:
    return [{"step": i, "rank": 0, "step_time_s": t, "samples": 32, **extra} for i, t in enumerate(times)]


def test_auto_warmup_matches_compare() -> None:
    for n in range(120):
        assert auto_warmup(n) == cs.auto_warmup(n, cs.StepSource.METRICS), n
        assert auto_warmup(n, from_trace=True) == cs.auto_warmup(n, cs.StepSource.TRACE) == 0


def test_warmup_steps_are_dropped() -> None:
    # 50 steps: K = min(5, 50 // 10) = 5 slow first steps dropped
    st = steady_step_time(_steps([3.0] * 5 + [0.2] * 45))
    assert st.value_s == 0.2 and st.n_used == 45 and st.warmup == 5
    assert st.dropped == {float(s): DropReason.WARMUP for s in range(5)}
    # 200 steps: K is capped at 5; the 6th slow step is kept
    st = steady_step_time(_steps([3.0] * 6 + [0.2] * 194))
    assert st.dropped_count(DropReason.WARMUP) == 5 and max(st.kept_s) == 3.0
    # an explicit K, as `torchscope diff --warmup`
    assert steady_step_time(_steps([3.0] * 6 + [0.2] * 194), warmup_steps=0).n_used == 200


def test_profiled_steps_are_dropped_unless_all_are() -> None:
    rows = _steps([0.1] * 20)
    for r in rows[8:11]:
        r.update(profiled=True, step_time_s=0.9)
    st = steady_step_time(rows)
    assert st.value_s == 0.1 and st.dropped_count(DropReason.PROFILED) == 3
    # steps known from the traces (Compare passes them) count as profiled too
    st = steady_step_time(_steps([0.1] * 10 + [0.9] * 2 + [0.1] * 8), profiled_steps={10, 11})
    assert st.value_s == 0.1 and sorted(s for s, r in st.dropped.items() if r == "profiled") == [10.0, 11.0]
    # every step profiled: nothing unprofiled to use, so none is dropped for it
    st = steady_step_time(_steps([0.1, 0.2, 0.3, 0.4], profiled=True))
    assert st.dropped == {} and st.value_s == 0.25
    # a warm-up step that was also profiled is dropped as warm-up
    rows = _steps([0.1] * 20)
    rows[0]["profiled"] = True
    assert steady_step_time(rows).dropped[0.0] == DropReason.WARMUP


def test_evaluation_steps_are_dropped() -> None:
    rows = _steps([0.1] * 20)
    rows[9]["step_time_s"] = 2.0
    rows.append({"step": 9, "rank": 0, "val_loss": 0.5})  # the agent logs evaluations on their own line
    rows.append({"step": 20, "rank": 0, "val_acc": 0.9})  # after the last step: no step time, no effect
    rows.append({"step": 15, "rank": 0, "val_note": "text"})  # not a number: not an evaluation
    st = steady_step_time(rows)
    assert st.dropped == {0.0: "warm-up", 1.0: "warm-up", 9.0: "evaluation"}
    assert st.value_s == 0.1 and st.n_used == 17
    # only evaluation steps left: they are kept
    st = steady_step_time([{"step": 0, "step_time_s": 1.0, "eval_loss": 1}, {"step": 1, "step_time_s": 2.0, "eval_loss": 1}])
    assert st.dropped == {} and st.value_s == 1.5


def test_multi_rank_takes_the_slowest_rank_per_step() -> None:
    rows = _steps([0.10, 0.30, 0.20]) + [
        {"step": s, "rank": 1, "step_time_s": t, "samples": 32} for s, t in enumerate([0.40, 0.10, 0.20])
    ]
    st = steady_step_time(rows)
    assert st.times_s == (0.40, 0.30, 0.20) and st.value_s == 0.30
    assert st.samples == (64.0, 64.0, 64.0) and st.samples_per_s == pytest.approx(64 / 0.30)
    assert steady_step_time(rows, rank=1).value_s == 0.20
    # a line without a rank is rank 0's
    assert steady_step_time([{"step": 0, "step_time_s": 0.5}], rank=0).value_s == 0.5


def test_too_few_and_bad_steps() -> None:
    empty = steady_step_time([])
    assert empty.value_s is None and empty.n_used == 0 and empty.mean_s is None and empty.samples_per_s is None
    assert steady_step_time([{"step": 0, "loss": 1.0}]).value_s is None  # no step time logged
    # 1-3 steps: no warm-up dropped (K never leaves fewer than 3 steps)
    assert steady_step_time(_steps([5.0])).value_s == 5.0
    assert steady_step_time(_steps([5.0, 1.0, 1.0])).value_s == 1.0
    assert steady_step_time(_steps([5.0, 1.0, 1.0])).warmup == 0
    # missing, non-numeric, non-finite, non-positive and bool times and steps are ignored
    bad = [{"step": 0, "step_time_s": None}, {"step": 1, "step_time_s": "x"}, {"step": 2, "step_time_s": math.nan},
           {"step": 3, "step_time_s": -1.0}, {"step": 4, "step_time_s": 0}, {"step": 5, "step_time_s": True},
           {"step": None, "step_time_s": 9.0}, {"step": "a", "step_time_s": 9.0}, {"step": 6, "step_time_s": 0.25}]
    st = steady_step_time(bad)
    assert st.steps == (6.0,) and st.value_s == 0.25
    # throughput needs samples on every kept step
    rows = _steps([0.1] * 4)
    del rows[2]["samples"]
    assert steady_step_time(rows).samples_per_s is None


def test_trace_steps_drop_nothing() -> None:
    rows = [{"step": s, "rank": 0, "step_time_s": t, "profiled": True, "val_loss": 1.0}
            for s, t in enumerate([1.0, 0.1, 0.2])]
    st = steady_step_time(rows, from_trace=True)
    assert st.dropped == {} and st.value_s == 0.2


# --- Equality with Compare (app.analysis.compare.steps) -----------------------------------------


def _rewrite_metrics(run_dir: Path, records: list[dict]) -> None:
    (run_dir / layout.METRICS).write_text("".join(json.dumps(r) + "\n" for r in records))


def _compare_median(run_dir: Path) -> tuple[float, int]:
    side = load_side(run_dir, with_traces=True)
    table, _ = cs.compute_step_times(side)
    kept = cs.kept_step_times(table)
    return float(np.median(kept)), len(kept)


def _assert_same_everywhere(run_dir: Path) -> float:
    """Compare's median == the function's == the catalog row's (ls, Runs page) == the Overview's."""
    expected, n = _compare_median(run_dir)
    records = rf.read_jsonl(run_dir / layout.METRICS).records
    st = steady_step_time(records)
    assert st.value_s == expected and st.n_used == n
    row, _ = load_run_row(run_dir)
    assert row["step_time_s"] == expected and row["step_time_steps"] == n
    stats = compute_step_time_stats(runs_data.load_run(run_dir).metrics)
    assert stats is not None and stats.median_s == expected and stats.steps == n
    sweep, _ = compute_sweep_table([runs_data.load_run(run_dir)])  # the Compare page's sweep view
    assert sweep["median_step_time_s"].iloc[0] == expected
    return expected


@pytest.mark.parametrize("steps", [1, 2, 3, 4, 12, 20, 37, 60])
def test_hand_made_runs_equal_compare(make_run, steps: int) -> None:  # noqa: ANN001
    _assert_same_everywhere(make_run(f"n{steps}", steps=steps))


def test_hand_made_multi_rank_profiled_and_evaluation_run_equals_compare(make_run) -> None:  # noqa: ANN001
    run_dir = make_run("mixed", steps=40, ranks=3)
    records = rf.read_jsonl(run_dir / layout.METRICS).records
    for r in records:
        if 8 <= r["step"] <= 10:
            r["profiled"] = True
            r["step_time_s"] *= 2.5
        if r["step"] == 17 and r["rank"] == 2:
            r["step_time_s"] = 0.9  # the slow rank decides
    records += [{"step": 9, "rank": 0, "val_loss": 1.2}, {"step": 27, "rank": 0, "val_acc": 0.7},
                {"step": 40, "rank": 0, "val_loss": 1.0}]
    _rewrite_metrics(run_dir, records)
    value = _assert_same_everywhere(run_dir)
    st = steady_step_time(records)
    assert st.describe_dropped() == "4 warm-up, 3 profiled, 1 evaluation"  # step 9: profiled first
    assert value < 0.9


def test_hand_made_all_profiled_and_all_but_evaluation_equal_compare(make_run) -> None:  # noqa: ANN001
    run_dir = make_run("allprof", steps=8)
    records = [{**r, "profiled": True} for r in rf.read_jsonl(run_dir / layout.METRICS).records]
    _rewrite_metrics(run_dir, records)
    _assert_same_everywhere(run_dir)
    run_dir = make_run("evals", steps=6)
    records = rf.read_jsonl(run_dir / layout.METRICS).records
    records += [{"step": s, "rank": 0, "val_loss": 1.0} for s in range(1, 6)]
    _rewrite_metrics(run_dir, records)
    _assert_same_everywhere(run_dir)


@pytest.mark.slow
def test_sample_runs_equal_compare(sample_store: Path) -> None:
    """Real agent runs (warm-up, a profiler window with an evaluation in it): the function on the
    raw records alone — what the catalog reads — gives Compare's number, which also reads traces."""
    listing = rf.list_runs(sample_store)
    assert {m.name for _, m in listing.runs} >= {"baseline", "optimized"}
    for path, manifest in listing.runs:
        side = load_side(path)
        table, source = cs.compute_step_times(side)
        assert source is cs.StepSource.METRICS, manifest.name
        records = rf.read_jsonl(path / layout.METRICS).records
        st = steady_step_time(records)
        assert st.value_s == float(np.median(cs.kept_step_times(table))), manifest.name
        assert st.value_s == steady_step_time(records, profiled_steps=cs._profiled_steps(side)).value_s
        reasons = {float(s): r for s, r in zip(table["step"], table["reason"]) if r}
        assert dict(st.dropped) == reasons, manifest.name
        tp, unit = cs.kept_throughput(table)
        assert unit == "samples_per_s" and st.samples_per_s == pytest.approx(float(np.median(tp)), rel=1e-12)
        _assert_same_everywhere(path)


def test_steps_marked_evaluation_by_the_agent_are_dropped() -> None:
    # a functional-loss evaluation (no val_* metric): only the agent's mark says so
    recs = _steps([0.2] * 30)
    recs[12]["evaluation"] = True
    recs[12]["step_time_s"] = 2.0
    recs[20]["evaluation"] = False  # written only when true; false is no mark
    st = steady_step_time(recs)
    assert st.dropped.get(12) == DropReason.EVALUATION and 20 not in st.dropped and st.value_s == 0.2


def test_evaluation_mark_agrees_with_compare(tmp_path: Path) -> None:
    from tests.compare_helpers import write_steps_run

    run = write_steps_run(tmp_path, "r", [0.1] * 12 + [1.5] + [0.1] * 17, evaluation=(12,))
    table, _ = cs.compute_step_times(load_side(run))
    assert table.set_index("step").loc[12, "reason"] == DropReason.EVALUATION
    lines = rf.read_jsonl(run / layout.METRICS).records
    assert steady_step_time(lines).dropped.get(12) == DropReason.EVALUATION
