"""The advisor on real traces: public GPU/ROCm/multi-rank traces from ../shared/data, and CPU traces
recorded with torch.profiler 2.13 (evaluation with and without no_grad, kept in data/)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.analysis.advisor import advise
from app.workspace.evidence import load_evidence


@pytest.fixture(scope="module")
def shared_advice(shared_data: Path) -> dict[str, object]:
    traces = shared_data / "traces"
    refs = {"control": traces / "gpu_before_after" / "control.json.gz",
            "test": traces / "gpu_before_after" / "test.json.gz",
            "nccl": traces / "nccl_distributed", "two_ranks": traces / "two_ranks", "rocm": traces / "rocm",
            "cpu_only": traces / "cpu_only", "event_sync": traces / "cuda_event_sync"}
    return {k: advise(load_evidence(v)) for k, v in refs.items()}


def _rules(advice) -> set[str]:  # noqa: ANN001
    return {f.rule for f in advice.findings}


def test_no_rule_fails_on_any_real_trace(shared_advice):
    for name, advice in shared_advice.items():
        assert advice.errors == {}, (name, advice.errors)
        assert json.dumps(advice.to_json(), allow_nan=False)  # JSON-ready, no NaN


def test_gpu_control_trace(shared_advice):
    advice = shared_advice["control"]
    by_rule = {f.rule: f for f in advice.findings}
    # A100 (compute 8.0) running addmm/mm in float32
    assert by_rule["mixed_precision"].evidence["compute_major"] == 8
    assert 0.1 <= by_rule["mixed_precision"].evidence["fp32_mma_share"] <= 0.4
    # NCCL all-to-all/all-reduce kernels mostly not hidden behind compute
    assert by_rule["comm_not_overlapped"].evidence["exposed_comm_share"] >= 0.1
    assert "host_device_copies" in by_rule
    # a torchrec model using torch.gather (GatherBackward0) is not nn.DataParallel
    assert "data_parallel_used" not in by_rule
    gains = [f.gain_share for f in advice.findings]
    assert gains == sorted(gains, reverse=True)


def test_gpu_test_trace_v100_fp32(shared_advice):
    f = next(f for f in shared_advice["test"].findings if f.rule == "mixed_precision")
    assert f.evidence["compute_major"] == 7 and f.evidence["fp32_mma_share"] > 0.2


def test_rules_that_cannot_look_say_why(shared_advice):
    assert "mixed_precision" in shared_advice["rocm"].skipped  # AMD: no tensor-core rule
    assert "mixed_precision" in shared_advice["nccl"].skipped  # record_shapes off: dtypes unknown
    assert "eval_without_no_grad" in shared_advice["two_ranks"].skipped  # TorchScript graphs
    cpu = shared_advice["cpu_only"]
    assert cpu.findings == () and "low_device_utilization" in cpu.skipped


DATA = Path(__file__).resolve().parent / "data"


def record_cpu_trace(path: Path, *, no_grad: bool) -> Path:
    """Record the CPU trace kept in data/: 3 training steps, each followed by an evaluation
    forward with or without torch.no_grad() (run this module as a script to refresh them)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                          nn.Linear(8 * 8 * 8, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,))
    with torch.profiler.profile(record_shapes=True) as prof:
        for _ in range(3):
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            model.eval()
            if no_grad:
                with torch.no_grad():
                    model(x)
            else:
                model(x)
            model.train()
            prof.step()
    prof.export_chrome_trace(str(path))
    return path


def test_eval_without_no_grad_on_recorded_cpu_traces():
    bad = advise(load_evidence(DATA / "eval_grad.pt.trace.json.gz"))
    good = advise(load_evidence(DATA / "eval_no_grad.pt.trace.json.gz"))
    [f] = [f for f in bad.findings if f.rule == "eval_without_no_grad"]
    assert f.evidence["unused_graph_ops"] == 6  # conv2d, batch_norm, linear in 2 evaluated steps
    assert "eval_without_no_grad" in good.checked
    assert not [f for f in good.findings if f.rule == "eval_without_no_grad"]


if __name__ == "__main__":  # refresh data/ (torch 2.13, CPU)
    import gzip
    import shutil
    import tempfile

    for name, flag in (("eval_grad", False), ("eval_no_grad", True)):
        with tempfile.TemporaryDirectory() as tmp:
            raw = record_cpu_trace(Path(tmp) / "t.json", no_grad=flag)
            with open(raw, "rb") as src, gzip.open(DATA / f"{name}.pt.trace.json.gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
