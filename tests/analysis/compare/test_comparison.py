"""Tests of the comparison (app.analysis.compare.comparison*): verdicts, steady state, breakdown, op diff, JSON."""
from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.analysis.compare.comparison import CompareOptions, diff_sides
from app.analysis.compare.steps import compute_step_times
from app.analysis.stats.estimate import RUN_TO_RUN_MARGIN
from app.data.runs import load_run
from app.presentation.compare_json import comparison_to_json
from app.workspace.sides import CompareSide, SideKind, load_side
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout
from tests.compare_helpers import overload, skip_if_overloaded

CATS = ("kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec", "other")


def make_run(root: Path, name: str, step_times: list[float], *, config: dict | None = None,
             loss: list[float] | None = None, samples: int = 32, rss: float | None = None) -> Path:
    run_dir, _ = rf.create_run(root, name, config=config or {"lr": 0.01})
    with rf.JsonlWriter(run_dir / layout.METRICS) as w:
        for i, t in enumerate(step_times):
            rec = {"step": i, "time": float(i), "rank": 0, "step_time_s": t, "samples": samples}
            if loss is not None:
                rec["loss"] = loss[i]
            w.write(rec)
    if rss is not None:
        with rf.JsonlWriter(run_dir / layout.SYSTEM) as w:
            w.write({"time": 0.0, "rss_bytes": rss})
    return run_dir


def fake_analysis(cats: dict[str, float], ops: dict[str, tuple[int, float]], steps: int = 4,
                  kernels: dict[str, float] | None = None, peak: float | None = None) -> SimpleNamespace:
    """A TraceAnalysis stand-in: ``steps`` identical steps with the given per-step category times."""
    rows = []
    for s in range(steps):
        row = {"rank": 0, "step": 10 + s, **{f"{c}_us": cats.get(c, 0.0) for c in CATS}}
        row["duration_us"] = sum(row[f"{c}_us"] for c in CATS)
        row.update(forward_us=cats.get("forward", 0.0), backward_us=cats.get("backward", 0.0),
                   optimizer_us=cats.get("optimizer", 0.0))
        rows.append(row)
    op_rows = [{"name": n, "calls": c * steps, "self_us": us * steps, "total_us": us * steps,
                "device_self_us": 0.0} for n, (c, us) in ops.items()]
    k_rows = [{"name": n, "calls": steps, "total_us": us * steps} for n, us in (kernels or {}).items()]
    mem = pd.DataFrame([{"rank": 0, "device": "cuda:0", "peak_allocated_bytes": peak, "peak_reserved_bytes": peak}]) if peak else \
        pd.DataFrame(columns=["device", "peak_allocated_bytes"])
    return SimpleNamespace(steps=pd.DataFrame(rows), ops=pd.DataFrame(op_rows, columns=["name", "calls", "self_us",
                           "total_us", "device_self_us"]), kernels=pd.DataFrame(k_rows, columns=["name", "calls",
                           "total_us"]), memory_peaks=mem)


def side(run_dir: Path | None, analysis=None, label: str | None = None) -> CompareSide:
    run = load_run(run_dir) if run_dir is not None else None
    return CompareSide(label=label or (run.name if run else "traces"), path=run_dir or Path("t.json"),
                       kind=SideKind.RUN if run else SideKind.TRACES, run=run, analysis=analysis)


@pytest.fixture()
def noisy():
    rng = np.random.default_rng(0)
    return lambda mean, n=60, cv=0.04: list(np.abs(rng.normal(mean, mean * cv, n)))


def test_faster_candidate_is_reported_faster(tmp_path: Path, noisy) -> None:
    base = make_run(tmp_path, "baseline", [0.5] + noisy(0.100), loss=list(np.linspace(2, 1, 61)))
    cand = make_run(tmp_path, "optimized", [0.5] + noisy(0.070), loss=list(np.linspace(2, 1.01, 61)))
    cmp = diff_sides(side(base), side(cand))
    assert cmp.step_verdict == "faster"
    assert cmp.step_time.hi < 1.0 and 0.65 < cmp.step_time.ratio < 0.75
    assert cmp.throughput_verdict == "faster" and cmp.throughput.ratio > 1.3
    # The slow first step is dropped as warm-up and never reaches the statistic.
    ta = cmp.step_times[0]
    assert ta.loc[0, "reason"] == "warm-up" and not ta.loc[0, "kept"]
    assert cmp.step_time.n_baseline == int(ta["kept"].sum())
    loss = cmp.metrics.set_index("metric").loc["loss"]
    assert loss["verdict"] == "same"  # 1 % worse final loss is below the threshold


def test_run_compared_with_itself_is_same(tmp_path: Path, noisy) -> None:
    base = make_run(tmp_path, "baseline", noisy(0.1), rss=1e9)
    cmp = diff_sides(side(base), side(base))
    assert cmp.step_verdict == "same" and cmp.step_time.ratio == 1.0
    assert cmp.memory_verdict == "same" and cmp.memory_ratio == 1.0
    assert cmp.config.empty


def test_two_seeds_of_one_config_are_same(tmp_path: Path, noisy) -> None:
    a = make_run(tmp_path, "seed0", noisy(0.1), config={"lr": 0.1, "seed": 0})
    b = make_run(tmp_path, "seed1", noisy(0.1), config={"lr": 0.1, "seed": 1})
    cmp = diff_sides(side(a), side(b))
    assert cmp.step_verdict == "same"
    assert cmp.step_time.lo <= 1.0 <= cmp.step_time.hi
    assert list(cmp.config["key"]) == ["config.seed"]


def test_profiled_steps_are_excluded_from_metrics(tmp_path: Path) -> None:
    times = [0.1] * 30
    for s in (10, 11, 12, 13):
        times[s] = 0.5  # the profiler slows its window down
    run = make_run(tmp_path, "r", times)
    table, source = compute_step_times(side(run, fake_analysis({"cpu_exec": 1.0}, {})), warmup_steps=0)
    assert source == "metrics"
    # traced steps 10..13 and the two profiler warm-up steps before them
    assert set(table.loc[table["reason"] == "profiled", "step"]) == {8, 9, 10, 11, 12, 13}
    assert (table.loc[table["kept"], "step_time_s"] == 0.1).all()


def test_the_agents_profiled_marks_are_not_second_guessed(tmp_path: Path) -> None:
    """An anomaly window warms up 1 step, not the schedule's 2: with the agent's own marks on the
    lines, the step before that warm-up is a training step, as the records-only step time (what
    the catalog reads) says. Wave 10's CI caught Compare dropping it."""
    run = make_run(tmp_path, "r", [0.1] * 30)
    records = rf.read_jsonl(run / layout.METRICS).records
    records = [{**r, "profiled": True} if r["step"] in (9, 10, 11, 12, 13) else r for r in records]
    (run / layout.METRICS).write_text("".join(json.dumps(r) + "\n" for r in records))
    table, _ = compute_step_times(side(run, fake_analysis({"cpu_exec": 1.0}, {})), warmup_steps=0)
    assert set(table.loc[table["reason"] == "profiled", "step"]) == {9, 10, 11, 12, 13}
    assert bool(table.loc[table["step"] == 8, "kept"].iloc[0])


def test_memory_gate_numbers_and_verdict(tmp_path: Path, noisy) -> None:
    a = make_run(tmp_path, "a", noisy(0.1), rss=1.0e9)
    b = make_run(tmp_path, "b", noisy(0.1), rss=1.3e9)
    cmp = diff_sides(side(a), side(b))
    assert cmp.memory_verdict == "more" and cmp.memory_ratio == pytest.approx(1.3)
    assert cmp.peak_memory[0].source == "system:rss_bytes"


def test_breakdown_waterfall_adds_up_and_ops_are_per_step(tmp_path: Path) -> None:
    a = fake_analysis({"cpu_exec": 800.0, "dataloader": 400.0, "forward": 500.0, "backward": 600.0},
                      {"aten::conv2d": (4, 500.0), "aten::relu": (4, 20.0), "aten::copy_": (2, 10.0)}, steps=3)
    b = fake_analysis({"cpu_exec": 500.0, "dataloader": 50.0, "forward": 300.0, "backward": 350.0},
                      {"aten::conv2d": (8, 200.0), "aten::relu": (4, 21.0), "aten::add_": (1, 5.0)}, steps=5)
    cmp = diff_sides(side(None, a, "a"), side(None, b, "b"))
    dev = cmp.breakdown[cmp.breakdown["view"] == "device"].set_index("category")
    assert dev.loc["step", "baseline_us"] == pytest.approx(1200.0)
    parts = dev.drop(index="step")
    assert dev.loc["step", "baseline_us"] + parts["delta_us"].sum() == pytest.approx(dev.loc["step", "candidate_us"])
    assert parts["delta_us"].abs().idxmax() == "dataloader"
    ops = cmp.ops.set_index("name")
    assert ops.index[0] == "aten::conv2d"  # biggest |delta| first
    assert ops.loc["aten::conv2d", "baseline_self_us"] == pytest.approx(500.0)  # per step, not per trace
    assert ops.loc["aten::conv2d", "candidate_calls"] == pytest.approx(8.0)
    assert ops.loc["aten::copy_", "change"] == "removed" and ops.loc["aten::add_", "change"] == "added"
    # 3 and 5 trace steps: faster by far, but below MIN_STEPS the one speed verdict is not judged
    assert cmp.step_source == ("trace", "trace") and cmp.step_time.ratio < 0.8
    assert cmp.step_verdict == cmp.headline.verdict == "inconclusive"


def test_json_document_is_complete_and_valid(tmp_path: Path, noisy) -> None:
    base = make_run(tmp_path, "baseline", noisy(0.1), rss=1e9)
    cand = make_run(tmp_path, "cand", noisy(0.08), rss=1e9)
    a = fake_analysis({"cpu_exec": 100.0}, {"aten::mm": (1, 50.0)}, kernels={"gemm": 30.0}, peak=2e9)
    b = fake_analysis({"cpu_exec": 80.0}, {"aten::mm": (1, 40.0)}, kernels={"gemm": 20.0}, peak=1e9)
    doc = comparison_to_json(diff_sides(side(base, a), side(cand, b)))
    json.dumps(doc, allow_nan=False)
    st_ = doc["step_time"]
    # ratio and interval are the headline method's (trimmed geometric means); baseline_s and
    # candidate_s are the steady-state medians every page shows, so their ratio is close, not equal
    assert st_["verdict"] == doc["headline"]["verdict"] == "faster" and st_["ci95"][1] < 1.0
    assert st_["ratio"] == pytest.approx(st_["candidate_s"] / st_["baseline_s"], rel=0.05)
    assert st_["ratio"] == pytest.approx(doc["headline"]["ratio"])
    assert {k: doc["peak_memory"][k] for k in ("baseline_bytes", "candidate_bytes", "ratio", "verdict", "source")} \
        == {"baseline_bytes": 2e9, "candidate_bytes": 1e9, "ratio": 0.5, "verdict": "less",
            "source": "trace_allocated:cuda"}
    assert doc["peak_memory"]["quantity"] == "GPU tensors" and "[memory] events" in \
        doc["peak_memory"]["description"]
    assert doc["memory_categories"] == []  # no memory timelines on either side
    assert {r["category"] for r in doc["breakdown_delta"]} >= {"cpu_exec", "kernel"}
    assert doc["ops"][0]["name"] == "aten::mm" and doc["ops"][0]["delta_us"] == pytest.approx(-10.0)
    assert doc["kernels"][0]["delta_us"] == pytest.approx(-10.0)
    b = doc["baseline"]
    assert b["steps_kept"] + b["steps_warmup"] + b["steps_profiled_excluded"] == b["steps"] == 60
    assert b["steps_profiled_excluded"] == 6  # ProfilerSteps 10..13 and 2 profiler warm-up steps


def test_missing_data_gives_na_not_errors(tmp_path: Path) -> None:
    run_dir, _ = rf.create_run(tmp_path, "empty")
    cmp = diff_sides(side(run_dir), side(run_dir))
    assert cmp.step_verdict == "inconclusive" and cmp.memory_verdict == "n/a"
    doc = comparison_to_json(cmp)
    assert doc["step_time"]["ratio"] is None and doc["ops"] == []
    assert any("traces" in n for n in doc["notes"])


def test_load_side_resolves_names_and_rejects_unknown(tmp_path: Path, noisy) -> None:
    make_run(tmp_path, "baseline", noisy(0.1))
    s = load_side("baseline", tmp_path)
    assert s.kind == "run" and s.label == "baseline"
    with pytest.raises(rf.RunNotFoundError):
        load_side("nope", tmp_path)


cat_values = st.floats(0.0, 5000.0, allow_nan=False)
analysis_strategy = st.builds(
    lambda cats, ops, steps: fake_analysis(dict(zip(CATS, cats, strict=False)), ops, steps=steps),
    st.lists(cat_values, min_size=len(CATS), max_size=len(CATS)),
    st.dictionaries(st.sampled_from(["aten::mm", "aten::conv2d", "aten::relu", "aten::add", "aten::copy_"]),
                    st.tuples(st.integers(1, 5), st.floats(0.0, 1000.0)), max_size=5),
    st.integers(1, 6),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(analysis_strategy, analysis_strategy)
def test_diff_a_b_mirrors_diff_b_a(tmp_path: Path, a, b) -> None:
    ab = diff_sides(side(None, a, "a"), side(None, b, "b"), CompareOptions(resamples=200))
    ba = diff_sides(side(None, b, "b"), side(None, a, "a"), CompareOptions(resamples=200))
    if ab.step_time is not None and ab.step_time.ratio > 0 and math.isfinite(ab.step_time.ratio):
        assert ab.step_time.ratio * ba.step_time.ratio == pytest.approx(1.0)
        if ab.step_time.has_interval:
            assert ab.step_time.lo * ba.step_time.hi == pytest.approx(1.0)
        flip = {"faster": "slower", "slower": "faster", "same": "same", "inconclusive": "inconclusive", "n/a": "n/a"}
        assert flip[str(ab.step_verdict)] == str(ba.step_verdict) or "same" in (ab.step_verdict, ba.step_verdict)
    bd_ab = ab.breakdown.set_index(["view", "category"])["delta_us"]
    bd_ba = ba.breakdown.set_index(["view", "category"])["delta_us"]
    pd.testing.assert_series_equal(bd_ab.sort_index(), -bd_ba.sort_index(), check_exact=False, atol=1e-6)
    ops_ab = ab.ops.set_index("name")
    ops_ba = ba.ops.set_index("name")
    assert set(ops_ab.index) == set(ops_ba.index)
    for name in ops_ab.index:
        assert ops_ab.loc[name, "delta_us"] == pytest.approx(-ops_ba.loc[name, "delta_us"], abs=1e-9)
        swap = {"added": "removed", "removed": "added", "both": "both"}
        assert swap[ops_ab.loc[name, "change"]] == ops_ba.loc[name, "change"]


# --- real data: sample runs recorded by the agent, real GPU traces ---------------------------------


@pytest.fixture(scope="module")
def sample_comparison(sample_store: Path):
    return diff_sides(load_side("baseline", sample_store), load_side("optimized", sample_store))


def test_sample_optimized_is_significantly_faster(sample_comparison) -> None:
    cmp = sample_comparison
    assert cmp.step_source == ("metrics", "metrics")
    skip_if_overloaded(str(cmp.step_verdict), f"ratio {cmp.step_time.ratio:.3f} [{cmp.step_time.lo:.3f}, "
                                               f"{cmp.step_time.hi:.3f}]", cmp.contention)
    from tests.compare_helpers import check_sample_speedup

    check_sample_speedup(str(cmp.step_verdict), cmp.step_time.ratio, cmp.step_time.lo, cmp.step_time.hi)


def test_sample_breakdown_leaves_out_the_profiled_evaluation_step(sample_comparison) -> None:
    # sample_models.record puts an evaluation inside the profiled window on purpose (the
    # evaluation rule needs it): the breakdown must average the training steps only.
    from app.analysis.trace.step_window import evaluation_steps
    from app.analysis.trace.windows import anomaly_step_numbers

    cmp = sample_comparison
    steps = cmp.baseline.analysis.steps
    in_window = evaluation_steps(cmp.baseline.run.metrics) & {int(s) for s in steps["step"]}
    assert in_window
    # On a loaded machine a slow training step can open an anomaly window, whose steps the breakdown
    # leaves out too (a full run under load compared 181 ms with the mean of every training step, 377 ms)
    train = steps[~steps["step"].isin(in_window | anomaly_step_numbers(cmp.baseline.windows))]
    row = cmp.breakdown[(cmp.breakdown["view"] == "device") & (cmp.breakdown["category"] == "step")].iloc[0]
    assert row["baseline_us"] == pytest.approx(float(train["duration_us"].mean()))
    assert row["baseline_us"] < float(steps["duration_us"].mean())
    assert cmp.breakdown_steps[0] == train["step"].nunique()
    assert any(f"#{s} (" in n and "evaluation" in n for n in cmp.notes for s in in_window)


def test_sample_optimized_changes_the_expected_parts(sample_comparison) -> None:
    cmp = sample_comparison
    dev = cmp.breakdown[(cmp.breakdown["view"] == "device") & (cmp.breakdown["category"] != "step")]
    top2 = set(dev.reindex(dev["delta_us"].abs().sort_values(ascending=False).index)["category"].head(2))
    assert "dataloader" in top2, top2  # the data wait the candidate's workers remove
    assert dev.set_index("category").loc["dataloader", "delta_us"] < 0
    top_ops = list(cmp.ops["name"].head(5))
    assert any("conv" in n for n in top_ops[:2]), top_ops
    # Data loading shows in the breakdown above; its record_function range (enumerate(DataLoader)#…)
    # is not an op (app/analysis/trace/ops.py), so it is no row of the op comparison.
    assert not cmp.ops["name"].str.startswith(("enumerate(DataLoader)#", "Optimizer.")).any(), top_ops
    # (signs of single ops are not asserted: on a busy 2-core machine a depthwise convolution's
    # backward can come out slower per call while the step as a whole is faster)
    changed = cmp.modules[cmp.modules["change"] == "type"]
    assert (changed["baseline_type"] == "Conv2d").any()
    assert cmp.modules.iloc[0]["params_delta"] < 0
    # Compute (the convolutions) is the other large change -- unless CPU contention while the samples
    # were recorded made the host's "other" time move more (seen at load 8 on 2 cores).
    busy = overload()
    if top2 != {"cpu_exec", "dataloader"} and (cmp.contention.inconclusive or busy):
        pytest.skip(f"top changes {sorted(top2)} under contention ({cmp.contention.reason or busy})")
    assert top2 == {"cpu_exec", "dataloader"}, dev[["category", "delta_us"]].to_dict("records")


def test_sample_run_against_itself_is_same_unless_its_interval_is_too_wide(sample_store: Path) -> None:
    side_ = load_side("baseline", sample_store)
    cmp = diff_sides(side_, side_)
    head = cmp.headline
    assert head.ratio == pytest.approx(1.0) and cmp.memory_verdict == "same"
    # A run against itself is never faster or slower. It is "same" when its own interval rules
    # out changes beyond the ±10 % band, else "inconclusive" with the width as the reason (a
    # 12-step sample run can hold a level shift of 30 %: its location is uncertain by that much).
    lo, hi = head.ci95
    within = max(hi, 1 / lo) - 1 <= RUN_TO_RUN_MARGIN
    assert cmp.step_verdict == ("same" if within else "inconclusive"), (head.ci95, head.reasons)
    if not within:
        assert any("too wide" in r for r in head.reasons), head.reasons
    assert (cmp.ops["delta_us"] == 0).all() and (cmp.breakdown["delta_us"] == 0).all()


def test_gpu_before_after_full_comparison(shared_data: Path) -> None:
    pair = shared_data / "traces" / "gpu_before_after"
    cmp = diff_sides(load_side(pair / "control.json.gz"), load_side(pair / "test.json.gz"))
    assert cmp.step_source == ("trace", "trace")
    assert cmp.step_time.n_baseline == cmp.step_time.n_candidate == 6
    # 6 steps per side, below stats.MIN_STEPS: clearly slower, but not judged
    assert cmp.step_time.ratio > 1.3 and cmp.step_time.lo > 1.0
    assert cmp.step_verdict == cmp.headline.verdict == "inconclusive"
    assert any("too few steps" in r for r in cmp.headline.reasons)
    dev = cmp.breakdown[cmp.breakdown["view"] == "device"].set_index("category")
    assert dev.loc["memcpy", "delta_us"] > 0 and dev.loc["kernel", "delta_us"] > 0
    parts = dev.drop(index="step")["delta_us"].sum()
    assert parts == pytest.approx(dev.loc["step", "delta_us"], rel=1e-6)
    assert len(cmp.kernels) > 10 and {"added", "removed", "both"} <= set(cmp.kernels["change"])
    assert cmp.ops.iloc[0]["name"] == "cudaMemcpyAsync"
    doc = comparison_to_json(cmp)
    json.dumps(doc, allow_nan=False)
    assert doc["kernels"] and doc["breakdown_delta"]


@pytest.mark.parametrize("folder", ["cpu_only", "cuda_event_sync", "nccl_distributed", "rocm", "triton", "two_ranks"])
def test_every_shared_trace_compares_with_itself(shared_data: Path, folder: str) -> None:
    side_ = load_side(shared_data / "traces" / folder)
    cmp = diff_sides(side_, side_)
    # 1-3 steps: never a difference; "same" when the interval fits the margin, else not judged
    assert cmp.step_verdict in ("same", "inconclusive")
    assert cmp.step_time is None or cmp.step_time.ratio == pytest.approx(1.0)
    assert len(cmp.breakdown) == 0 or (cmp.breakdown["delta_us"] == 0).all()
    json.dumps(comparison_to_json(cmp), allow_nan=False)


def _memory_run_side(name: str, times: list[float], loss: list[float], rss: float, lr: float) -> CompareSide:
    from app.data.runs import RunData

    metrics = pd.DataFrame({"step": range(len(times)), "time": np.arange(len(times), dtype=float), "rank": 0,
                            "step_time_s": times, "samples": 8, "loss": loss[: len(times)]})
    system = pd.DataFrame({"time": [0.0], "rss_bytes": [rss]})
    manifest = rf.Manifest(id=f"id-{name}", name=name, config={"lr": lr})
    run = RunData(path=Path(name), manifest=manifest, status=rf.RunStatus.FINISHED, metrics=metrics, system=system)
    return CompareSide(label=name, path=Path(name), kind=SideKind.RUN, run=run)


run_strategy = st.tuples(
    st.lists(st.floats(0.001, 2.0), min_size=4, max_size=50),
    st.lists(st.floats(0.01, 10.0), min_size=50, max_size=50),
    st.floats(1e6, 1e10),
    st.sampled_from([0.1, 0.01]),
)


@settings(max_examples=25, deadline=None)
@given(run_strategy, run_strategy)
def test_metric_sides_mirror(a, b) -> None:
    sa, sb = _memory_run_side("a", *a), _memory_run_side("b", *b)
    o = CompareOptions(resamples=200)
    ab, ba = diff_sides(sa, sb, o), diff_sides(sb, sa, o)
    assert ab.step_time.ratio * ba.step_time.ratio == pytest.approx(1.0)
    if ab.step_time.has_interval:
        assert ab.step_time.lo * ba.step_time.hi == pytest.approx(1.0)
        assert ab.throughput.lo * ba.throughput.hi == pytest.approx(1.0)
    assert ab.memory_ratio * ba.memory_ratio == pytest.approx(1.0)
    flip = {"faster": "slower", "slower": "faster", "same": "same", "less": "more", "more": "less",
            "inconclusive": "inconclusive"}
    for x, y in ((ab.step_verdict, ba.step_verdict), (ab.memory_verdict, ba.memory_verdict)):
        # 1/(1+t) vs 1-t: a ratio right at the threshold may read "same" one way only.
        assert flip[str(x)] == str(y) or "same" in (x, y)
    la, lb = ab.metrics.set_index("metric").loc["loss"], ba.metrics.set_index("metric").loc["loss"]
    assert la["ratio"] * lb["ratio"] == pytest.approx(1.0)
    assert (la["baseline_final"], la["candidate_final"]) == (lb["candidate_final"], lb["baseline_final"])
    assert list(ab.config.columns[1:]) == list(reversed(ba.config.columns[1:]))


# --- memory -------------------------------------------------------------------------------------


def test_step_aligned_memory_positions() -> None:
    from app.analysis.compare.memory import compute_step_aligned_memory

    mem = pd.DataFrame({"ts_us": [50.0, 100.0, 150.0, 250.0, 320.0, 999.0], "device_type": 0, "device_id": -1,
                        "addr": 1, "bytes": 10, "total_allocated_bytes": [1, 2, 3, 4, 5, 6],
                        "total_reserved_bytes": 0})
    trace = SimpleNamespace(rank=0, memory=mem)
    steps = pd.DataFrame({"rank": 0, "step": [7, 8], "start_us": [100.0, 200.0], "end_us": [200.0, 400.0]})
    out = compute_step_aligned_memory([trace], steps)
    # 50 and 999 are outside every step; 150 is half-way through step 0, 320 is 60 % into step 1.
    assert out["step_pos"].tolist() == pytest.approx([0.0, 0.5, 1.25, 1.6])
    assert out["allocated_bytes"].tolist() == [2, 3, 4, 5]
    assert compute_step_aligned_memory([], steps).empty


def test_largest_allocations_diff_from_snapshots() -> None:
    import copy

    from app.analysis.compare.memory import diff_largest_allocations
    from app.data.snapshot import load_snapshot

    snap = load_snapshot(Path(__file__).parents[2] / "data" / "snapshots" / "small.snapshot.pickle")
    cand = copy.deepcopy(snap)
    big = next(e for e in cand["device_traces"][0] if e.get("action") == "alloc" and e["size"] == 6 * 2**20)
    cand["device_traces"][0] = [e for e in cand["device_traces"][0] if e.get("addr") != big["addr"]
                                or e.get("action") not in ("alloc", "free_requested", "free_completed")]
    d = diff_largest_allocations(snap, cand).set_index("top_frame")
    assert d.index[0] == "model.py:23:forward"  # the removed 6 MiB temporary
    assert d.loc["model.py:23:forward", "delta_bytes"] == -6 * 2**20
    assert (d.drop(index="model.py:23:forward")["delta_bytes"] == 0).all()
    same = diff_largest_allocations(snap, snap)
    assert (same["delta_bytes"] == 0).all() and len(same) > 0


def test_ranks_slowest_rank_sets_the_step_and_samples_add_up(tmp_path: Path) -> None:
    run_dir, _ = rf.create_run(tmp_path, "ddp", world_size=2)
    with rf.JsonlWriter(run_dir / layout.METRICS) as w:
        for step in range(20):
            w.write({"step": step, "rank": 0, "time": float(step), "step_time_s": 0.10, "samples": 16})
            w.write({"step": step, "rank": 1, "time": float(step), "step_time_s": 0.12, "samples": 16})
    table, source = compute_step_times(side(run_dir), warmup_steps=0)
    assert source == "metrics" and len(table) == 20
    assert (table["step_time_s"] == 0.12).all() and (table["samples"] == 32).all()
    cmp = diff_sides(side(run_dir), side(run_dir))
    assert cmp.throughput.baseline == pytest.approx(32 / 0.12) and cmp.throughput_unit == "samples_per_s"


# --- many runs: config diff, sweep table, curve bands ---------------------------------------------


def test_config_diff_only_keys_that_differ(tmp_path: Path) -> None:
    from app.analysis.compare.many_runs import diff_config

    a = rf.Manifest(id="a", name="a", config={"lr": 0.1, "opt": {"name": "sgd", "momentum": 0.9}},
                    versions={"torch": "2.3"}, git={"commit": "abc"})
    b = rf.Manifest(id="b", name="b", config={"lr": 0.1, "opt": {"name": "adam", "momentum": 0.9}, "wd": 0.01},
                    versions={"torch": "2.4"}, git={"commit": "abc"})
    d = diff_config([a, b], ["a", "a"])
    assert list(d.columns) == ["key", "a", "a (2)"]
    rows = d.set_index("key")
    assert list(rows.index) == ["config.opt.name", "config.wd", "versions.torch"]  # config first
    assert rows.loc["config.wd"].tolist() == ["", "0.01"]
    assert diff_config([a, None], ["a", "traces"]).empty


def test_sweep_table_and_curve_bands(tmp_path: Path) -> None:
    from app.analysis.compare.many_runs import compute_curve_bands, compute_sweep_table

    runs = []
    for lr, seed, t in ((0.1, 0, 0.10), (0.1, 1, 0.11), (0.01, 0, 0.20)):
        loss = list(np.linspace(2.0, 1.0 if lr == 0.1 else 1.5, 30) + 0.01 * seed)
        runs.append(load_run(make_run(tmp_path, f"lr{lr}-s{seed}", [t] * 30, config={"lr": lr, "seed": seed},
                                      loss=loss, rss=1e9)))
    table, varying = compute_sweep_table(runs)
    assert varying == ["config.lr", "config.seed"]
    assert table["median_step_time_s"].tolist() == pytest.approx([0.10, 0.11, 0.20])
    assert table["best_loss"].tolist() == pytest.approx([1.0, 1.01, 1.5])
    assert (table["peak_memory_bytes"] == 1e9).all()
    bands = compute_curve_bands({r.name: r.metrics for r in runs}, "loss",
                                {r.name: f"lr={r.manifest.config['lr']}" for r in runs}, smoothing=0.0)
    g = bands[bands["group"] == "lr=0.1"].set_index("step")
    assert g.loc[0, "runs"] == 2 and g.loc[0, "mean"] == pytest.approx(2.005)
    assert g.loc[0, "lo"] < g.loc[0, "mean"] < g.loc[0, "hi"]
    single = bands[bands["group"] == "lr=0.01"]
    assert (single["lo"] == single["hi"]).all()  # one run: no spread
    with pytest.raises(ValueError, match="spread"):
        compute_curve_bands({}, "loss", {}, spread="iqr")


def test_different_batch_sizes_point_to_throughput(tmp_path: Path, noisy) -> None:
    from app.presentation.report import headline

    a = make_run(tmp_path, "bs32", noisy(0.10), samples=32)
    b = make_run(tmp_path, "bs64", noisy(0.15), samples=64)
    cmp = diff_sides(side(a), side(b))
    # one speed verdict, the headline's (time per sample); the step-time row is not judged on its own
    assert cmp.step_verdict == "faster" and cmp.throughput_verdict == "faster"
    assert cmp.step_time.ratio > 1.3
    assert any("samples per step differ (32 vs 64)" in n for n in cmp.notes)
    # the headline judges time per sample (tests/analysis/compare/test_headline.py has more)
    assert headline(cmp).startswith("bs64 is 1.3") and "faster than bs32 by time per sample" in headline(cmp)
    from app.presentation.report import step_time_sentence

    assert "throughput (samples/s) 1.3" in step_time_sentence(cmp)


def test_memory_sources_prefer_gpu_and_count_worker_rss(tmp_path: Path) -> None:
    from app.analysis.compare.steps import compute_peak_memory

    def run_with(system_rows: list[dict]) -> CompareSide:
        run_dir, _ = rf.create_run(tmp_path, "m")
        with rf.JsonlWriter(run_dir / layout.SYSTEM) as w:
            for r in system_rows:
                w.write({"time": 0.0, **r})
        return side(run_dir)

    a = run_with([{"rss_bytes": 100, "children_rss_bytes": 0}])
    b = run_with([{"rss_bytes": 80, "children_rss_bytes": 70}])  # work moved into workers
    pa, pb = compute_peak_memory(a, b)
    assert pa.source == "system:host_rss_bytes" and (pa.bytes, pb.bytes) == (100, 150)
    g1 = run_with([{"rss_bytes": 1, "gpu_max_allocated_bytes": 5e9}])
    g2 = run_with([{"rss_bytes": 1, "gpu_max_allocated_bytes": 4e9}])
    ga, gb = compute_peak_memory(g1, g2)
    assert ga.source == "system:gpu_max_allocated_bytes" and gb.bytes / ga.bytes == pytest.approx(0.8)


# --- verdicts need an interval; typical profiled steps; machine load ------------------------------


def test_one_step_per_side_gets_no_faster_slower_verdict() -> None:
    a = fake_analysis({"cpu_exec": 1000.0}, {}, steps=1)
    b = fake_analysis({"cpu_exec": 2000.0}, {}, steps=1)
    cmp = diff_sides(side(None, a, "a"), side(None, b, "b"))
    assert cmp.step_time.ratio == pytest.approx(2.0) and not cmp.step_time.has_interval
    assert cmp.step_verdict == cmp.throughput_verdict == "inconclusive"
    assert any("1 step per side: no confidence interval" in n for n in cmp.notes)
    row = cmp.verdicts.set_index("quantity").loc["step time (headline)"]
    assert row["verdict"] == "inconclusive" and math.isnan(row["ci_lo"])
    assert cmp.headline.verdict == "inconclusive" and cmp.headline.ci95 is None
    assert any("no confidence interval" in r for r in cmp.headline.reasons)
    doc = comparison_to_json(cmp, memory_categories=_no_categories())
    assert doc["step_time"]["verdict"] == "inconclusive" and doc["step_time"]["ci95"] == [None, None]
    from app.cli.diff_cmd import evaluate_gates

    failures, skipped = evaluate_gates(cmp, 5.0, None)
    assert failures == [] and "no confidence interval (1 and 1 steps)" in skipped[0]["reason"]


def _no_categories():
    from app.analysis.compare.memory_categories import MemoryCategoryComparison

    return MemoryCategoryComparison(baseline=None, candidate=None, table=pd.DataFrame())


def _with_long_step(analysis: SimpleNamespace, step: int, factor: float) -> SimpleNamespace:
    steps = analysis.steps.copy()
    cols = [f"{c}_us" for c in CATS] + ["duration_us", "forward_us", "backward_us", "optimizer_us"]
    steps.loc[steps["step"] == step, cols] = steps.loc[steps["step"] == step, cols] * factor
    return SimpleNamespace(**{**vars(analysis), "steps": steps})


def test_breakdown_leaves_out_a_profiled_step_that_ran_an_evaluation(tmp_path: Path) -> None:
    base = make_run(tmp_path, "baseline", [0.1] * 20)
    with rf.JsonlWriter(base / layout.METRICS) as w:  # an evaluation logged at profiled step 11
        w.write({"step": 11, "time": 11.5, "rank": 0, "val_loss": 1.0})
    cats = {"cpu_exec": 800.0, "dataloader": 200.0, "forward": 300.0, "backward": 500.0, "optimizer": 100.0}
    a = _with_long_step(fake_analysis(cats, {}, steps=3), 11, 5.0)  # steps 10, 11 (eval, 5 ms), 12
    b = fake_analysis(cats, {}, steps=3)
    cmp = diff_sides(side(base, a), side(None, b, "traces"))
    step = cmp.breakdown[(cmp.breakdown["view"] == "device") & (cmp.breakdown["category"] == "step")].iloc[0]
    assert step["baseline_us"] == pytest.approx(1000.0)  # not (1000 + 5000 + 1000) / 3
    assert step["delta_us"] == pytest.approx(0.0)
    assert cmp.breakdown_steps == (2, 3)
    assert any("#11" in n and "evaluation" in n for n in cmp.notes)
    doc = comparison_to_json(cmp, memory_categories=_no_categories())
    assert doc["trace_step"]["statistic"] == "mean profiled step" and doc["trace_step"]["baseline_steps"] == 2


def test_verdict_leaves_out_steps_that_ran_an_evaluation(tmp_path: Path) -> None:
    run = make_run(tmp_path, "r", [0.1] * 30)
    with rf.JsonlWriter(run / layout.METRICS) as w:
        w.write({"step": 9, "time": 9.5, "rank": 0, "val_loss": 1.0})
    table, _ = compute_step_times(side(run))
    assert table.loc[table["step"] == 9, "reason"].item() == "evaluation"
    assert not table.loc[table["step"] == 9, "kept"].item()


def test_trace_only_outlier_step_is_left_out_of_the_breakdown() -> None:
    a = _with_long_step(fake_analysis({"cpu_exec": 1000.0}, {}, steps=4), 12, 4.0)
    b = fake_analysis({"cpu_exec": 1000.0}, {}, steps=4)
    cmp = diff_sides(side(None, a, "a"), side(None, b, "b"))
    step = cmp.breakdown[(cmp.breakdown["view"] == "device") & (cmp.breakdown["category"] == "step")].iloc[0]
    assert step["baseline_us"] == pytest.approx(1000.0) and cmp.breakdown_steps == (3, 4)
    assert any("#12" in n and "median" in n for n in cmp.notes)
    # Two steps: nothing can be called typical, nothing is left out.
    two = _with_long_step(fake_analysis({"cpu_exec": 1000.0}, {}, steps=2), 11, 4.0)
    cmp2 = diff_sides(side(None, two, "a"), side(None, b, "b"))
    assert cmp2.breakdown_steps == (2, 4)


def _loaded_run(make_run_fixture, name: str, step_time_s: float, system_pct: float, own_pct: float) -> Path:
    run = make_run_fixture(name, steps=40, step_time_s=step_time_s, system=False,
                           devices=({"type": "cpu", "name": "x86_64", "count": 2},))
    with rf.JsonlWriter(run / layout.SYSTEM) as w:
        for i in range(10):
            w.write({"time": float(i), "rank": 0, "pid": 1, "cpu_percent": own_pct, "children_cpu_percent": 0.0,
                     "rss_bytes": 2**28, "system_cpu_percent": system_pct})
    return run


def test_machine_load_difference_makes_the_verdict_inconclusive(make_run) -> None:
    from app.presentation.report import format_report_markdown, format_verdict_text

    busy = _loaded_run(make_run, "busy", 0.09, 100.0, 40.0)  # others used 2 - 0.4 = 1.6 CPUs
    idle = _loaded_run(make_run, "idle", 0.05, 55.0, 100.0)  # others used 0.1 CPU
    cmp = diff_sides(side(busy), side(idle))
    # older runs: no per-step contention, the system samples decide (compare_contention)
    assert cmp.contention.inconclusive and cmp.contention.source == "system samples"
    assert cmp.headline.verdict == "inconclusive" and cmp.step_verdict == "inconclusive"
    assert diff_sides(side(idle), side(busy)).headline.verdict == "inconclusive"  # both ways
    a, b = cmp.machine_load
    assert a.other_cpus == pytest.approx(1.6) and b.other_cpus == pytest.approx(0.1) and a.cpus == 2
    assert "busier during busy" in cmp.load_warning and "1.6 of 2 CPUs during busy" in cmp.load_warning
    assert "re-run both" in cmp.load_warning and cmp.headline.reasons[0] == cmp.load_warning
    text = format_verdict_text(cmp, memory_categories=_no_categories())
    assert text.count("busier during busy") == 1  # said once: in the headline's reasons
    assert "busier during busy" in format_report_markdown(cmp, memory_categories=_no_categories())
    doc = comparison_to_json(cmp, memory_categories=_no_categories())
    assert doc["machine_load"]["warning"] == cmp.load_warning and doc["machine_load"]["baseline"]["cpus"] == 2
    assert doc["headline"]["verdict"] == doc["step_time"]["verdict"] == "inconclusive"
    # The same load on both sides, machine not saturated: no caution, a verdict.
    calm = _loaded_run(make_run, "calm", 0.09, 55.0, 100.0)
    calm_cmp = diff_sides(side(calm), side(idle))
    assert calm_cmp.load_warning == "" and calm_cmp.headline.verdict == "faster"


def test_machine_load_caution_on_a_saturated_machine_only_with_a_verdict(make_run) -> None:
    a = _loaded_run(make_run, "a", 0.09, 100.0, 40.0)
    b = _loaded_run(make_run, "b", 0.05, 100.0, 50.0)
    cmp = diff_sides(side(a), side(b))
    assert cmp.step_verdict == "faster" and "saturated during both runs" in cmp.load_warning
    same = diff_sides(side(a), side(a))
    assert same.step_verdict == "same" and same.load_warning == ""


def test_display_tables_have_units_and_no_raw_values(tmp_path: Path) -> None:
    from app.presentation.report import breakdown_display_table, verdict_display_table

    base = make_run(tmp_path, "baseline", [0.5] + [0.1] * 30)
    cand = make_run(tmp_path, "cand", [0.5] + [0.07] * 30)
    cats = {"cpu_exec": 800.0, "dataloader": 200.0}
    cmp = diff_sides(side(base, fake_analysis(cats, {})), side(cand, fake_analysis({"cpu_exec": 700.0}, {})))
    table, hidden = verdict_display_table(cmp)
    row = table.iloc[0]  # the headline: step time (the step-time row is not repeated)
    assert row["quantity"] == "step time (headline)"
    assert row["baseline"] == "100.00 ms" and row["candidate"] == "70.00 ms" and row["change"] == "-30.0 %"
    assert not table.isin(["None", "nan", "none (none)"]).any().any()
    assert "peak memory" not in set(table["quantity"])  # neither side has memory data
    assert hidden == ["peak memory: not compared (no memory quantity both sides have)"]
    bd = breakdown_display_table(cmp, "device")
    assert list(bd.columns) == ["category", "baseline (ms/step)", "candidate (ms/step)", "Δ (ms/step)",
                                "Δ share of baseline step (%)"]
    dl = bd[bd["category"] == "dataloader"].iloc[0]
    assert dl["baseline (ms/step)"] == pytest.approx(0.2) and dl["Δ share of baseline step (%)"] == pytest.approx(-20.0)
    assert "mean profiled step" in set(bd["category"])


def test_verdict_display_names_logged_metrics_for_people(tmp_path: Path) -> None:
    """The agent's keys in Compare's verdict table get the Run page's names and units: no raw
    ``data_time_s (final)`` in seconds next to step times in ms (issue 16)."""
    from app.presentation.report import verdict_display_table

    runs = []
    for name, data_s in (("a", 0.020), ("b", 0.005)):
        run = make_run(tmp_path, name, [0.1] * 30)
        records = [{**r, "data_time_s": data_s, "grad_norm": 1.5} for r in rf.read_jsonl(run / layout.METRICS).records]
        (run / layout.METRICS).write_text("".join(json.dumps(r) + "\n" for r in records))
        runs.append(run)
    cmp = diff_sides(side(runs[0]), side(runs[1]))
    assert "data_time_s (final)" in set(cmp.verdicts["quantity"])  # the JSON keeps the key
    table, _ = verdict_display_table(cmp)
    rows = table.set_index("quantity")
    assert rows.loc["data loading time (final)", "baseline"] == "20 ms"
    assert rows.loc["data loading time (final)", "candidate"] == "5 ms"
    assert "gradient norm (final)" in rows.index
    assert not any("_s (" in q or "grad_norm" in q for q in rows.index)


def test_distinct_short_names_keep_distinct_kernels_apart() -> None:
    from app.presentation.report import distinct_short_names, short_name

    k1 = "void split_embedding_backward_kernel_cta_per_row_1<float, float, float, 2ul>(" + "long args, " * 10 + ")"
    k2 = k1.replace("2ul", "5ul")
    assert short_name(k1, 60) == short_name(k2, 60)  # the plain shortening collides
    s1, s2, s3 = distinct_short_names([k1, k2, "aten::mm"], 60)
    assert s1 != s2 and "2ul" in s1 and "5ul" in s2 and s3 == "aten::mm"
    assert len(s1) <= 60
    assert distinct_short_names([k1, k1], 60)[0] == distinct_short_names([k1, k1], 60)[1]
