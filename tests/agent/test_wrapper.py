"""A real run recorded by `torchscope run` from the baseline sample model: every file checked."""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from profiler_agent.runformat import (
    ArtifactKind,
    RunStatus,
    effective_status,
    layout,
    read_jsonl,
    read_manifest,
)

from .helpers import BASELINE, SCHEDULE, TINY, only_run, torchscope

STEPS = 7


@pytest.fixture(scope="module")
def wrapped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    root = tmp_path_factory.mktemp("wrapped")
    proc = torchscope("run", "--name", "tiny-baseline", "--root", str(root), "--tags", "test", "tiny", *SCHEDULE,
                      "--grad-norm", "--", sys.executable, str(BASELINE), "--steps", str(STEPS), "--lr", "0.03",
                      *TINY)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return only_run(root), proc


def test_manifest_describes_the_job(wrapped: tuple[Path, object]) -> None:
    run_dir, _ = wrapped
    m = read_manifest(run_dir)
    assert m.name == "tiny-baseline" and m.status is RunStatus.FINISHED and m.exit_code == 0
    assert effective_status(m) is RunStatus.FINISHED
    assert m.command[1].endswith("resnet_baseline.py") and "--lr" in m.command
    assert m.tags == ("test", "tiny")
    assert m.config["lr"] == 0.03 and m.config["batch_size"] == 8 and m.config["steps"] == STEPS
    assert m.versions["torch"].startswith("2.") and m.versions["python"]
    assert m.devices and m.devices[0]["type"] == "cpu"
    assert m.host and m.pid and m.cwd and m.world_size == 1
    assert set(m.git) >= {"commit", "dirty"}
    assert m.ended_at is not None and m.ended_at >= m.started_at
    kinds = {a.kind for a in m.artifacts}
    assert {ArtifactKind.TRACE, ArtifactKind.MODULE_TREE, ArtifactKind.GRAPH_DOT, ArtifactKind.METRICS,
            ArtifactKind.LOG} <= kinds
    for artifact in m.artifacts:
        assert (run_dir / artifact.path).exists(), artifact.path


def test_metrics_have_one_line_per_step(wrapped: tuple[Path, object]) -> None:
    run_dir, _ = wrapped
    read = read_jsonl(run_dir / layout.METRICS)
    assert not read.skipped and not read.truncated_tail
    steps = [r for r in read.records if "step_time_s" in r]
    assert [r["step"] for r in steps] == list(range(STEPS))
    for r in steps:
        assert r["rank"] == 0 and r["lr"] == 0.03 and r["samples"] == 8
        assert 0 < r["loss"] < 10 and r["step_time_s"] > 0 and r["grad_norm"] > 0
        assert r["time"] > 0
    # The eval loop (model.eval(), no backward) must not be counted as training samples or steps.
    assert all(r["samples"] == 8 for r in steps)
    # SCHEDULE (wait 1, warmup 1, active 2; step 0 never profiled): warm-up 2, active 3-4.
    assert {r["step"]: r.get("profiled", False) for r in steps} == {s: s in (2, 3, 4) for s in range(STEPS)}


def test_manifest_records_the_profiler_schedule(wrapped: tuple[Path, object]) -> None:
    run_dir, _ = wrapped
    settings = dict(read_manifest(run_dir).extra["profiler"])
    windows = settings.pop("windows")
    assert settings == {
        "wait": 1, "warmup": 1, "active": 2, "repeat": 1, "skip_first": 1,
        "enabled": True, "with_stack": False, "memory_timeline": False, "module_scopes": True,
        "evaluation_window": True, "anomaly_factor": 2.0, "max_anomaly_windows": 2}
    # The one scheduled window (warm-up 2, active 3 and 4) recorded the evaluation at iteration 3.
    assert [(w["reason"], w["steps"], w.get("evaluation")) for w in windows] == [("early", [3, 4], True)]


def test_zero_code_data_time_val_loss_and_threads(wrapped: tuple[Path, object]) -> None:
    run_dir, proc = wrapped
    records = read_jsonl(run_dir / layout.METRICS).records
    steps = [r for r in records if "step_time_s" in r]
    # num_workers=0 with per-sample augmentation: the wait for each batch is real and measured.
    assert all(0 < r["data_time_s"] < r["step_time_s"] for r in steps[1:])
    # The script evaluates after steps 3 and 6 (--eval-every 3) and at the end, with a loss module.
    printed = [float(line.split("val_loss ")[1].split()[0]) for line in proc.stdout.splitlines()
               if "val_loss" in line]
    val = [r for r in records if "val_loss" in r]
    assert [r["step"] for r in val] == [3, 6, STEPS]
    assert [round(r["val_loss"], 4) for r in val] == pytest.approx(printed, abs=1e-4)
    threads = read_manifest(run_dir).extra["threads"]
    assert threads["intra_op"] == 1  # the script's --threads default, set before the first step
    assert threads["cpu_count"] >= 1 and threads["inter_op"] >= 1


def test_trace_is_a_named_gzipped_kineto_trace(wrapped: tuple[Path, object]) -> None:
    run_dir, _ = wrapped
    traces = layout.list_trace_files(run_dir)
    assert len(traces) == 1
    match = layout.TRACE_FILE_RE.match(traces[0].name)
    assert match and layout.rank_from_worker(match["worker"]) == 0
    with gzip.open(traces[0], "rt") as f:
        doc = json.load(f)
    names = {e.get("name") for e in doc["traceEvents"]}
    # wait=1, warmup=1, active=2: iterations 3 and 4 are recorded, labelled with the agent's numbers.
    assert {n for n in names if str(n).startswith("ProfilerStep#")} == {"ProfilerStep#3", "ProfilerStep#4"}
    assert "aten::convolution" in names or "aten::conv2d" in names
    assert any(e.get("name") == "[memory]" for e in doc["traceEvents"])  # profile_memory is on
    assert doc.get("record_shapes") in (1, True)


def test_model_tree_and_backward_graph(wrapped: tuple[Path, object]) -> None:
    run_dir, _ = wrapped
    tree = json.loads((run_dir / layout.MODULE_TREE).read_text())
    root = tree["root"]
    assert root["type"] == "SmallResNet"
    assert root["params"] == sum(c["params"] for c in root["children"]) + root["own_params"] > 1000
    assert root["output_shape"] == [8, 10]
    assert root["flops"] > 0
    stem_conv = root["children"][0]["children"][0]
    assert stem_conv["type"] == "Conv2d" and stem_conv["output_shape"] == [8, 8, 16, 16]
    # 2 * outputs * (in_channels * 3 * 3)
    assert stem_conv["flops"] == 2 * 8 * 8 * 16 * 16 * 3 * 9
    dot = (run_dir / layout.GRAPH_DOT).read_text()
    assert dot.lstrip().startswith("digraph") and "ConvolutionBackward" in dot
    assert "stem.0.weight" in dot  # parameters are named after the module tree


def test_logs_and_system_samples(wrapped: tuple[Path, object]) -> None:
    run_dir, proc = wrapped
    stdout = (run_dir / layout.STDOUT_LOG).read_text()
    assert f"done: {STEPS} steps" in stdout
    assert f"done: {STEPS} steps" in proc.stdout  # tee'd to the terminal as well
    system = read_jsonl(run_dir / layout.SYSTEM).records
    assert system, "no system samples"
    assert all(s["rss_bytes"] > 10 * 2**20 and s["cpu_percent"] >= 0 and s["rank"] == 0 for s in system)
    assert not (run_dir / layout.AGENT_ERRORS).exists(), (run_dir / layout.AGENT_ERRORS).read_text()
