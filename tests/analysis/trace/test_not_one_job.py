"""Traces that cannot be the ranks of one job are said to be so, not silently merged into ranks."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

from app.cli import main

pytestmark = pytest.mark.usefixtures("module_trace_cache")


def _warnings(capsys: pytest.CaptureFixture[str], path: Path) -> list[str]:
    assert main(["analyze", str(path), "--json"]) == 0
    return [w for t in json.loads(capsys.readouterr().out)["traces"] for w in t["warnings"]]


def test_traces_of_different_world_sizes(shared_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # before/after captures of two jobs (V100 rank 1 of 2, A100 rank 3 of 8), once taken for two ranks
    said = _warnings(capsys, shared_data / "traces" / "gpu_before_after")
    assert len(said) == 2 and all("the traces record different world sizes: 2 (test.json.gz); "
                                  "8 (control.json.gz); they are not the ranks of one job" in w for w in said)


def test_two_captures_of_one_rank(shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("a.json.gz", "b.json.gz"):
        shutil.copy(shared_data / "traces" / "gpu_before_after" / "control.json.gz", tmp_path / name)
    said = _warnings(capsys, tmp_path)
    assert said == ["rank 3: steps 1009–1014 are recorded by more than one trace (a.json.gz, b.json.gz); one "
                    "job's windows record different steps, so these are captures of different runs and their steps "
                    "are counted together: analyze them one at a time, or compare two with torchscope diff A B"]


def test_two_windows_of_one_job_are_one_rank(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import profiler_agent

    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    schedule = profiler_agent.ProfileSchedule(wait=1, warmup=1, active=2, repeat=2)
    with profiler_agent.Run(name="two-windows", root=tmp_path, schedule=schedule, graph=False) as run:
        for _ in range(10):
            opt.zero_grad()
            nn.functional.cross_entropy(model(torch.randn(8, 6)), torch.randint(0, 3, (8,))).backward()
            opt.step()
            run.step()
        run_dir = run.dir
    assert len(list((run_dir / "traces").iterdir())) == 2  # two traces of rank 0
    assert _warnings(capsys, run_dir) == []
