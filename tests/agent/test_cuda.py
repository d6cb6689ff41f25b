"""CUDA-only agent paths: allocator snapshots, GPU samples, kernels in traces, lazily read device losses."""
from __future__ import annotations

import gzip
import json
import pickle
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import profiler_agent
from profiler_agent.runformat import ArtifactKind, layout, read_jsonl, read_manifest

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_cuda_run_has_snapshot_gpu_samples_and_kernels(tmp_path: Path) -> None:
    device = torch.device("cuda")
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 8)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    schedule = profiler_agent.ProfileSchedule(wait=1, warmup=1, active=2)
    with profiler_agent.Run(name="cuda", root=tmp_path, schedule=schedule, grad_norm=True) as run:
        for _ in range(40):
            x = torch.randn(32, 64, device=device)
            loss = F.cross_entropy(model(x), torch.randint(0, 8, (32,), device=device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            run.step()
        run_dir = run.dir
        torch.cuda.synchronize()
    m = read_manifest(run_dir)
    assert any(d.get("type") == "cuda" for d in m.devices) and m.versions.get("cuda")
    rows = [r for r in read_jsonl(run_dir / layout.METRICS).records if "step_time_s" in r]
    assert [r["step"] for r in rows] == list(range(40))
    assert all(isinstance(r["loss"], float) and r["grad_norm"] > 0 for r in rows)
    snapshots = layout.list_snapshot_files(run_dir)
    assert len(snapshots) == 1
    with open(snapshots[0], "rb") as f:
        snapshot = pickle.load(f)
    assert "segments" in snapshot and "device_traces" in snapshot
    assert ArtifactKind.MEMORY_SNAPSHOT in {a.kind for a in m.artifacts}
    with gzip.open(layout.list_trace_files(run_dir)[0], "rt") as f:
        events = json.load(f)["traceEvents"]
    assert any(e.get("cat") == "kernel" for e in events)


def test_gpu_figures_in_system_samples(tmp_path: Path) -> None:
    from profiler_agent.system import read_system_sample

    torch.ones(1, device="cuda")
    sample = read_system_sample()
    assert sample["gpu_allocated_bytes"] > 0 and sample["gpu_reserved_bytes"] >= sample["gpu_allocated_bytes"]


def test_cuda_val_loss_and_memory_timeline(tmp_path: Path) -> None:
    device = torch.device("cuda")
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 8)).to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    schedule = profiler_agent.ProfileSchedule(wait=1, warmup=1, active=1)
    val_x, val_y = torch.randn(16, 64, device=device), torch.randint(0, 8, (16,), device=device)
    expected = []
    with profiler_agent.Run(name="cuda-val", root=tmp_path, schedule=schedule, graph=False,
                            memory_timeline=True) as run:
        for _ in range(6):
            loss = criterion(model(torch.randn(32, 64, device=device)), torch.randint(0, 8, (32,), device=device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            run.step()
            model.eval()
            with torch.no_grad():
                expected.append(criterion(model(val_x), val_y))  # kept on the device, like the agent's
            model.train()
        run_dir = run.dir
    rows = read_jsonl(run_dir / layout.METRICS).records
    val = [r["val_loss"] for r in rows if "val_loss" in r]
    assert val == pytest.approx([float(v) for v in expected], rel=1e-5)
    timelines = layout.list_memory_timeline_files(run_dir)
    assert len(timelines) == 1
    listed = [a.path for a in read_manifest(run_dir).artifacts if a.kind is ArtifactKind.MEMORY_TIMELINE]
    assert listed == [f"{layout.MEMORY_DIR}/{timelines[0].name}"]
    with gzip.open(timelines[0], "rt") as f:
        assert json.load(f)
    assert not (run_dir / layout.AGENT_ERRORS).exists()
