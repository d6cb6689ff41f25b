"""The Python API: the same files as the wrapper, manual steps, extra windows, attaching to a wrapped run."""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import profiler_agent
from profiler_agent.runformat import RunStatus, layout, read_jsonl, read_manifest
from profiler_agent.session import get_session

from .helpers import API_EXAMPLE, only_run, torchscope


def _train(run: profiler_agent.Run, steps: int) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.SGD([{"params": model[0].parameters()},
                                 {"params": model[2].parameters(), "lr": 0.05}], lr=0.1)
    for i in range(steps):
        x = torch.randn(4, 8)
        loss = F.cross_entropy(model(x), torch.randint(0, 2, (4,)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        run.step(accuracy=0.5 + i / 100)
        if i == 3:
            run.log(val_loss=torch.tensor(1.25))
            run.profile_window(warmup=0, active=1)


def test_run_writes_the_same_files_as_the_wrapper(tmp_path: Path) -> None:
    schedule = profiler_agent.ProfileSchedule(wait=1, warmup=1, active=1)
    with profiler_agent.Run(name="api", root=tmp_path, config={"lr": 0.1, "model": "mlp"}, tags=["t"],
                            schedule=schedule) as run:
        _train(run, 8)
        run_dir = run.dir
        assert read_manifest(run_dir).status is RunStatus.RUNNING
    assert get_session() is None  # hooks and session are gone after the block
    m = read_manifest(run_dir)
    assert m.status is RunStatus.FINISHED and m.exit_code == 0 and m.name == "api" and m.tags == ("t",)
    assert m.config == {"lr": 0.1, "model": "mlp"}
    records = read_jsonl(run_dir / layout.METRICS).records
    steps = [r for r in records if "step_time_s" in r]
    assert [r["step"] for r in steps] == list(range(8))
    assert all(r["lr"] == 0.1 and r["lr_1"] == 0.05 and r["samples"] == 4 and "loss" in r for r in steps)
    assert steps[2]["accuracy"] == pytest.approx(0.52)
    assert [r for r in records if "val_loss" in r] == [{"step": 4, "time": pytest.approx(records[4]["time"], abs=5),
                                                      "rank": 0, "val_loss": 1.25}]
    traces = layout.list_trace_files(run_dir)
    labels = []
    for t in traces:
        with gzip.open(t, "rt") as f:
            labels.append(sorted(e["name"] for e in json.load(f)["traceEvents"]
                                 if str(e.get("name")).startswith("ProfilerStep#")))
    # The schedule's window (iteration 3) and the requested one (iteration 5, no warm-up).
    assert labels == [["ProfilerStep#3"], ["ProfilerStep#5"]]
    # Iterations under a profiler (warm-up 2, active 3; requested 5) say so; the others carry no key.
    assert [r["step"] for r in steps if r.get("profiled") is True] == [2, 3, 5]
    assert all("profiled" not in r for r in steps if r["step"] not in (2, 3, 5))
    windows = m.extra["profiler"].pop("windows")
    assert [(w["reason"], w["steps"]) for w in windows] == [("early", [3]), ("requested", [5])]
    assert m.extra["profiler"] == {"wait": 1, "warmup": 1, "active": 1, "repeat": 1, "skip_first": 1,
                                   "enabled": True, "with_stack": False, "memory_timeline": False,
                                   "module_scopes": True, "evaluation_window": True, "anomaly_factor": 2.0,
                                   "max_anomaly_windows": 2}
    tree = json.loads((run_dir / layout.MODULE_TREE).read_text())
    assert tree["root"]["type"] == "Sequential" and tree["root"]["params"] == 8 * 16 + 16 + 16 * 2 + 2
    assert (run_dir / layout.GRAPH_DOT).read_text().startswith("digraph")


def test_exception_inside_the_block_marks_failed(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="boom"), profiler_agent.Run(name="bad", root=tmp_path, profile=False) as run:
        _train(run, 2)
        raise ValueError("boom")
    run_dir = only_run(tmp_path)
    m = read_manifest(run_dir)
    assert m.status is RunStatus.FAILED
    assert "ValueError: boom" in (run_dir / layout.TRACEBACK_LOG).read_text()
    assert len([r for r in read_jsonl(run_dir / layout.METRICS).records if "loss" in r]) == 2


def test_invalid_schedule_names_the_bad_values() -> None:
    with pytest.raises(ValueError, match=r"active=0 \(need > 0\).*repeat=-1"):
        profiler_agent.ProfileSchedule(active=0, repeat=-1)


def test_public_surface() -> None:
    assert set(profiler_agent.__all__) >= {"Run", "ProfileSchedule", "AgentOptions", "launch", "LaunchRequest"}
    for name in profiler_agent.__all__:
        assert getattr(profiler_agent, name) is not None


def test_api_inside_a_wrapped_process_attaches_to_that_run(tmp_path: Path) -> None:
    proc = torchscope("run", "--root", str(tmp_path), "--name", "wrapped-api", "--",
                      sys.executable, str(API_EXAMPLE), "--steps", "12", "--root", str(tmp_path / "elsewhere"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    run_dir = only_run(tmp_path)  # one run, not a second one created by the API
    assert not (tmp_path / "elsewhere").exists()
    m = read_manifest(run_dir)
    assert m.name == "wrapped-api" and m.status is RunStatus.FINISHED
    records = read_jsonl(run_dir / layout.METRICS).records
    steps = [r["step"] for r in records if "step_time_s" in r]
    assert steps == list(range(12))  # run.step() drives iterations; the optimizer hook does not double them
    assert len([r for r in records if "val_loss" in r]) == 2
    assert m.config["hidden"] == 128  # from argparse (wrapper) and config= (API)


def test_unwritable_store_leaves_the_script_running(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "store"
    blocker.write_text("a file, not a folder")
    with profiler_agent.Run(name="nowhere", root=blocker) as run:
        _train(run, 3)
        run.log(x=1)
        assert run.dir is None and run.disabled
    assert "training continues unrecorded" in capsys.readouterr().err
    assert get_session() is None


def test_amp_loss_is_recorded_unscaled(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    losses = []
    with profiler_agent.Run(name="amp", root=tmp_path, profile=False, graph=False) as run:
        for _ in range(3):
            loss = model(torch.ones(2, 4)).pow(2).mean()
            losses.append(loss.item())
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            run.step()
        run_dir = run.dir
    rows = [r for r in read_jsonl(run_dir / layout.METRICS).records if "loss" in r]
    assert [r["loss"] for r in rows] == pytest.approx(losses)


def test_a_graph_that_cannot_be_drawn_is_recorded_not_raised(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from profiler_agent import graph

    def broken(*args: object) -> str:
        raise RecursionError("graph too deep for torchviz")

    monkeypatch.setattr(graph, "make_backward_dot", broken)
    with profiler_agent.Run(name="nograph", root=tmp_path, profile=False) as run:
        _train(run, 3)
        run_dir = run.dir
    errors = read_jsonl(run_dir / layout.AGENT_ERRORS).records
    assert [e["where"] for e in errors] == ["backward graph"]
    assert "RecursionError: graph too deep" in errors[0]["error"]
    assert not (run_dir / layout.GRAPH_DOT).exists()
    assert len([r for r in read_jsonl(run_dir / layout.METRICS).records if "loss" in r]) == 3
    assert read_manifest(run_dir).status is RunStatus.FINISHED


def test_sys_exit_zero_inside_a_run_is_a_clean_finish(tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(SystemExit), \
            profiler_agent.Run(name="exits", root=tmp_path, profile=False, graph=False) as run:
        model(torch.randn(2, 3)).sum().backward()
        opt.step()
        run.step()
        run_dir = run.dir
        raise SystemExit(0)
    m = read_manifest(run_dir)
    assert m.status is RunStatus.FINISHED and m.exit_code == 0
    assert not (run_dir / layout.TRACEBACK_LOG).exists()
