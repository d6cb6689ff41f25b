"""Fixtures of tests/variants: record a sample variant's two sides (problem on, problem off) with the real agent.

    def test_inplace(record_variant_pair):
        pair = record_variant_pair("sample_models/variants/inplace.py")
        pair.problem, pair.fixed      # the two run folders, in one tmp store (pair.root)

Each side is ``torchscope run --name <stem>-problem|fixed --no-graph --wait 1 --warmup 1
--active 3 -- python SCRIPT [args] --problem|--fixed`` (``AGENT_ARGS``: one profiler window of
3 steps after 1 skipped and 1 warm-up step, so a script needs at least 6 optimizer steps). The
two sides run at the same time (same contention for both), with ``OMP_NUM_THREADS=1``. A pair is recorded once per test
session (per xdist worker) for the same arguments; its runs are read-only for tests.

``command`` replaces the interpreter in front of the script, e.g.
``command=(torchrun, "--standalone", "--nproc_per_node", "2")``; ``problem``/``fixed`` are the
flags of each side, ``args`` those of both, ``agent_args`` the ``torchscope run`` options.
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import pytest

from profiler_agent import runformat as rf

PROJECT_ROOT = Path(__file__).resolve().parents[2]
AGENT_ARGS: tuple[str, ...] = ("--no-graph", "--wait", "1", "--warmup", "1", "--active", "3")
PROBLEM_FLAGS: tuple[str, ...] = ("--problem",)
FIXED_FLAGS: tuple[str, ...] = ("--fixed",)
SIDES = ("problem", "fixed")


class VariantPair(NamedTuple):
    """The store and the two run folders of one recorded variant pair."""

    root: Path
    problem: Path
    fixed: Path


def _env() -> dict[str, str]:
    # The runs go to the pair's own store, whatever the user's TORCHSCOPE_* say. One intra-op
    # thread per job: the two sides run at once beside other xdist workers, and OpenMP threads
    # that spin on an oversubscribed machine made a 0.3 ms matmul take 300 ms.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHSCOPE_")}
    return env | {"PYTHONPATH": os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if p),
                  "OMP_NUM_THREADS": "1"}


def _side_command(root: Path, name: str, program: Sequence[str], agent_args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "app", "run", "--root", str(root), "--name", name, *agent_args, "--", *program]


def _record(root: Path, stem: str, programs: dict[str, list[str]], agent_args: Sequence[str],
            timeout_s: float) -> VariantPair:
    procs = {side: subprocess.Popen(_side_command(root, f"{stem}-{side}", prog, agent_args), cwd=PROJECT_ROOT,
                                    env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for side, prog in programs.items()}
    failures = []
    for side, proc in procs.items():
        try:
            _, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            for p in procs.values():
                p.kill()
                p.communicate()
            pytest.fail(f"recording {stem} ({side}) took more than {timeout_s:.0f} s")
        if proc.returncode != 0:
            failures.append(f"{side} (exit {proc.returncode}):\n{err[-3000:]}")
    if failures:
        pytest.fail(f"recording {stem} failed: " + "\n".join(failures))
    by_name = {m.name: path for path, m in rf.list_runs(root).runs}
    missing = [side for side in SIDES if f"{stem}-{side}" not in by_name]
    if missing:
        pytest.fail(f"recording {stem}: no run for {missing} in {root} (found {sorted(by_name)})")
    return VariantPair(root, by_name[f"{stem}-problem"], by_name[f"{stem}-fixed"])


@pytest.fixture(scope="session")
def record_variant_pair(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., VariantPair]:
    """Factory: ``record_variant_pair(script, *, args=(), problem=PROBLEM_FLAGS, fixed=FIXED_FLAGS,
    agent_args=AGENT_ARGS, command=(sys.executable,), timeout_s=180) -> VariantPair``.

    ``script`` is relative to the project root. Runs are named ``<script stem>-problem`` and
    ``<script stem>-fixed``; the same call twice in a session returns the first recording.
    Fails the test (with the job's stderr) when a side does not finish cleanly.
    """
    recorded: dict[tuple[object, ...], VariantPair] = {}

    def record(script: str, *, args: Sequence[str] = (), problem: Sequence[str] = PROBLEM_FLAGS,
               fixed: Sequence[str] = FIXED_FLAGS, agent_args: Sequence[str] = AGENT_ARGS,
               command: Sequence[str] = (sys.executable,), timeout_s: float = 180) -> VariantPair:
        key = (script, tuple(args), tuple(problem), tuple(fixed), tuple(agent_args), tuple(command))
        if key not in recorded:
            stem = Path(script).stem.replace("_", "-")
            root = tmp_path_factory.mktemp(f"variant-{stem}")
            path = str(PROJECT_ROOT / script)
            programs = {"problem": [*command, path, *args, *problem], "fixed": [*command, path, *args, *fixed]}
            recorded[key] = _record(root, stem, programs, agent_args, timeout_s)
        return recorded[key]

    return record
