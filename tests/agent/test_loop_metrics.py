"""Zero-code loop metrics: data wait per step, validation loss from loss modules in eval mode, threads."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn.modules import module as module_globals

from profiler_agent.activation import start_session, stop_session
from profiler_agent.options import AgentOptions
from profiler_agent.runformat import ArtifactKind, create_run, layout, read_jsonl, read_manifest

DATA_WAIT_S = 0.03


def _batches(n: int, size: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(size, 6, generator=g), torch.randint(0, 3, (size,), generator=g)) for _ in range(n)]


def _record(tmp_path: Path, loop: object) -> tuple[list[dict[str, object]], Path]:
    run_dir, _ = create_run(tmp_path, "loop")
    session = start_session(run_dir, AgentOptions(profile=False, graph=False))
    try:
        loop()  # type: ignore[operator]
    finally:
        stop_session(session)
    return read_jsonl(run_dir / layout.METRICS).records, run_dir


def test_data_time_is_the_wait_before_the_first_training_forward(tmp_path: Path) -> None:
    model = nn.Linear(6, 3)
    criterion = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def loop() -> None:
        for i, (x, y) in enumerate(_batches(5)):
            time.sleep(DATA_WAIT_S)  # the "DataLoader" of this iteration
            opt.zero_grad()
            criterion(model(x), y).backward()
            model(x)  # a second forward in the same iteration does not restart the clock
            opt.step()
            if i == 2:
                model.eval()
                time.sleep(0.2)  # a slow evaluation between two steps is not data time...
                model(x)  # ...up to its last model (or loss module) call
                model.train()

    rows, _ = _record(tmp_path, loop)
    steps = [r for r in rows if "step_time_s" in r]
    assert [r["step"] for r in steps] == [0, 1, 2, 3, 4]
    assert "data_time_s" not in steps[0]  # zero-code step 0 starts at its first forward
    for r in steps[1:]:
        assert DATA_WAIT_S * 0.9 <= r["data_time_s"] <= r["step_time_s"]
        assert r["data_time_s"] < 0.15, r  # the evaluation at step 3 (0.2 s) is left out
    assert steps[3]["step_time_s"] > 0.2


def test_val_loss_is_the_mean_per_sample_of_each_evaluation(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    criterion, summed = nn.CrossEntropyLoss(), nn.CrossEntropyLoss(reduction="sum")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    val = _batches(2, size=5) + _batches(1, size=2)  # unequal batches: a per-sample mean, not per batch
    expected: list[float] = []
    hooks_in_training: list[int] = []

    def evaluate(loss_fn: nn.Module, grad: bool) -> None:
        model.eval()
        total = 0.0
        with torch.set_grad_enabled(grad):
            for x, y in val:
                value = float(loss_fn(model(x), y).detach())
                total += value if loss_fn.reduction == "sum" else value * len(y)
        expected.append(total / sum(len(y) for _, y in val))
        model.train()

    def loop() -> None:
        for i, (x, y) in enumerate(_batches(5)):
            opt.zero_grad()
            loss = criterion(model(x), y)
            hooks_in_training.append(len(module_globals._global_forward_hooks))
            loss.backward()
            opt.step()
            if i == 1:
                evaluate(criterion, grad=True)  # evaluation without no_grad, mean reduction
            if i == 3:
                evaluate(summed, grad=False)
        evaluate(criterion, grad=False)  # after the last step: flushed when the job ends

    rows, _ = _record(tmp_path, loop)
    val_rows = [r for r in rows if "val_loss" in r]
    # The evaluation after step i ran while iteration i + 1 was in progress.
    assert [r["step"] for r in val_rows] == [2, 4, 5]
    assert [r["val_loss"] for r in val_rows] == pytest.approx(expected, rel=1e-5)
    assert all("step_time_s" not in r and "loss" not in r for r in val_rows)
    assert all("val_loss" not in r for r in rows if "step_time_s" in r)
    # Training iterations after the first run without the evaluation hook (and without discovery hooks).
    assert hooks_in_training[1:] == [0] * 4


def test_val_loss_logged_by_the_script_wins(tmp_path: Path) -> None:
    import profiler_agent

    model, criterion = nn.Linear(6, 3), nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with profiler_agent.Run(name="api", root=tmp_path, profile=False, graph=False) as run:
        for x, y in _batches(3):
            opt.zero_grad()
            criterion(model(x), y).backward()
            opt.step()
            run.step()
            model.eval()
            with torch.no_grad():
                v = criterion(model(x), y)
            model.train()
            run.log(val_loss=v)
        run_dir = run.dir
    rows = read_jsonl(run_dir / layout.METRICS).records
    assert len([r for r in rows if "val_loss" in r]) == 3  # the script's own, once per evaluation
    assert all("data_time_s" in r for r in rows if "step_time_s" in r)  # API: clock starts at Run()


def test_manifest_records_threads(tmp_path: Path) -> None:
    model = nn.Linear(6, 3)

    def loop() -> None:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.ones(2, 6)).sum().backward()
        opt.step()

    _, run_dir = _record(tmp_path, loop)
    threads = read_manifest(run_dir).extra["threads"]
    assert threads["intra_op"] == torch.get_num_threads() and threads["inter_op"] >= 1
    assert read_manifest(run_dir).extra["profiler"]["enabled"] is False  # _record profiles nothing
    assert all("profiled" not in r for r in read_jsonl(run_dir / layout.METRICS).records)
    assert threads["cpu_count"] == os.cpu_count()
    if hasattr(os, "sched_getaffinity"):
        assert threads["affinity_cpus"] == len(os.sched_getaffinity(0))


def test_memory_timeline_first_window_only(tmp_path: Path) -> None:
    import gzip
    import json

    import profiler_agent

    model, criterion = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)), nn.CrossEntropyLoss()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    schedule = profiler_agent.ProfileSchedule(wait=1, warmup=1, active=1, repeat=2)
    with profiler_agent.Run(name="mem", root=tmp_path, schedule=schedule, graph=False, memory_timeline=True) as run:
        for x, y in _batches(10):
            opt.zero_grad()
            criterion(model(x), y).backward()
            opt.step()
            run.step()
        run_dir = run.dir
    files = layout.list_memory_timeline_files(run_dir)
    # two windows, two traces; the (costly) timeline export for the first window only
    assert len(files) == 1 and len(layout.list_trace_files(run_dir)) == 2
    match = layout.MEMORY_TIMELINE_RE.match(files[0].name)
    assert match and layout.rank_from_worker(match["worker"]) == 0
    with gzip.open(files[0], "rt") as f:
        records = json.load(f)
    # [time_ns, action (1-4), bytes, category index]: the window allocated something.
    assert records and all(len(r) == 4 and 1 <= r[1] <= 4 for r in records)
    assert not (run_dir / layout.AGENT_ERRORS).exists()
    assert not [p for p in (run_dir / layout.MEMORY_DIR).iterdir() if p.name.startswith(".")]
    m = read_manifest(run_dir)
    listed = [a for a in m.artifacts if a.kind is ArtifactKind.MEMORY_TIMELINE]
    assert [(a.path, a.rank, a.bytes) for a in listed] == [
        (f"{layout.MEMORY_DIR}/{files[0].name}", 0, files[0].stat().st_size)]
    assert m.extra["profiler"]["memory_timeline"] is True and m.extra["profiler"]["with_stack"] is True


def test_memory_timeline_flag_is_off_by_default() -> None:
    import argparse

    from profiler_agent import argcapture
    from profiler_agent.options import (
        add_agent_arguments,
        options_from_args,
        read_env_options,
        write_env_options,
    )

    parser = argparse.ArgumentParser()
    add_agent_arguments(parser)
    argcapture.set_config_sink(lambda values: None)  # these are not a job's hyperparameters: drop them
    try:
        assert not options_from_args(parser.parse_args([])).memory_timeline
        opts = options_from_args(parser.parse_args(["--memory-timeline"]))
    finally:
        argcapture.set_config_sink(None)
    env: dict[str, str] = {}
    write_env_options(env, "/tmp/run", opts, owner_pid=1, t0=0.0)
    assert opts.memory_timeline and read_env_options(env).memory_timeline


def test_a_failing_evaluation_hook_is_recorded_and_training_goes_on(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from profiler_agent.evaluation import EvalLosses

    def broken(self: EvalLosses) -> dict[str, torch.Tensor]:
        self.remove_hook()
        self.step = None
        raise RuntimeError("evaluation bookkeeping broke")

    monkeypatch.setattr(EvalLosses, "end", broken)
    model, criterion = nn.Linear(6, 3), nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def loop() -> None:
        for x, y in _batches(4):
            opt.zero_grad()
            criterion(model(x), y).backward()
            opt.step()
            model.eval()
            criterion(model(x), y)
            model.train()

    rows, run_dir = _record(tmp_path, loop)
    assert [r["step"] for r in rows if "step_time_s" in r] == [0, 1, 2, 3]
    assert not [r for r in rows if "val_loss" in r]
    errors = read_jsonl(run_dir / layout.AGENT_ERRORS).records
    assert errors and {e["where"] for e in errors} == {"evaluation loss"}


def test_a_model_called_with_keywords_only_has_samples_from_step_0(tmp_path: Path) -> None:
    """The HF Trainer's ``model(**batch)``: the first iteration's global hooks read the keywords too."""
    class KeywordLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.head = nn.Embedding(11, 8), nn.Linear(8, 11)

        def forward(self, *, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            logits = self.head(self.embed(input_ids))
            return nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())

    model = KeywordLM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sizes = [3, 5, 3, 2]

    def loop() -> None:
        for b in sizes:
            batch = {"input_ids": torch.randint(0, 11, (b, 7)), "labels": torch.randint(0, 11, (b, 7))}
            model(**batch).backward()
            opt.step()
            opt.zero_grad()

    rows, _ = _record(tmp_path, loop)
    steps = [r for r in rows if "step_time_s" in r]
    assert [r.get("samples") for r in steps] == sizes
    assert [r.get("tokens") for r in steps] == [7 * b for b in sizes]
