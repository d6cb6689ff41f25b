"""Small pieces of the agent on their own: schedule, naming, batch sizes, FLOPs, metrics order, argparse capture."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch
from torch import nn

from profiler_agent import argcapture
from profiler_agent.failures import FailureLog
from profiler_agent.graph import compute_module_flops, describe_module_tree
from profiler_agent.hooks import batch_size_of
from profiler_agent.launcher import default_run_name
from profiler_agent.metrics import MetricsLog
from profiler_agent.options import AgentOptions, ProfileSchedule, read_env_options, write_env_options
from profiler_agent.runformat import layout, read_jsonl


def test_schedule_window_starts() -> None:
    s = ProfileSchedule(wait=2, warmup=1, active=2, repeat=2)
    # Iteration 0 is never profiled; cycles of 5 start at 1: wait 1-2, warmup 3, active 4-5; then 6-10.
    assert [i for i in range(30) if s.window_start(i)] == [3, 8]
    forever = ProfileSchedule(wait=0, warmup=0, active=1, repeat=0)
    assert [i for i in range(5) if forever.window_start(i)] == [1, 2, 3, 4]


def test_options_round_trip_through_the_environment() -> None:
    opts = AgentOptions(profile=False, schedule=ProfileSchedule(1, 2, 3, 4), with_stack=True, grad_norm=True)
    env: dict[str, str] = {}
    write_env_options(env, "/tmp/run", opts, owner_pid=1, t0=2.5)
    assert read_env_options(env) == opts
    assert read_env_options({}) == AgentOptions()
    assert read_env_options({"TORCHSCOPE_AGENT_OPTIONS": "{not json"}) == AgentOptions()


@pytest.mark.parametrize(("command", "name"), [
    (("python", "train.py", "--lr", "1"), "train"),
    (("/usr/bin/python3", "-u", "scripts/fit_model.py"), "fit_model"),
    (("python", "-m", "pkg.train"), "train"),
    (("torchrun", "--nproc_per_node=2", "x.py"), "torchrun"),
])
def test_default_run_name(command: tuple[str, ...], name: str) -> None:
    assert default_run_name(command) == name


def test_batch_size_of_common_inputs() -> None:
    x = torch.zeros(5, 3)
    assert batch_size_of((x,)) == 5
    assert batch_size_of((), {"input_ids": torch.zeros(7, 2, dtype=torch.long)}) == 7
    assert batch_size_of(({"pixels": x},)) == 5
    assert batch_size_of(([x, x],)) == 5
    assert batch_size_of((torch.tensor(1.0),)) is None
    assert batch_size_of((3, "a")) is None


def test_module_flops_and_tree() -> None:
    conv = nn.Conv2d(4, 8, 3, padding=1)
    depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8)
    assert compute_module_flops(conv, (2, 8, 5, 5)) == 2 * (2 * 8 * 25) * 4 * 9
    assert compute_module_flops(depthwise, (2, 8, 5, 5)) == 2 * (2 * 8 * 25) * 9
    assert compute_module_flops(nn.Linear(10, 3), (4, 3)) == 2 * 12 * 10
    assert compute_module_flops(nn.ReLU(), (4, 3)) == 0
    model = nn.Sequential(nn.Linear(10, 3), nn.ReLU())
    tree = describe_module_tree(model, {id(model[0]): (4, 3)})
    assert tree["root"]["params"] == 33 and tree["root"]["flops"] == 240
    assert [c["name"] for c in tree["root"]["children"]] == ["0", "1"]
    assert tree["nodes"] == 3 and not tree["truncated"]


def test_metrics_log_keeps_order_and_reads_tensors(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path, FailureLog(tmp_path), rank=2, t0=0.0)
    log.append({"step": 0, "loss": torch.tensor(1.5), "lr": 0.1})
    log.append({"step": 1, "loss": torch.tensor([0.5]), "note": "x"})
    log.close()
    rows = read_jsonl(tmp_path / layout.METRICS).records
    assert [(r["step"], r["loss"], r["rank"]) for r in rows] == [(0, 1.5, 2), (1, 0.5, 2)]
    assert rows[1]["note"] == "x"


def test_failure_log_records_and_never_raises(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = FailureLog(tmp_path, rank=1)
    with log.guard("thing"):
        raise OSError("disk full")
    with log.guard("thing"):
        raise OSError("again")
    log.close()
    rows = read_jsonl(tmp_path / layout.AGENT_ERRORS).records
    assert [r["error"] for r in rows] == ["OSError: disk full", "OSError: again"]
    assert capsys.readouterr().err.count("thing failed") == 1  # announced once per place
    unwritable = FailureLog(tmp_path / "missing" / "deeper", rank=0)
    (tmp_path / "missing").write_text("a file")
    unwritable.record("x", RuntimeError("y"))  # must not raise
    assert unwritable.count == 1


def test_argparse_capture_records_the_outer_namespace() -> None:
    seen: list[dict[str, object]] = []
    argcapture.install_argparse_capture()
    argcapture.set_config_sink(lambda values: seen.append(dict(values)))
    try:
        parser = argparse.ArgumentParser()
        parser.add_argument("--lr", type=float, default=0.1)
        sub = parser.add_subparsers(dest="cmd")
        sub.add_parser("train").add_argument("--epochs", type=int, default=1)
        args = parser.parse_args(["--lr", "0.5", "train", "--epochs", "3"])
    finally:
        argcapture.set_config_sink(None)
    assert args.lr == 0.5 and args.epochs == 3
    assert seen == [{"lr": 0.5, "cmd": "train", "epochs": 3}]
    json.dumps(seen)


def test_arguments_parsed_after_a_session_ended_belong_to_no_later_run() -> None:
    argcapture.install_argparse_capture()
    argcapture.set_config_sink(lambda values: None)  # a session...
    argcapture.set_config_sink(None)  # ...that ended
    parser = argparse.ArgumentParser()
    parser.add_argument("--root")
    parser.parse_args(["--root", "elsewhere"])  # a tool's own command line, in the same process
    seen: list[dict[str, object]] = []
    argcapture.set_config_sink(lambda values: seen.append(dict(values)))
    try:
        parser.parse_args(["--root", "mine"])
    finally:
        argcapture.set_config_sink(None)
    assert seen == [{"root": "mine"}]


def test_heartbeat_refreshes_the_manifest(tmp_path: Path) -> None:
    import time

    from profiler_agent.heartbeat import Heartbeat
    from profiler_agent.runformat import create_run, read_manifest

    run_dir, m = create_run(tmp_path, "beat")
    beat = Heartbeat(run_dir, interval_s=0.05).start()
    deadline = time.monotonic() + 10
    while read_manifest(run_dir).heartbeat == m.heartbeat and time.monotonic() < deadline:
        time.sleep(0.05)
    beat.stop()
    assert read_manifest(run_dir).heartbeat > m.heartbeat


def test_primary_optimizer_gan_alternation_and_phase_switch(tmp_path: Path) -> None:
    from profiler_agent.activation import start_session, stop_session
    from profiler_agent.runformat import create_run

    run_dir, _ = create_run(tmp_path, "phases")
    session = start_session(run_dir, AgentOptions(profile=False, graph=False))
    try:
        a, b = nn.Linear(2, 1), nn.Linear(2, 1)
        opt_a = torch.optim.SGD(a.parameters(), lr=0.1)
        opt_b = torch.optim.SGD(b.parameters(), lr=0.2)

        def train(*opts: torch.optim.Optimizer) -> None:
            for opt, model in zip(opts, (a, b) if opts[0] is opt_a else (b,), strict=False):
                model(torch.ones(3, 2)).sum().backward()
                opt.step()

        for _ in range(3):
            train(opt_a, opt_b)  # GAN-like: both step every iteration, A first
        for _ in range(3):
            train(opt_b)  # a second phase: only B steps, A is still alive
    finally:
        stop_session(session)
    rows = [r for r in read_jsonl(run_dir / layout.METRICS).records if "step_time_s" in r]
    # B's step in the last GAN iteration and its first solo step make it primary: no step is lost.
    assert [r["lr"] for r in rows] == [0.1, 0.1, 0.1, 0.2, 0.2, 0.2]
    assert [r["step"] for r in rows] == list(range(6))


def test_git_fields_come_from_one_porcelain_v2_status() -> None:
    from profiler_agent.environment import parse_git_status

    clean = "# branch.oid 03d9495\n# branch.head main\n# branch.upstream origin/main\n"
    assert parse_git_status(clean) == {"commit": "03d9495", "dirty": False, "branch": "main"}
    dirty = "# branch.oid 03d9495\n# branch.head (detached)\n1 .M N... 100644 100644 100644 a b f.py\n"
    assert parse_git_status(dirty) == {"commit": "03d9495", "dirty": True}
    assert parse_git_status("# branch.oid (initial)\n# branch.head main\n") == {}


def test_dist_versions_read_from_dist_info_match_importlib_metadata() -> None:
    from importlib import metadata

    from profiler_agent.environment import _dist_version

    for name in ("torch", "psutil"):
        assert _dist_version(name) == metadata.version(name)
    assert _dist_version("no-such-distribution-here") is None
