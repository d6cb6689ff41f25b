"""Fixtures of tests/variants: each sample variant's two sides (problem on, problem off), recorded
with the real agent once per test session and shared by every xdist worker.

    def test_inplace(variant_pair):
        pair = variant_pair("inplace")
        pair.problem, pair.fixed      # the two run folders, in one store (pair.root)
        pair.diff                     # ``torchscope diff problem fixed --json``, computed once

``PAIRS`` says how each pair is recorded. Each side is ``torchscope run --name <name>-problem|fixed
<agent args> -- python SCRIPT <args> <side flags>``, exactly as a user records it; the DDP side of
``data_parallel`` is ``torchscope run ... -- torchrun --standalone --nproc_per_node 2 SCRIPT ...``
(gloo on CPU). ``AGENT_ARGS`` is one profiler window of 3 steps after 1 skipped and 1 warm-up step,
so a script needs at least 6 optimizer steps. The two sides run at the same time (the same
contention for both), with ``OMP_NUM_THREADS=1``.

A pair is recorded by the first test that asks for it, under ``tests/once.py``'s lock: the other
worker reuses the store instead of recording it again (each side is a fresh Python importing
torch: 6-9 s of CPU). Its runs are read-only for tests.
"""
from __future__ import annotations

import functools
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from app.analysis.advisor import Advice, RunEvidence, advise
from app.workspace.evidence import load_evidence
from profiler_agent import runformat as rf
from tests.conftest import torchrun_path
from tests.once import build_once

PROJECT_ROOT = Path(__file__).resolve().parents[2]
AGENT_ARGS: tuple[str, ...] = ("--no-graph", "--wait", "1", "--warmup", "1", "--active", "3")
# One profiler window after 3 skipped steps and 1 warm-up: DataLoader workers have filled their
# prefetch queues by then (the first batches of a worker process are slower).
LOADER_AGENT_ARGS: tuple[str, ...] = ("--no-graph", "--wait", "3", "--warmup", "1", "--active", "4")
# Curve variants need no trace: the evidence is the logged grad_norm, loss, val_loss and lr.
CURVE_AGENT_ARGS: tuple[str, ...] = ("--no-graph", "--no-profile")
SIDES = ("problem", "fixed")
DIFF_FILE = "diff.json"


class PairSpec(NamedTuple):
    """How one variant pair is recorded (the tests' sizes; benchmarks/variants.py has larger ones)."""

    script: str  # under sample_models/variants/
    problem: tuple[str, ...] = ("--problem",)
    fixed: tuple[str, ...] = ("--fixed",)
    args: tuple[str, ...] = ()  # both sides
    agent: tuple[str, ...] = AGENT_ARGS
    torchrun_fixed: bool = False  # the fixed side runs under torchrun, 2 processes


PAIRS: dict[str, PairSpec] = {
    "mixed_precision": PairSpec("mixed_precision.py", args=("--steps", "6")),
    "checkpointing": PairSpec("checkpointing.py", args=("--steps", "6")),
    "inplace": PairSpec("inplace.py", args=("--steps", "6")),
    "zero_grad": PairSpec("zero_grad.py", args=("--steps", "6")),
    "dataloader_workers": PairSpec("dataloader_workers.py", problem=("--workers", "0"),
                                   fixed=("--workers", "2", "--pin-memory"), agent=LOADER_AGENT_ARGS),
    "gradient_clipping": PairSpec("gradient_clipping.py", problem=("--clip-grad-norm", "0"),
                                  fixed=("--clip-grad-norm", "1"), agent=(*CURVE_AGENT_ARGS, "--grad-norm")),
    "lr_plateau": PairSpec("lr_plateau.py", problem=("--schedule", "constant"), fixed=("--schedule", "plateau"),
                           agent=CURVE_AGENT_ARGS),
    # The same model, data and global batch on both sides: one process with nn.DataParallel, or
    # two DDP processes of 32 samples each.
    "data_parallel": PairSpec("data_parallel.py", problem=("--parallel", "dp"), fixed=("--parallel", "ddp"),
                              args=("--steps", "6"), torchrun_fixed=True),
}


class VariantPair(NamedTuple):
    """The store and the two run folders of one recorded variant pair, and their diff."""

    root: Path
    problem: Path
    fixed: Path

    @property
    def diff(self) -> dict[str, Any]:
        """``torchscope diff <problem> <fixed> --json``, computed when the pair was recorded."""
        doc: dict[str, Any] = json.loads((self.root / DIFF_FILE).read_text(encoding="utf-8"))
        return doc


@functools.cache
def run_evidence(run: Path) -> RunEvidence:
    """``load_evidence(run)``, once per run and worker (the runs are read-only)."""
    return load_evidence(run)


@functools.cache
def run_advice(run: Path) -> Advice:
    """The advisor's full advice on a recorded run, once per run and worker."""
    return advise(run_evidence(run))


def _env() -> dict[str, str]:
    # The runs go to the pair's own store, whatever the user's TORCHSCOPE_* say. One intra-op
    # thread per job: the two sides run at once beside other xdist workers, and OpenMP threads
    # that spin on an oversubscribed machine made a 0.3 ms matmul take 300 ms.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHSCOPE_")}
    return env | {"PYTHONPATH": os.pathsep.join(p for p in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if p),
                  "OMP_NUM_THREADS": "1"}


def programs(spec: PairSpec) -> dict[str, list[str]]:
    """side → the command ``torchscope run`` wraps."""
    script = str(PROJECT_ROOT / "sample_models" / "variants" / spec.script)
    fixed_launcher = [torchrun_path(), "--standalone", "--nproc_per_node", "2"] if spec.torchrun_fixed else [sys.executable]
    return {"problem": [sys.executable, script, *spec.args, *spec.problem],
            "fixed": [*fixed_launcher, script, *spec.args, *spec.fixed]}


def _side_command(root: Path, name: str, program: Sequence[str], agent_args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "app", "run", "--root", str(root), "--name", name, *agent_args, "--", *program]


def _runs(root: Path, name: str) -> VariantPair:
    by_name = {m.name: path for path, m in rf.list_runs(root).runs}
    missing = [side for side in SIDES if f"{name}-{side}" not in by_name]
    if missing:
        pytest.fail(f"recording {name}: no run for {missing} in {root} (found {sorted(by_name)})")
    return VariantPair(root, by_name[f"{name}-problem"], by_name[f"{name}-fixed"])


def record_pair(root: Path, name: str, spec: PairSpec, timeout_s: float = 600) -> VariantPair:
    """Record both sides at once into ``root``, then write their diff; fail the test on a failed side."""
    procs = {side: subprocess.Popen(_side_command(root, f"{name}-{side}", prog, spec.agent), cwd=PROJECT_ROOT,
                                    env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for side, prog in programs(spec).items()}
    failures = []
    for side, proc in procs.items():
        try:
            _, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            for p in procs.values():
                p.kill()
                p.communicate()
            pytest.fail(f"recording {name} ({side}) took more than {timeout_s:.0f} s")
        if proc.returncode != 0:
            failures.append(f"{side} (exit {proc.returncode}):\n{err[-3000:]}")
    if failures:
        pytest.fail(f"recording {name} failed: " + "\n".join(failures))
    pair = _runs(root, name)
    from app.cli import main

    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["diff", str(pair.problem), str(pair.fixed), "--json"])
    if code not in (0, 1, None):  # 1: the verdict gates, none asked for here
        pytest.fail(f"torchscope diff of {name} exited {code}:\n{out.getvalue()[-2000:]}")
    (root / DIFF_FILE).write_text(out.getvalue(), encoding="utf-8")
    return pair


@pytest.fixture(scope="session")
def variant_pair(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], VariantPair]:
    """Factory: ``variant_pair(name) -> VariantPair`` for a name of ``PAIRS``, recorded once per
    session for all workers (``build_once``); fails the test, with the job's stderr, when a side
    does not finish cleanly."""
    seen: dict[str, VariantPair] = {}

    def get(name: str) -> VariantPair:
        if name not in seen:
            spec = PAIRS[name]
            if spec.torchrun_fixed:
                torchrun_path()  # skip before taking the lock

            def build(folder: Path) -> None:
                record_pair(folder, name, spec)

            seen[name] = _runs(build_once(tmp_path_factory, f"variant-{name}", build), name)
        return seen[name]

    return get
