"""The launcher's start-up stays light: ``torchscope run`` imports no reader-side module (pandas)."""
from __future__ import annotations

import subprocess
import sys

from tests.agent.helpers import PROJECT_ROOT, env


def test_the_run_command_imports_no_pandas() -> None:
    code = ("import sys; from app.cli import build_parser; build_parser('run'); "
            "import profiler_agent.launcher; "
            "print(sorted(m for m in ('pandas', 'numpy', 'streamlit', 'torch', 'importlib.metadata') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(),
                         cwd=PROJECT_ROOT, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_the_first_step_path_leaves_psutil_and_importlib_metadata_to_threads() -> None:
    """The first job-CPU reading (training thread) follows /proc links only; versions need no importlib.metadata."""
    code = ("import os, sys; from profiler_agent.contention import JobCpu; "
            "from profiler_agent.environment import _dist_version; "
            "j = JobCpu(os.getpid()); j.sample(rescan=False); assert j.snapshot is not None; "
            "assert _dist_version('torch'); "
            "print(sorted(m for m in ('psutil', 'importlib.metadata') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(),
                         cwd=PROJECT_ROOT, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_the_agents_imports_after_torch_leave_out_statistics_and_psutil() -> None:
    """statistics (fractions, decimal: ~4 ms) and psutil (~10 ms) are not on the job's import path."""
    code = ("import sys, torch; import profiler_agent.activation; "
            "print(sorted(m for m in ('statistics', 'fractions', 'psutil', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(),
                         cwd=PROJECT_ROOT, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
