"""The launcher's start-up stays light: ``torchscope run`` imports no reader-side module (pandas)."""
from __future__ import annotations

import subprocess
import sys

import pytest

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


def test_the_sign_test_interval_takes_the_order_statistics_of_the_binomial() -> None:
    from benchmarks.fixed_cost import sign_test_interval

    assert sign_test_interval([float(v) for v in range(16, 0, -1)]) == (4.0, 13.0)  # P(Bin(16) <= 3) = 0.011
    assert sign_test_interval([3.0, 1.0, 2.0, 6.0, 5.0, 4.0]) == (1.0, 6.0)  # 6 rounds: the extremes
    assert sign_test_interval([1.0, 2.0, 3.0, 4.0, 5.0]) is None  # 5 rounds cannot reach 95 %


def test_the_goal_is_shown_only_when_the_interval_and_the_minimums_are_below_it() -> None:
    from benchmarks.fixed_cost import paired_summary

    plain = [1.0 + 0.01 * i for i in range(16)]
    below = paired_summary(plain, [p + 0.1 + 0.001 * i for i, p in enumerate(plain)])
    assert str(below["goal"]).startswith("shown") and below["agree"]
    above = paired_summary(plain, [p + 0.5 for p in plain])
    assert str(above["goal"]).startswith("missed")
    # One quiet wrapped round: the minimums say 0.05 s, the rounds say 0.5 s.
    mixed = paired_summary(plain, [0.9 + 0.15, *[p + 0.5 for p in plain[1:]]])
    assert str(mixed["goal"]).startswith("not shown") and not mixed["agree"]


def test_describe_launch_needs_no_uname_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """platform.platform() forks ``uname -p`` on Linux: the launcher's thread builds the same string."""
    import platform

    from profiler_agent import environment

    if not sys.platform.startswith("linux"):
        pytest.skip("the uname process is a Linux matter")
    expected = platform.platform() if platform.processor() in ("", platform.machine()) else None

    def refuse(*args: object, **kwargs: object) -> str:
        raise AssertionError("platform.platform() called")

    monkeypatch.setattr(platform, "platform", refuse)
    info = environment.describe_launch()
    assert info["versions"]["platform"] == environment.platform_name()
    if expected is not None:
        assert environment.platform_name() == expected


def test_the_launcher_needs_no_reader_module_when_the_run_format_loads_lazily() -> None:
    """With runformat/__init__ loading its names on demand, ``torchscope run`` skips the reader:
    the launcher and its heartbeat import the writer's submodules; read_manifest loads for --max-steps."""
    code = ("import importlib.util, sys, types; "
            "spec = importlib.util.find_spec('profiler_agent.runformat'); "
            "pkg = types.ModuleType('profiler_agent.runformat'); "
            "pkg.__path__ = list(spec.submodule_search_locations); "
            "sys.modules['profiler_agent.runformat'] = pkg; "  # the package without its eager __init__
            "from app.cli import build_parser; build_parser('run'); import profiler_agent.launcher; "
            "print('profiler_agent.runformat.reader' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(),
                         cwd=PROJECT_ROOT, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"
