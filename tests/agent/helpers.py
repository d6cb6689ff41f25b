"""Helpers for the agent tests: run wrapped sample jobs in subprocesses and find their run folders."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from profiler_agent.runformat import layout, list_runs, read_jsonl

PROJECT_ROOT = Path(__file__).resolve().parents[2]
BASELINE = PROJECT_ROOT / "sample_models" / "resnet_baseline.py"
OPTIMIZED = PROJECT_ROOT / "sample_models" / "resnet_optimized.py"
API_EXAMPLE = PROJECT_ROOT / "sample_models" / "api_example.py"
# Tiny sizes: a step takes milliseconds, the run a few seconds (mostly importing torch).
TINY = ["--train-size", "64", "--val-size", "16", "--batch-size", "8", "--width", "8", "--image-size", "16",
        "--eval-every", "3"]
SCHEDULE = ["--wait", "1", "--warmup", "1", "--active", "2", "--system-interval", "0.2"]


def env() -> dict[str, str]:
    """The test process's environment with the project importable and no inherited run."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("TORCHSCOPE_")}
    e["PYTHONPATH"] = str(PROJECT_ROOT)
    return e


def torchscope(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``torchscope <args>`` (as ``python -m app``) to completion."""
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, env=env(),
                          cwd=PROJECT_ROOT, timeout=timeout)


def only_run(root: Path) -> Path:
    """The single run folder in ``root`` (fails the test when there is not exactly one)."""
    runs = list_runs(root).runs
    assert len(runs) == 1, f"expected one run in {root}, found {[p.name for p, _ in runs]}"
    return runs[0][0]


def wait_for_steps(root: Path, steps: int, *, timeout: float = 120, proc: subprocess.Popen | None = None) -> Path:
    """Wait until a run in ``root`` has written ``steps`` metrics lines; return its folder."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"job ended early ({proc.returncode}): {proc.stderr.read() if proc.stderr else ''}")
        if root.is_dir():
            for run_dir in root.iterdir():
                lines = read_jsonl(run_dir / layout.METRICS).records
                if sum(1 for r in lines if "step_time_s" in r) >= steps:
                    return run_dir
        time.sleep(0.2)
    raise AssertionError(f"no run in {root} reached {steps} steps within {timeout}s")
