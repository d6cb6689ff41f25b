"""Inference runs: a job that calls its model without an optimizer step is recorded call by call
(profiler_agent/inference.py), compared by latency per sample, and advised on (app/analysis/advisor/inference.py).

The real jobs are tests/agent/jobs/serve_job.py, a hand-written serving loop: eager under
inference_mode, the same as TorchScript, and eager without inference_mode or model.eval().
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from profiler_agent import inference as inf
from profiler_agent.runformat import layout, read_jsonl, read_manifest
from tests.agent.helpers import PROJECT_ROOT, env
from tests.once import build_once

JOB = Path(__file__).with_name("jobs") / "serve_job.py"
REQUESTS = 420  # p99 needs 300 steady calls per side (app.analysis.compare.latency.MIN_TAIL_CALLS)
VARIANTS = {"eager": [], "script": ["--script"], "careless": ["--grad", "--train-mode"]}


# -- the warm-up rule and the summary (no job) ---------------------------------------------------

def test_warmup_rule_drops_the_slow_first_calls() -> None:
    rule = inf.WarmupRule()
    times = [9e-3, 4e-3, 2e-3] + [1e-3 * (1 + 0.02 * (i % 3)) for i in range(20)]
    settled = [k for k in (rule.observe(t) for t in times) if k is not None]
    assert settled == [3]  # settles once, when two windows of 5 agree; the 3 slow calls are warm-up


def test_warmup_rule_gives_up_on_noise_like_training() -> None:
    rule = inf.WarmupRule()
    out = [rule.observe(1e-3 if i % 2 else 3e-3 * (1 + i / 10)) for i in range(inf.MAX_HELD)]
    assert out[-1] == 5 and all(k is None for k in out[:-1])


def test_latency_summary_uses_steady_calls() -> None:
    calls = [{"step_time_s": 1.0, "samples": 2, "warmup": True}, {"step_time_s": 5.0, "samples": 2, "compile": True}]
    calls += [{"step_time_s": 0.01 * (i + 1), "samples": 2} for i in range(100)]
    s = inf.latency_summary(calls)
    assert s["inference_calls"] == 102 and s["warmup_calls"] == 1 and s["compile_calls"] == 1
    assert s["steady_calls"] == 100
    assert s["latency_p50_s"] == pytest.approx(0.505) and s["latency_p99_s"] == pytest.approx(0.9901)
    assert s["latency_per_sample_p90_s"] == pytest.approx(s["latency_p90_s"] / 2)
    assert s["throughput_samples_per_s"] == pytest.approx(200 / sum(0.01 * (i + 1) for i in range(100)))


# -- in process: the hook path reads no tensor value ----------------------------------------------

def test_inference_hooks_read_no_tensor_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No device sync per call: the hooks read shapes, grad mode and module.training only."""
    from profiler_agent.api import Run

    model = nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 2)).eval()
    batches = [torch.randn(3, 6) for _ in range(30)]
    reads: list[str] = []
    with Run("serve", root=tmp_path, profile=False, graph=False) as run:
        for name in ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__"):
            original = getattr(torch.Tensor, name)

            def counting(self: torch.Tensor, *a: object, _name: str = name, _orig: object = original,
                         **k: object) -> object:
                reads.append(_name)
                return _orig(self, *a, **k)  # type: ignore[operator]

            monkeypatch.setattr(torch.Tensor, name, counting)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: reads.append("synchronize"))
        with torch.inference_mode():
            for x in batches:
                model(x)
        monkeypatch.undo()
        run_dir = run.dir
    assert reads == []
    assert run_dir is not None
    lines = [r for r in read_jsonl(run_dir / layout.METRICS).records if r.get("inference")]
    assert [r["step"] for r in lines] == list(range(30))
    assert all(r["samples"] == 3 and r["step_time_s"] > 0 and "grad_enabled" not in r for r in lines)
    summary = read_manifest(run_dir).extra["inference"]
    assert summary["inference_calls"] == 30 and summary["grad_enabled_calls"] == 0


def test_a_training_job_that_evaluates_first_is_not_inference(tmp_path: Path) -> None:
    from profiler_agent.api import Run

    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Run("train", root=tmp_path, profile=False, graph=False) as run:
        with torch.no_grad():
            for _ in range(inf.RECOGNISE_CALLS - 1):  # a short evaluation before training
                model(torch.randn(2, 4))
        for _ in range(4):
            opt.zero_grad()
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
            run.step()  # the API's iterations end at Run.step()
        run_dir = run.dir
    assert run_dir is not None
    records = read_jsonl(run_dir / layout.METRICS).records
    assert not any(r.get("inference") for r in records)
    assert sum(1 for r in records if "step_time_s" in r) == 4
    assert "inference" not in read_manifest(run_dir).extra


# -- real jobs: three variants of a serving loop ---------------------------------------------------

def _record_serve_runs(folder: Path) -> None:
    """serve_job.py eager under ``torchscope run`` (zero-code), and in this process through the API (no
    second torch import) as TorchScript and without inference_mode / model.eval(), into ``folder/runs``."""
    from profiler_agent.api import Run
    from profiler_agent.options import ProfileSchedule
    from tests.agent.jobs import serve_job

    root = folder / "runs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "run", "--root", str(root), "--name", "eager", "--no-graph", "--wait", "3",
         "--warmup", "1", "--active", "3", "--system-interval", "0.5", "--",
         sys.executable, str(JOB), "--requests", str(REQUESTS)],
        cwd=PROJECT_ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for name, args in VARIANTS.items():
            if name != "eager":
                with Run(name, root=root, graph=False, schedule=ProfileSchedule(wait=3, warmup=1, active=3)):
                    serve_job.main(["--requests", str(REQUESTS), *args])
        _, err = proc.communicate(timeout=240)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]


@pytest.fixture(scope="module")
def serve_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The three serving runs, recorded once per session (both xdist workers share them: read-only)."""
    root = build_once(tmp_path_factory, "serve_runs", _record_serve_runs) / "runs"
    runs = [p for p in root.iterdir() if not p.name.startswith(".")]  # not the store's .torchscope/ (journal, index)
    return {name: next(p for p in runs if p.name.split("-", 2)[2].startswith(name)) for name in VARIANTS}


def _calls(run_dir: Path) -> list[dict]:
    return [r for r in read_jsonl(run_dir / layout.METRICS).records if r.get("inference")]


@pytest.mark.slow
def test_each_call_is_a_step_with_latency(serve_runs: dict[str, Path]) -> None:
    for name, run_dir in serve_runs.items():
        calls = _calls(run_dir)
        assert [r["step"] for r in calls] == list(range(REQUESTS)), name
        assert all(r["samples"] == 8 and r["step_time_s"] > 0 for r in calls)
        assert any(r.get("profiled") for r in calls), name  # a profiler window covered some calls
        m = read_manifest(run_dir)
        s = m.extra["inference"]
        assert s["inference_calls"] == REQUESTS and s["warmup_calls"] < 60
        assert s["latency_p50_s"] <= s["latency_p90_s"] <= s["latency_p99_s"]
        assert s["throughput_samples_per_s"] > 0
        assert m.extra["profiler"]["windows"], name
    careless = read_manifest(serve_runs["careless"]).extra["inference"]
    assert careless["grad_enabled_calls"] == REQUESTS and careless["train_mode_calls"] == REQUESTS
    assert read_manifest(serve_runs["eager"]).extra["inference"]["grad_enabled_calls"] == 0


@pytest.mark.slow
def test_diff_reports_latency_per_sample_quantiles(serve_runs: dict[str, Path]) -> None:
    from app.analysis.compare.comparison import diff_sides
    from app.presentation.compare_json import comparison_to_json
    from app.presentation.report import format_verdict_text
    from app.workspace.sides import load_side

    cmp = diff_sides(load_side(serve_runs["eager"]), load_side(serve_runs["script"]))
    doc = json.loads(json.dumps(comparison_to_json(cmp)))
    assert doc["headline"]["quantity"] == "latency_per_sample"
    rows = {r["quantity"]: r for r in doc["latency"]}
    assert list(rows) == ["latency per sample p50", "latency per sample p90", "latency per sample p99"]
    for r in rows.values():
        assert r["ci_lo"] is not None and r["ci_lo"] <= r["ratio"] <= r["ci_hi"], r
        assert math.isfinite(r["baseline"]) and math.isfinite(r["candidate"])
    text = format_verdict_text(cmp)
    assert "latency per sample (headline)" in text and "latency per sample p99" in text


def _advice(run_dir: Path) -> dict[str, dict]:
    from app.workspace.evidence import advise_path

    return {f.rule: f.to_json() for f in advise_path(run_dir).findings}


@pytest.mark.slow
def test_advisor_inference_checks(serve_runs: dict[str, Path]) -> None:
    careless, eager, script = (_advice(serve_runs[n]) for n in ("careless", "eager", "script"))
    assert careless["inference_grad_enabled"]["evidence"]["grad_enabled_calls"] > 300
    assert careless["inference_train_mode"]["evidence"]["dropout_batchnorm_layers"] == 1
    for clean in (eager, script):
        assert "inference_grad_enabled" not in clean and "inference_train_mode" not in clean
    assert "inference_batch_one" not in eager  # batches of 8
    # eager: 7 small operators per call with Python between them; TorchScript: one outer operator
    assert eager["inference_host_overhead"]["evidence"]["ops_per_call"] >= 5
    assert "inference_host_overhead" not in script
