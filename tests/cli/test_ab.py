"""`torchscope ab`: the balanced order, argument checks, and one real interleaved A/B of a tiny job."""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import pytest

from app.cli import ab_cmd, main
from app.cli.ab_cmd import Side, interleaved_order
from app.errors import UsageError
from app.workspace.sides import group_of
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout

PROJECT_ROOT = Path(__file__).resolve().parents[2]
A, B = Side.BASELINE, Side.CANDIDATE


def test_order_for_three_runs_is_abbaab() -> None:
    assert interleaved_order(3) == (A, B, B, A, A, B)
    assert interleaved_order(1) == (A, B)
    assert interleaved_order(2) == (A, B, B, A)


@pytest.mark.parametrize("n", range(1, 12))
def test_order_is_balanced(n: int) -> None:
    order = interleaved_order(n)
    assert len(order) == 2 * n and order.count(A) == order.count(B) == n
    pairs = [order[i:i + 2] for i in range(0, 2 * n, 2)]
    assert all(set(p) == {A, B} for p in pairs)  # every pair holds one run of each side
    firsts = [p[0] for p in pairs]
    assert firsts.count(A) - firsts.count(B) in (0, 1)  # each side goes first in half the pairs
    # Mean position of each side differs by at most one slot over the whole A/B: a linear drift
    # of the machine is shared, not loaded on one side.
    pos = {s: sum(i for i, x in enumerate(order) if x is s) for s in (A, B)}
    assert abs(pos[A] - pos[B]) <= 1
    if n % 2 == 0:
        assert pos[A] == pos[B]


def test_order_needs_one_run_per_side() -> None:
    with pytest.raises(UsageError, match="--runs 0"):
        interleaved_order(0)


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    ab_cmd.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_plan_splits_commands_and_passes_run_options() -> None:
    plan = ab_cmd.plan_from_args(_args("python train.py --lr 0.1", "python 'my train.py' --fast", "--runs", "2",
                                       "--name", "lr", "--max-steps", "50", "--no-profile",
                                       "--run-args=--active 5 --no-graph"))
    assert plan.baseline == ("python", "train.py", "--lr", "0.1")
    assert plan.candidate == ("python", "my train.py", "--fast")
    assert plan.groups == {A: "lr-baseline", B: "lr-candidate"}
    assert plan.run_options == ("--max-steps", "50", "--no-profile", "--active", "5", "--no-graph")
    assert plan.order == (A, B, B, A)


def test_advice_is_off_unless_asked() -> None:
    assert _args("a", "b").no_advice is True
    assert _args("a", "b", "--advice").no_advice is False


def test_plan_default_name_and_explicit_groups() -> None:
    plan = ab_cmd.plan_from_args(_args("python a.py", "python b.py"), now=0.0)
    assert plan.groups[A].startswith("ab-19") and plan.groups[A].endswith("-baseline")
    assert len(plan.order) == 2 * ab_cmd.DEFAULT_RUNS
    plan = ab_cmd.plan_from_args(_args("python a.py", "python b.py", "--group-a", "old", "--group-b", "new"))
    assert plan.groups == {A: "old", B: "new"}


@pytest.mark.parametrize(("argv", "message"), [
    (["", "python b.py"], "baseline command: empty command"),
    (["python a.py", "python 'b.py"], "No closing quotation"),
    (["python a.py", "python b.py", "--runs", "0"], "--runs 0: expected 1 or more"),
    (["python a.py", "python b.py", "--group-a", "x", "--group-b", "x"], "both 'x'"),
    (["python a.py", "python b.py", "--max-steps", "0"], "--max-steps 0"),
    (["python a.py", "python b.py", "--run-args=--name foo"], "--run-args may not hold --name"),
    (["python a.py", "python b.py", "--run-args=--active 2 --group=g"], "--run-args may not hold --group"),
    (["python a.py", "python b.py", "--threshold", "150"], "--threshold 150"),
    (["python a.py", "python b.py", "--fail-if-slower", "-1"], "--fail-if-slower -1"),
])
def test_bad_arguments_are_one_line_and_exit_2(tmp_path: Path, capsys, argv: list[str], message: str) -> None:
    assert main(["ab", *argv, "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("torchscope ab: error: ") and message in err and "\n" not in err
    assert not any(tmp_path.iterdir())  # nothing was run


def test_existing_group_is_refused_without_append(tmp_path: Path, capsys) -> None:
    run_dir, _ = rf.create_run(tmp_path, "lr-baseline")
    raw = json.loads((run_dir / layout.MANIFEST).read_text())
    rf.atomic_write_json(run_dir / layout.MANIFEST, {**raw, "group": "lr-baseline"})
    assert main(["ab", "python a.py", "python b.py", "--name", "lr", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "'lr-baseline' (1 run(s)) already exists" in err and "--append" in err
    assert len([p for p in tmp_path.iterdir() if not p.name.startswith(".")]) == 1  # nothing new was run


def _job(*extra: str) -> str:
    return shlex.join([sys.executable, str(PROJECT_ROOT / "benchmarks" / "ab_job.py"), "--steps", "30",
                       "--hidden", "128", "--batch-size", "64", *extra])


def test_failed_run_stops_the_ab(tmp_path: Path, capsys) -> None:
    rc = main(["ab", _job(), _job("--steps", "0"), "--runs", "2", "--name", "bad", "--root", str(tmp_path),
               "--no-profile"])
    captured = capsys.readouterr()
    assert rc == 2
    assert "run 2/4 (candidate) failed with exit code 2" in captured.err
    assert "the remaining 2 run(s) were not started" in captured.err
    assert "--steps and --threads must be >= 1" in captured.err  # the tail of the job's own stderr
    assert "run 3/4" not in captured.err
    assert len(rf.list_runs(tmp_path).runs) == 2


def test_interleaved_ab_end_to_end(tmp_path: Path, capsys) -> None:
    rc = main(["ab", _job(), _job("--slowdown", "10"), "--runs", "2", "--name", "e2e", "--root", str(tmp_path),
               "--no-profile", "--max-steps", "25"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "order A B B A" in captured.err and "run 3/4: candidate" in captured.err
    runs = rf.list_runs(tmp_path).runs
    groups = sorted(group_of(m) for _, m in runs)
    assert groups == ["e2e-baseline", "e2e-baseline", "e2e-candidate", "e2e-candidate"]
    assert all(m.status == rf.RunStatus.FINISHED for _, m in runs)
    assert all((getattr(m, "stopped", None) or m.extra.get("stopped")) == "max_steps" for _, m in runs)
    out = captured.out
    assert "baseline:  e2e-baseline" in out and "candidate: e2e-candidate" in out
    assert any(v in out for v in ("faster", "slower", "same", "inconclusive"))
    line = next(x for x in out.splitlines() if x.startswith("median step time of each run"))
    assert line.count("|") == 1 and len(line.split("|")[1].split()) == 3  # "candidate" and two medians
