"""`torchscope diff`: verdict table, --json contract, CI gates and errors, on real traces and runs."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.cli import main
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout


def _run(root: Path, name: str, mean: float, rss: float, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    run_dir, _ = rf.create_run(root, name, config={"lr": 0.1})
    with rf.JsonlWriter(run_dir / layout.METRICS) as w:
        for i, t in enumerate(np.abs(rng.normal(mean, mean * 0.03, 40))):
            w.write({"step": i, "time": float(i), "rank": 0, "step_time_s": float(t), "samples": 16,
                     "loss": 1.0 / (1 + i)})
    with rf.JsonlWriter(run_dir / layout.SYSTEM) as w:
        w.write({"time": 0.0, "rss_bytes": rss})
    return run_dir


@pytest.fixture()
def store(tmp_path: Path) -> Path:
    _run(tmp_path, "base", 0.100, 1.0e9, 0)
    _run(tmp_path, "slow", 0.130, 1.0e9, 1)
    _run(tmp_path, "fat", 0.100, 1.5e9, 2)
    _run(tmp_path, "twin", 0.100, 1.0e9, 3)
    return tmp_path


def _json(capsys, *args: str) -> tuple[int, dict]:
    rc = main(["diff", *args, "--json"])
    return rc, json.loads(capsys.readouterr().out)


def test_text_output_names_both_runs_and_verdict(store: Path, capsys) -> None:
    assert main(["diff", "base", "slow", "--root", str(store)]) == 0
    out = capsys.readouterr().out
    assert "baseline:  base" in out and "candidate: slow" in out
    assert "slower" in out and "step time (headline)" in out


def test_json_contract_and_numbers(store: Path, capsys) -> None:
    rc, doc = _json(capsys, "base", "slow", "--root", str(store))
    assert rc == 0
    st = doc["step_time"]
    assert st["verdict"] == "slower" and 1.2 < st["ratio"] < 1.4 and st["ci95"][0] > 1.0
    # the headline method's ratio (trimmed geometric means) vs the medians shown: close, not equal
    assert st["ratio"] == pytest.approx(st["candidate_s"] / st["baseline_s"], rel=0.05)
    assert st["ratio"] == pytest.approx(doc["headline"]["ratio"]) and st["verdict"] == doc["headline"]["verdict"]
    assert doc["peak_memory"]["ratio"] == pytest.approx(1.0)
    assert doc["baseline"]["steps_warmup"] == 4  # min(5, 40 // 10)
    assert doc["gates"]["failures"] == []


def test_gate_fails_only_when_significantly_slower_beyond_pct(store: Path, capsys) -> None:
    rc, doc = _json(capsys, "base", "slow", "--root", str(store), "--fail-if-slower", "10")
    assert rc == 1 and "slower" in doc["gates"]["failures"][0]
    rc, _ = _json(capsys, "base", "slow", "--root", str(store), "--fail-if-slower", "50")
    assert rc == 0  # 30 % slower is within a 50 % allowance
    rc, _ = _json(capsys, "base", "twin", "--root", str(store), "--fail-if-slower", "0")
    assert rc == 0  # no significant slowdown: the gate never fails on noise
    rc, _ = _json(capsys, "slow", "base", "--root", str(store), "--fail-if-slower", "0")
    assert rc == 0  # faster passes


def test_memory_gate(store: Path, capsys) -> None:
    rc, doc = _json(capsys, "base", "fat", "--root", str(store), "--fail-if-more-memory", "20")
    assert rc == 1 and doc["peak_memory"]["verdict"] == "more"
    rc, _ = _json(capsys, "base", "fat", "--root", str(store), "--fail-if-more-memory", "60")
    assert rc == 0


def test_run_against_itself_is_same(store: Path, capsys) -> None:
    rc, doc = _json(capsys, "base", "base", "--root", str(store), "--fail-if-slower", "0")
    st = doc["step_time"]
    assert rc == 0 and st["verdict"] == "same" and st["ratio"] == pytest.approx(1.0)
    assert st["ci95"][0] <= 1.0 <= st["ci95"][1]


def test_bad_input_is_one_line_exit_2(store: Path, capsys) -> None:
    assert main(["diff", "base", "nope", "--root", str(store)]) == 2
    err = capsys.readouterr().err
    assert "nope" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main(["diff", "base", "slow", "--root", str(store), "--threshold", "-1"]) == 2
    assert "--threshold" in capsys.readouterr().err
    assert main(["diff", "base", "slow", "--root", str(store), "--fail-if-slower", "-5"]) == 2


def test_gpu_trace_pair_by_path(shared_data: Path, capsys) -> None:
    pair = shared_data / "traces" / "gpu_before_after"
    rc, doc = _json(capsys, str(pair / "control.json.gz"), str(pair / "test.json.gz"), "--by", "shape",
                    "--no-advice")
    assert rc == 0
    assert doc["baseline"]["kind"] == "traces" and doc["baseline"]["steps"] == 6
    assert doc["kernels"] and doc["breakdown_delta"] and doc["ops"]
    assert "input_shapes" in doc["ops"][0]
    deltas = [abs(o["delta_us"]) for o in doc["ops"]]
    assert deltas == sorted(deltas, reverse=True)
    rc, back = _json(capsys, str(pair / "test.json.gz"), str(pair / "control.json.gz"), "--no-advice")
    assert back["step_time"]["ratio"] * doc["step_time"]["ratio"] == pytest.approx(1.0)
    assert back["step_time"]["ci95"][0] * doc["step_time"]["ci95"][1] == pytest.approx(1.0)


def test_sample_runs_faster_with_advisor_resolved(sample_store: Path, capsys) -> None:
    from tests.compare_helpers import skip_if_overloaded

    rc, doc = _json(capsys, "baseline", "optimized", "--root", str(sample_store), "--fail-if-slower", "0")
    assert rc == 0  # never a failed gate: slower would need a significant slowdown
    assert doc["baseline"]["step_source"] == "metrics" and doc["baseline"]["steps_profiled_excluded"] > 0
    advice = doc["advice"]
    resolved = {f["rule"] for f in advice["resolved"]}
    shrunk = {r["baseline"]["rule"] for r in advice["remaining"] if r["gain_delta"] < 0}
    # The data-loading finding of the baseline is gone or smaller in the optimized run.
    assert any("data" in r for r in resolved | shrunk), advice
    rc, no_advice = _json(capsys, "baseline", "optimized", "--root", str(sample_store), "--no-advice")
    assert no_advice["advice"] is None
    from app.analysis.compare.contention import ContentionCheck

    contention = ContentionCheck(**{k: v for k, v in doc["contention"].items() if k in ("inconclusive", "reason")})
    skip_if_overloaded(doc["step_time"]["verdict"], str(doc["step_time"]["ci95"]), contention)
    from tests.compare_helpers import check_sample_speedup

    st = doc["step_time"]
    check_sample_speedup(st["verdict"], st["ratio"], st["ci95"][0], st["ci95"][1])


def test_json_memory_categories_and_peak_source(tmp_path: Path, capsys) -> None:
    from tests.memory_timeline_helpers import add_memory_timeline, mlp_param_bytes, record_memory_timeline

    small = record_memory_timeline(tmp_path / "t" / "small.raw.json.gz", hidden=128)
    big = record_memory_timeline(tmp_path / "t" / "big.raw.json.gz", hidden=512)
    root = tmp_path / "runs"
    add_memory_timeline(_run(root, "base", 0.1, 1.0e9, 0), small)
    add_memory_timeline(_run(root, "cand", 0.1, 1.0e9, 1), big)
    _run(root, "bare", 0.1, 1.0e9, 2)
    rc, doc = _json(capsys, "base", "cand", "--root", str(root), "--no-advice")
    assert rc == 0
    assert doc["peak_memory"]["source"] == "system:rss_bytes"
    assert doc["peak_memory"]["quantity"] == "process RSS"
    rows = {r["category"]: r for r in doc["memory_categories"]}
    assert next(iter(rows)) == "total" and {"parameter", "gradient", "optimizer_state"} <= set(rows)
    for r in rows.values():
        assert {"category", "baseline_bytes", "candidate_bytes", "delta_bytes"} <= set(r)
        assert r["delta_bytes"] == r["candidate_bytes"] - r["baseline_bytes"]
    p = rows["parameter"]
    assert (p["baseline_peak_bytes"], p["candidate_peak_bytes"]) == (mlp_param_bytes(128), mlp_param_bytes(512))
    rc, doc = _json(capsys, "base", "bare", "--root", str(root), "--no-advice")
    assert all(r["candidate_bytes"] is None and r["delta_bytes"] is None for r in doc["memory_categories"])
    assert all(isinstance(r["baseline_bytes"], int) for r in doc["memory_categories"])
    assert any("memory categories: the candidate has no memory timeline" in n for n in doc["notes"])
    rc, doc = _json(capsys, "bare", "bare", "--root", str(root), "--no-advice")
    assert doc["memory_categories"] == []


CPU_TRACE = Path("traces") / "cpu_only" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"


def _log_folder(shared_data: Path, root: Path, runs: list[str]) -> Path:
    """torch-tb-profiler's layout: one sub-folder of trace files per run."""
    for run in runs:
        (root / run).mkdir(parents=True)
        (root / run / CPU_TRACE.name).write_bytes((shared_data / CPU_TRACE).read_bytes())
    return root


def test_log_folder_of_several_runs_is_refused_not_pooled(shared_data: Path, tmp_path: Path, capsys) -> None:
    logs = _log_folder(shared_data, tmp_path / "logs", ["job_a", "job_b"])
    assert main(["diff", str(logs), str(logs / "job_a"), "--no-advice"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "2 torch-tb-profiler runs (job_a, job_b)" in err and f"e.g. {logs / 'job_a'}" in err
    assert "pass one sub-folder" in err
    assert main(["diff", str(logs / "job_b"), str(logs), "--no-advice"]) == 2  # as CANDIDATE too
    assert "job_a, job_b" in capsys.readouterr().err


def test_run_store_as_a_side_is_refused(store: Path, capsys) -> None:
    assert main(["diff", str(store), "base", "--root", str(store)]) == 2
    err = capsys.readouterr().err
    assert "run store of 4 runs" in err and "Traceback" not in err


def test_log_folder_of_one_run_reads_only_its_traces(shared_data: Path, tmp_path: Path, capsys) -> None:
    logs = _log_folder(shared_data, tmp_path / "logs", ["only"])
    (logs / "only" / "mem.json").write_text("[[-1, 1, 4096, 0]]")  # a memory timeline, not a trace
    (logs / "notes").mkdir()
    (logs / "notes" / "config.json").write_text('{"lr": 0.1}')
    rc, doc = _json(capsys, str(logs), str(shared_data / CPU_TRACE), "--no-advice")
    assert rc == 0 and doc["baseline"]["kind"] == "traces"
    assert doc["baseline"]["steps"] == doc["candidate"]["steps"] >= 1


def test_one_step_per_side_is_same_and_the_gate_says_it_was_not_evaluated(shared_data: Path, capsys) -> None:
    # cpu_only and triton hold one profiled step each: no confidence interval, so no verdict.
    a, b = shared_data / "traces" / "cpu_only", shared_data / "traces" / "triton"
    rc, doc = _json(capsys, str(a), str(b), "--fail-if-slower", "5", "--no-advice")
    assert rc == 0
    st = doc["step_time"]
    assert st["ci95"] == [None, None] and st["ratio"] > 1.05 and st["verdict"] == "inconclusive"
    assert doc["gates"]["failures"] == []
    assert doc["gates"]["skipped"] == [{"gate": "--fail-if-slower", "reason": "step time inconclusive: no confidence "
                                                                        "interval (1 and 1 steps): step time is not judged"}]
    assert doc["headline"]["verdict"] == "inconclusive" and doc["headline"]["ci95"] is None
    assert any("1 step per side: no confidence interval" in n for n in doc["notes"])
    assert main(["diff", str(a), str(b), "--fail-if-slower", "5", "--no-advice"]) == 0
    out, err = capsys.readouterr()
    assert "gate not evaluated: --fail-if-slower: step time inconclusive: no confidence interval" in err
    assert "step time not judged" in out and "slower" not in out.split("\n\n")[1]


def test_memory_gate_without_data_is_reported_not_passed_silently(shared_data: Path, capsys) -> None:
    pair = shared_data / "traces" / "gpu_before_after"
    rc, doc = _json(capsys, str(pair / "control.json.gz"), str(pair / "test.json.gz"), "--fail-if-more-memory", "5",
                    "--no-advice")
    assert rc == 0 and doc["peak_memory"]["verdict"] == "n/a"
    assert doc["gates"]["failures"] == []
    [skipped] = doc["gates"]["skipped"]
    assert skipped["gate"] == "--fail-if-more-memory" and "no peak memory on either side" in skipped["reason"]
    assert main(["diff", str(pair / "control.json.gz"), str(pair / "test.json.gz"), "--fail-if-more-memory", "5",
                 "--no-advice"]) == 0
    assert "gate not evaluated: --fail-if-more-memory" in capsys.readouterr().err


def test_memory_gate_evaluated_lists_nothing_skipped(store: Path, capsys) -> None:
    rc, doc = _json(capsys, "base", "fat", "--root", str(store), "--fail-if-more-memory", "80")
    assert rc == 0 and doc["gates"]["skipped"] == [] and doc["gates"]["failures"] == []


def test_gpu_pair_text_tables_keep_kernels_and_shapes_distinct(shared_data: Path, capsys) -> None:
    pair = shared_data / "traces" / "gpu_before_after"
    args = [str(pair / "control.json.gz"), str(pair / "test.json.gz"), "--no-advice", "--top", "30"]
    assert main(["diff", *args]) == 0
    out = capsys.readouterr().out
    kernels = out.split("kernel changes")[1].split("\n\n")[0].splitlines()[3:]
    names = [line.rsplit("  ", 4)[0].strip() for line in kernels]
    labels = [line.split("  ")[0] for line in kernels]
    assert len(set(labels)) == len(labels), labels  # no kernel printed twice (as added and removed)
    assert names
    assert main(["diff", *args, "--by", "shape"]) == 0
    out = capsys.readouterr().out
    ops = out.split("operator changes")[1].split("\n\n")[0].splitlines()[3:]
    assert len({line.split("  ")[0] for line in ops}) == len(ops)
    assert any("[" in line.split("  ")[0] for line in ops)  # the input shapes are printed


# --- headline, inconclusive, groups (issue 10) ---------------------------------------------------


def _steps(mean: float, seed: int, n: int = 60) -> np.ndarray:
    return mean * np.random.default_rng(seed).lognormal(0.0, 0.04, n)


@pytest.fixture()
def contended(tmp_path: Path) -> Path:
    from tests.compare_helpers import write_steps_run

    hog = np.full(60, 0.01)
    hog[15:50] = 0.5
    slow = _steps(0.1, 1)
    slow[15:50] *= 1.8
    write_steps_run(tmp_path, "quiet", _steps(0.1, 2), contention=0.01)
    write_steps_run(tmp_path, "hogged", slow, contention=list(hog))
    write_steps_run(tmp_path, "bs16", _steps(0.1, 3), samples=16)
    write_steps_run(tmp_path, "bs64", _steps(0.1 * 4 / 1.2, 4), samples=64)
    return tmp_path


def test_json_headline_contract(contended: Path, capsys) -> None:
    rc, doc = _json(capsys, "bs16", "bs64", "--root", str(contended), "--fail-if-slower", "5", "--no-advice")
    assert rc == 0 and doc["gates"]["failures"] == []  # 3.3x slower steps, 1.2x faster per sample
    h = doc["headline"]
    assert set(h) == {"quantity", "baseline", "candidate", "ratio", "ci95", "verdict", "method", "replicates",
                      "reasons"}
    assert h["quantity"] == "time_per_sample" and h["verdict"] == "faster" and h["ci95"][1] < 1.0
    assert h["replicates"] == {"baseline": 1, "candidate": 1} and isinstance(h["reasons"], list)
    # step_time.verdict is the comparison's one speed verdict (the headline's), so a script that
    # gates on it is not fooled by longer steps of bigger batches
    assert doc["step_time"]["verdict"] == "faster" and doc["step_time"]["ratio"] > 3
    rc, back = _json(capsys, "bs64", "bs16", "--root", str(contended), "--fail-if-slower", "5", "--no-advice")
    assert rc == 1 and back["headline"]["verdict"] == "slower"
    assert "time per sample is" in back["gates"]["failures"][0]


def test_inconclusive_exits_0_with_a_warning_or_3_when_asked(contended: Path, capsys) -> None:
    for pair in (("quiet", "hogged"), ("hogged", "quiet")):  # symmetric
        rc, doc = _json(capsys, *pair, "--root", str(contended), "--fail-if-slower", "0", "--no-advice")
        assert rc == 0 and doc["headline"]["verdict"] == "inconclusive" and doc["step_time"]["verdict"] == "inconclusive"
        assert doc["gates"]["skipped"][0]["gate"] == "--fail-if-slower"
        rc = main(["diff", *pair, "--root", str(contended), "--no-advice"])
        err = capsys.readouterr().err
        assert rc == 0 and "warning: verdict inconclusive: the machine was busier during hogged" in err
        rc = main(["diff", *pair, "--root", str(contended), "--no-advice", "--fail-if-inconclusive"])
        capsys.readouterr()
        assert rc == 3
    rc = main(["diff", "bs16", "bs64", "--root", str(contended), "--no-advice", "--fail-if-inconclusive"])
    assert rc == 0


def test_group_diff_uses_replicates(tmp_path: Path, capsys) -> None:
    from tests.compare_helpers import write_steps_run

    for i in range(3):
        write_steps_run(tmp_path, f"a{i}", _steps(0.100 * (1 + 0.01 * (i - 1)), 10 + i, n=40), group="base")
        write_steps_run(tmp_path, f"b{i}", _steps(0.080 * (1 + 0.01 * (i - 1)), 20 + i, n=40), group="opt")
    rc, doc = _json(capsys, "--group", "base", "--group", "opt", "--root", str(tmp_path), "--no-advice")
    assert rc == 0 and doc["headline"]["replicates"] == {"baseline": 3, "candidate": 3}
    assert doc["headline"]["verdict"] == "faster"
    assert any("run-to-run variance" in r for r in doc["headline"]["reasons"])
    assert doc["baseline"]["label"] == "base"
    assert main(["diff", "--group", "base", "--root", str(tmp_path)]) == 2
    assert "exactly two groups" in capsys.readouterr().err
    assert main(["diff", "--group", "base", "--group", "nope", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--group nope" in err and "base" in err and "opt" in err
    out_md = tmp_path / "cmp.md"
    assert main(["report", "--group", "base", "--group", "opt", "--root", str(tmp_path), "-o", str(out_md),
                 "--no-advice"]) == 0
    assert "faster than base by step time" in out_md.read_text()


def test_text_output_starts_with_the_headline(contended: Path, capsys) -> None:
    assert main(["diff", "bs16", "bs64", "--root", str(contended), "--no-advice"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("headline: bs64 is 1.") and "faster than bs16 by time per sample" in lines[0]
    assert "95 % CI" in lines[0] and "1 vs 1 runs" in lines[0]
    assert lines[1].startswith("  - judged time per sample")
