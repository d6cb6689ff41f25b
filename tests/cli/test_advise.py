"""`torchscope advise`: JSON contract on a real GPU trace, runs by name, text output, CI gate, errors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main
from app.data import trace_cache
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "traces"
GPU = SHARED / "gpu_before_after" / "control.json.gz"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present")


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(trace_cache.CACHE_ENV, str(tmp_path / "cache"))


@needs_shared
def test_json_contract_on_gpu_trace(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["advise", str(GPU), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) >= {"findings", "checked", "skipped", "errors"} and doc["errors"] == {}
    rules = [f["rule"] for f in doc["findings"]]
    assert "mixed_precision" in rules
    for f in doc["findings"]:
        assert {"rule", "severity", "title", "evidence", "fix", "expected_gain", "doc_url", "chart"} <= set(f)
        assert f["severity"] in ("high", "medium", "low")
        assert all(isinstance(v, (int, float)) or v is None for v in f["evidence"].values())
        assert f["doc_url"].startswith("https://pytorch.org/")
    gains = [f["gain_share"] for f in doc["findings"]]
    assert gains == sorted(gains, reverse=True)
    # a bare trace: rules needing curves or config stay silent and say why
    assert "nonfinite_loss" in doc["skipped"] and "nonfinite_loss" not in rules


def _nan_run(root: Path) -> Path:
    run_dir, _ = rf.create_run(root, "nan-run", config={"lr": 1.0})
    with rf.JsonlWriter(run_dir / layout.METRICS) as w:
        for step in range(10):
            w.write({"step": step, "rank": 0, "loss": 2.0 - 0.1 * step if step < 6 else float("nan"), "lr": 1.0})
    rf.update_manifest(run_dir, status=rf.RunStatus.FINISHED)
    return run_dir


def test_run_by_name_text_and_fail_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    _nan_run(root)
    assert main(["advise", "nan-run", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "[HIGH] Loss became NaN at step 6" in out and "evidence: " in out and "set_detect_anomaly" in out
    assert "   weight: from 10 logged steps; loss 1.5–2 across the logged steps" in out
    assert main(["advise", "nan-run", "--root", str(root), "--fail-on", "high"]) == 1
    capsys.readouterr()
    assert main(["advise", "nan-run", "--root", str(root), "--json", "--rule", "loss_plateau"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["findings"] == [] and doc["checked"] + list(doc["skipped"]) == ["loss_plateau"]


def test_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["advise", "no-such-run", "--root", str(tmp_path)]) == 2
    assert "no-such-run" in capsys.readouterr().err
    assert main(["advise", str(tmp_path), "--rule", "bogus"]) == 2
    assert "unknown advisor rule 'bogus'" in capsys.readouterr().err


def test_unreadable_trace_gives_partial_advice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = _nan_run(tmp_path / "runs")
    (run_dir / layout.TRACES_DIR).mkdir(exist_ok=True)
    (run_dir / layout.TRACES_DIR / "host_1.1700000000000000000.pt.trace.json").write_text("{not json")
    assert main(["advise", str(run_dir), "--json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert [f["rule"] for f in doc["findings"]] == ["nonfinite_loss"]
    assert any("traces not used" in p for p in doc["problems"])
