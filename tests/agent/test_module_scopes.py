"""Module scopes: an ``nn.Module: <label>`` range per module call in profiler windows, and only there."""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as module_globals
from torch.profiler import ProfilerActivity, profile

import profiler_agent
from profiler_agent import argcapture, module_scopes
from profiler_agent.failures import FailureLog
from profiler_agent.module_scopes import ModuleScopes, module_labels
from profiler_agent.options import AgentOptions, add_agent_arguments, options_from_args
from profiler_agent.profiling import profiler_settings
from profiler_agent.runformat import layout, read_jsonl, read_manifest

from .helpers import BASELINE, SCHEDULE, TINY, only_run, torchscope

PREFIX = "nn.Module: "


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = nn.ReLU()  # called twice per forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x)) + self.act(x)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(Block(), Block())
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class Boom(nn.Module):
    """Raises ``exc`` from inside a child call when armed."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 4)
        self.exc = exc
        self.armed = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.inner(x)
        if self.armed:
            raise self.exc
        return y


class Interrupt(BaseException):
    """Not an Exception: torch skips the always-called forward hooks for it."""


def _events(trace: Path) -> list[dict[str, Any]]:
    opener = gzip.open if trace.suffix == ".gz" else open
    with opener(trace, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def _ranges(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Module ranges in start order (ties: the longer, i.e. outer, first)."""
    found = [e for e in events if e["name"].startswith(PREFIX)]
    return sorted(found, key=lambda e: (e["ts"], -e["dur"]))


def _parent(event: dict[str, Any], ranges: list[dict[str, Any]]) -> str | None:
    """Label of the innermost module range enclosing ``event`` on its thread (None at top)."""
    best = None
    for r in ranges:
        if r is event or r["tid"] != event["tid"]:
            continue
        inside = r["ts"] <= event["ts"] and event["ts"] + event["dur"] <= r["ts"] + r["dur"]
        if inside and (best is None or r["dur"] < best["dur"]):
            best = r
    return None if best is None else best["name"][len(PREFIX):]


def _profile(fn: Any, path: Path) -> list[dict[str, Any]]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    prof.export_chrome_trace(str(path))
    return _events(path)


def _our_hooks() -> list[Any]:
    hooks = [*module_globals._global_forward_pre_hooks.values(),
             *module_globals._global_forward_hooks.values()]
    return [h for h in hooks if isinstance(getattr(h, "__self__", None), ModuleScopes)]


def test_labels_are_named_modules_names_root_and_class_names(tmp_path: Path) -> None:
    model, loss_fn = Net(), nn.CrossEntropyLoss()
    labels = module_labels(model)
    assert labels[id(model)] == "(model)" and labels[id(model.body[1].fc)] == "body.1.fc"
    assert set(labels.values()) == {"(model)", *(name for name, _ in model.named_modules() if name)}
    assert module_labels(None) == {}

    scopes = ModuleScopes(FailureLog(None), lambda: model)
    scopes.install()
    try:
        events = _profile(lambda: loss_fn(model(torch.randn(3, 8)), torch.tensor([0, 1, 0])),
                          tmp_path / "t.json")
    finally:
        scopes.uninstall()
    ranges = _ranges(events)
    assert [r["name"][len(PREFIX):] for r in ranges] == [
        "(model)", "body", "body.0", "body.0.fc", "body.0.act", "body.0.act",
        "body.1", "body.1.fc", "body.1.act", "body.1.act", "head", "CrossEntropyLoss"]
    assert all(r["cat"] == "user_annotation" for r in ranges)


def test_ranges_nest_and_hold_their_aten_ops(tmp_path: Path) -> None:
    model = Net()
    scopes = ModuleScopes(FailureLog(None), lambda: model)
    scopes.install()
    try:
        events = _profile(lambda: model(torch.randn(3, 8)), tmp_path / "t.json")
    finally:
        scopes.uninstall()
    ranges = _ranges(events)
    parents = {(r["name"][len(PREFIX):], _parent(r, ranges)) for r in ranges}
    assert parents == {("(model)", None), ("body", "(model)"), ("body.0", "body"), ("body.1", "body"),
                       ("body.0.fc", "body.0"), ("body.0.act", "body.0"), ("body.1.fc", "body.1"),
                       ("body.1.act", "body.1"), ("head", "(model)")}
    linears = [e for e in events if e["name"] == "aten::linear"]
    assert sorted(_parent(e, ranges) for e in linears) == ["body.0.fc", "body.1.fc", "head"]
    relus = [e for e in events if e["name"] == "aten::relu"]
    assert [_parent(e, ranges) for e in relus] == ["body.0.act"] * 2 + ["body.1.act"] * 2


def test_without_a_root_every_module_is_labelled_by_class(tmp_path: Path) -> None:
    model = Net()
    scopes = ModuleScopes(FailureLog(None), lambda: None)
    scopes.install()
    try:
        events = _profile(lambda: model(torch.randn(3, 8)), tmp_path / "t.json")
    finally:
        scopes.uninstall()
    names = [r["name"][len(PREFIX):] for r in _ranges(events)]
    assert names[:4] == ["Net", "Sequential", "Block", "Linear"]
    assert set(names) == {"Net", "Sequential", "Block", "Linear", "ReLU"}


@pytest.mark.parametrize("exc", [ValueError("bad input"), Interrupt()])
def test_ranges_are_closed_when_forward_raises(tmp_path: Path, exc: BaseException) -> None:
    model = nn.Sequential(Boom(exc))
    scopes = ModuleScopes(FailureLog(None), lambda: model)

    def job() -> None:
        scopes.install()
        try:
            with pytest.raises(type(exc)):
                model(torch.randn(2, 4))
            model[0].armed = False
            model(torch.randn(2, 4))  # the next call nests normally
        finally:
            scopes.uninstall()  # the window's end: closes what BaseException left open

    events = _profile(job, tmp_path / "t.json")
    assert scopes._stacks == [] and not _our_hooks()
    ranges = _ranges(events)
    names = [r["name"][len(PREFIX):] for r in ranges]
    assert names == ["(model)", "0", "0.inner", "(model)", "0", "0.inner"]
    assert all(r["dur"] >= 0 for r in ranges)
    first_root, second_root = ranges[0], ranges[3]
    if isinstance(exc, Exception):  # closed by the always-called post-hooks, before the second call
        assert first_root["ts"] + first_root["dur"] <= second_root["ts"]
        assert _parent(ranges[4], ranges) == "(model)" and _parent(ranges[5], ranges) == "0"
    else:  # left open until the window's end: it still ends, enclosing the later call
        assert first_root["ts"] + first_root["dur"] >= second_root["ts"] + second_root["dur"]


def test_a_failing_hook_never_breaks_the_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(name: str) -> Any:
        raise RuntimeError("no range today")

    monkeypatch.setattr(module_scopes, "_enter", broken)
    with profiler_agent.Run(name="broken", root=tmp_path,
                            schedule=profiler_agent.ProfileSchedule(wait=0, warmup=0, active=1)) as run:
        _train(run, 3)
        run_dir = run.dir
    errors = read_jsonl(run_dir / layout.AGENT_ERRORS).records
    assert errors and {e["where"] for e in errors} == {"module scope"}
    assert "no range today" in errors[0]["error"]
    steps = [r["step"] for r in read_jsonl(run_dir / layout.METRICS).records if "step_time_s" in r]
    assert steps == [0, 1, 2]
    assert not _our_hooks()


def _train(run: profiler_agent.Run, steps: int, seen: list[int] | None = None) -> None:
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        if seen is not None:
            seen.append(len(_our_hooks()))
        loss = F.cross_entropy(model(torch.randn(4, 8)), torch.randint(0, 2, (4,)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        run.step()


def _module_ranges_of(run_dir: Path) -> list[list[dict[str, Any]]]:
    return [_ranges(_events(t)) for t in layout.list_trace_files(run_dir)]


def test_hooks_exist_only_in_windows_and_the_manifest_says_so(tmp_path: Path) -> None:
    seen: list[int] = []
    # wait 1, warmup 1, active 1 (step 0 never profiled): warm-up 2, active 3.
    with profiler_agent.Run(name="scoped", root=tmp_path,
                            schedule=profiler_agent.ProfileSchedule(wait=1, warmup=1, active=1)) as run:
        _train(run, 6, seen)
        run_dir = run.dir
    assert seen == [0, 0, 2, 2, 0, 0]
    assert not _our_hooks()
    # Outside windows modules keep torch's hook-free fast path: no global forward hook at all.
    assert not module_globals._global_forward_pre_hooks and not module_globals._global_forward_hooks
    assert read_manifest(run_dir).extra["profiler"]["module_scopes"] is True
    (ranges,) = _module_ranges_of(run_dir)
    names = [r["name"][len(PREFIX):] for r in ranges]
    # Only the active iteration is recorded: one forward of the root.
    assert names == ["(model)", "body", "body.0", "body.0.fc", "body.0.act", "body.0.act",
                     "body.1", "body.1.fc", "body.1.act", "body.1.act", "head"]


def test_option_off_means_no_hooks_and_no_ranges(tmp_path: Path) -> None:
    seen: list[int] = []
    with profiler_agent.Run(name="plain", root=tmp_path, module_scopes=False,
                            schedule=profiler_agent.ProfileSchedule(wait=1, warmup=1, active=1)) as run:
        _train(run, 5, seen)
        run_dir = run.dir
    assert seen == [0] * 5
    assert read_manifest(run_dir).extra["profiler"]["module_scopes"] is False
    (ranges,) = _module_ranges_of(run_dir)
    assert ranges == []


def test_cli_flag_and_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    # An earlier test may have left argparse capture installed: keep these parses out of later tests.
    monkeypatch.setattr(argcapture, "_pending", {})
    parser = argparse.ArgumentParser()
    add_agent_arguments(parser)
    assert options_from_args(parser.parse_args([])).module_scopes is True
    off = options_from_args(parser.parse_args(["--no-module-scopes"]))
    assert off.module_scopes is False
    assert AgentOptions.from_mapping(json.loads(off.to_json())) == off
    assert profiler_settings(off)["module_scopes"] is False
    assert profiler_settings(AgentOptions())["module_scopes"] is True


def test_real_trace_of_the_wrapped_baseline(tmp_path: Path) -> None:
    """``torchscope run`` on the baseline sample: ranges named as graph/modules.json, ops inside them."""
    proc = torchscope("run", "--name", "scopes", "--root", str(tmp_path), *SCHEDULE, "--no-graph", "--",
                      sys.executable, str(BASELINE), "--steps", "5", *TINY)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = only_run(tmp_path)
    tree = json.loads((run_dir / layout.MODULE_TREE).read_text())
    types: dict[str, str] = {}
    stack = [tree["root"]]
    while stack:
        node = stack.pop()
        types[node["name"]] = node["type"]
        stack.extend(node["children"])
    trace = layout.list_trace_files(run_dir)[0]
    events = _events(trace)
    ranges = _ranges(events)
    labels = {r["name"][len(PREFIX):] for r in ranges}
    assert "(model)" in labels and "layer1.0.conv1" in labels
    assert labels - {"(model)"} <= (set(types) - {""}) | {"CrossEntropyLoss"}
    assert _parent(next(r for r in ranges if r["name"] == PREFIX + "layer1.0.conv1"), ranges) == "layer1.0"
    # Every convolution of the model runs inside the Conv2d module that called it; the others are
    # the dataset's blur passes (F.conv2d outside any module).
    convs = [e for e in events if e["name"] == "aten::conv2d"]
    parents = [_parent(e, ranges) for e in convs]
    assert {types[p] for p in parents if p is not None} == {"Conv2d"}
    assert parents.count(None) < len(parents)
    assert not (run_dir / layout.AGENT_ERRORS).exists()
