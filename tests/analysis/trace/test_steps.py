"""Steps on real traces: ProfilerStep found, both breakdowns complete, fallbacks when steps are absent."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from app.analysis.trace.categories import DEVICE_CATEGORIES
from app.analysis.trace.steps import STEP_COLUMNS, compute_steps
from app.data.trace import load_trace

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[2] / ".." / "shared" / "data" / "traces"
TINY = HERE.parents[1] / "data" / "traces" / "cpu_torch213" / "tiny_mlp.pt.trace.json.gz"
LOOP = ["forward_us", "backward_us", "optimizer_us", "loop_dataloader_us", "loop_other_us"]


pytestmark = pytest.mark.usefixtures("module_trace_cache")  # one trace cache per module (conftest)


def _check_complete(steps: object) -> None:
    dur = steps["duration_us"].to_numpy()
    assert (dur > 0).all()
    assert np.allclose(steps[[f"{c}_us" for c in DEVICE_CATEGORIES]].sum(axis=1), dur, rtol=1e-9, atol=1e-6)
    assert np.allclose(steps[LOOP].sum(axis=1), dur, rtol=1e-9, atol=1e-6)


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present")
@pytest.mark.parametrize("path, n_steps", [
    ("gpu_before_after/control.json.gz", 6), ("gpu_before_after/test.json.gz", 6),
    ("nccl_distributed/nccl_data.json.gz", 3), ("two_ranks/sampled_rank-0.json.gz", 2),
    ("rocm/mi250_minitoy_train_ROCm6_2_kineto.json.gz", 1), ("cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", 1),
])
def test_shared_traces_have_complete_steps(path: str, n_steps: int) -> None:
    steps = compute_steps([load_trace(SHARED / path)])
    assert list(steps.columns) == STEP_COLUMNS
    assert len(steps) == n_steps and (steps["source"] == "profiler_step").all()
    _check_complete(steps)


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present")
def test_gpu_steps_are_device_adjusted_and_mostly_kernel() -> None:
    steps = compute_steps([load_trace(SHARED / "gpu_before_after" / "control.json.gz")])
    assert (steps["end_us"] >= steps["host_end_us"]).all()
    assert (steps["start_us"].to_numpy()[1:] >= steps["end_us"].to_numpy()[:-1]).all()
    assert (steps["kernel_us"] > steps["cpu_exec_us"]).all()
    assert (steps["communication_us"] > 0).all()  # NCCL kernels


def test_cpu_recording_three_active_steps() -> None:
    steps = compute_steps([load_trace(TINY)])
    assert list(steps["step"]) == [2, 3, 4]  # schedule(wait=1, warmup=1, active=3)
    _check_complete(steps)
    assert (steps["kernel_us"] == 0).all() and (steps["cpu_exec_us"] > 0).all()
    assert (steps["forward_us"] > 0).all() and (steps["backward_us"] > 0).all() and (steps["optimizer_us"] > 0).all()


def _without_profiler_steps(tmp_path: Path, keep_optimizer: bool) -> Path:
    doc = json.loads(gzip.decompress(TINY.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")
                          and (keep_optimizer or not str(e.get("name", "")).startswith("Optimizer.step#"))]
    f = tmp_path / f"t{keep_optimizer}.json"
    f.write_text(json.dumps(doc))
    return f


def test_fallback_to_optimizer_steps_then_whole_trace(tmp_path: Path) -> None:
    by_opt = compute_steps([load_trace(_without_profiler_steps(tmp_path, True))])
    assert len(by_opt) == 3 and (by_opt["source"] == "optimizer_step").all()
    _check_complete(by_opt)
    whole = compute_steps([load_trace(_without_profiler_steps(tmp_path, False))])
    assert len(whole) == 1 and whole["source"].item() == "whole_trace"
    _check_complete(whole)


def test_no_host_events_gives_no_steps(tmp_path: Path) -> None:
    f = tmp_path / "k.json"
    f.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
                                              "ts": 1, "dur": 2}]}))
    steps = compute_steps([load_trace(f)])
    assert steps.empty and list(steps.columns) == STEP_COLUMNS
