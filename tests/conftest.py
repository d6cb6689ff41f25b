"""Shared test fixtures: hand-made run stores, runs imported from ../shared/data, real agent runs.

Session-scoped stores are read-only for tests: a test that changes runs copies the store first
(``copy_store``) or builds its own with ``make_run``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from profiler_agent import runformat as rf
from profiler_agent.runformat import layout
from tests import process_tree
from tests.faults import summary as fault_summary
from tests.once import build_once

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"
DEAD_PID = 2**22 + 12345  # above the default pid_max: never a live process


def write_run(
    root: Path,
    name: str,
    *,
    steps: int = 20,
    ranks: int = 1,
    status: rf.RunStatus = rf.RunStatus.FINISHED,
    step_time_s: float = 0.05,
    config: dict[str, Any] | None = None,
    tags: tuple[str, ...] = (),
    system: bool = True,
    logs: bool = True,
    **fields: Any,
) -> Path:
    """Write a complete, realistic run the way the agent lays it out; return its folder."""
    run_dir, manifest = rf.create_run(
        root,
        name,
        command=["python", "train.py", "--lr", "0.01"],
        config=config or {"lr": 0.01, "batch_size": 32, "optimizer": "sgd"},
        tags=tags,
        world_size=ranks,
        versions={"python": sys.version.split()[0], "torch": "2.13.0"},
        git={"commit": "0123456789abcdef", "dirty": False},
    )
    t0 = manifest.started_at or time.time()
    with rf.JsonlWriter(run_dir / layout.METRICS) as w:
        for rank in range(ranks):
            for step in range(steps):
                jitter = 1.0 + 0.1 * ((step * 7 + rank) % 5) / 5
                w.write(
                    {
                        "step": step,
                        "time": t0 + step * step_time_s,
                        "rank": rank,
                        "loss": 2.0 / (1 + step),
                        "lr": 0.01,
                        "samples": 32,
                        "step_time_s": step_time_s * (3.0 if step == 0 else jitter),
                    }
                )
    if system:
        with rf.JsonlWriter(run_dir / layout.SYSTEM) as w:
            for rank in range(ranks):
                for i in range(10):
                    w.write(
                        {
                            "time": i * 0.5,
                            "rank": rank,
                            "pid": 1000 + rank,
                            "cpu_percent": 90.0 + i,
                            "rss_bytes": (200 + 10 * i) * 2**20,
                            "children_rss_bytes": 0,
                            "system_cpu_percent": 50.0,
                            "system_memory_used_bytes": 4 * 2**30,
                        }
                    )
    if logs:
        (run_dir / layout.LOGS_DIR).mkdir(exist_ok=True)
        (run_dir / layout.STDOUT_LOG).write_text(
            "".join(f"epoch 0 step {i} loss {2.0 / (1 + i):.3f}\n" for i in range(steps))
        )
        (run_dir / layout.STDERR_LOG).write_text("warning: <b>not html</b>\n")
    end = t0 + steps * step_time_s
    changes: dict[str, Any] = {"status": status, "heartbeat": end}
    if status is not rf.RunStatus.RUNNING:
        changes.update(ended_at=end, exit_code=0 if status is rf.RunStatus.FINISHED else 1)
    changes.update(fields)
    rf.update_manifest(run_dir, **changes)
    return run_dir


def build_fixture_store(root: Path) -> dict[str, Path]:
    """A store with one run of each kind a user meets; returns name → run folder."""
    runs = {
        "baseline": write_run(root, "baseline", tags=("base",)),
        "optimized": write_run(
            root,
            "optimized",
            step_time_s=0.03,
            tags=("amp",),
            config={"lr": 0.02, "batch_size": 64, "optimizer": "adam"},
        ),
        "ddp": write_run(root, "ddp", ranks=2),
        "failed": write_run(root, "failed", status=rf.RunStatus.FAILED, steps=3),
        "crashed": write_run(
            root,
            "crashed",
            status=rf.RunStatus.RUNNING,
            steps=4,
            heartbeat=time.time() - 3600,
            started_at=time.time() - 3700,
            pid=DEAD_PID,
        ),
        "live": write_run(root, "live", status=rf.RunStatus.RUNNING, steps=5, heartbeat=time.time() + 3600),
    }
    failed = runs["failed"]
    (failed / layout.TRACEBACK_LOG).write_text(
        'Traceback (most recent call last):\n  File "train.py", line 3\nRuntimeError: CUDA out of memory\n'
    )
    with rf.JsonlWriter(failed / layout.AGENT_ERRORS) as w:
        w.write({"time": 1.0, "where": "system sampler", "error": "RuntimeError: boom"})
    return runs


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data (real GPU and multi-rank traces); tests needing it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} not present")
    return SHARED_DATA


@pytest.fixture(scope="session")
def fixture_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    """(store root, name → run folder) of hand-made runs: finished, two ranks, failed, crashed, live."""
    root = tmp_path_factory.mktemp("fixture_store")
    return root, build_fixture_store(root)


def import_shared_traces(root: Path, traces: Path) -> None:
    """Import ``imported_store``'s real traces into ``root``: a GPU trace and two ranks."""
    from app.data.tbprofiler import import_traces

    import_traces(traces / "gpu_before_after" / "control.json.gz", root, name="gpu-control")
    import_traces(traces / "two_ranks", root, name="two-ranks")


@pytest.fixture(scope="session")
def imported_store(
    tmp_path_factory: pytest.TempPathFactory, shared_data: Path
) -> tuple[Path, dict[str, Path]]:
    """(store root, name → run) of real traces imported from ../shared/data: a GPU trace and two ranks,
    imported once per session for all xdist workers (tests/once.py), with the traces' cache."""
    root = build_once(tmp_path_factory, "imported_store", lambda folder: import_shared_traces(folder, shared_data / "traces"))
    runs = {m.name: path for path, m in rf.list_runs(root).runs}
    return root, {name: runs[name] for name in ("gpu-control", "two-ranks")}


def record_sample_store(root: Path) -> None:
    """Record the sample runs (baseline and optimized) into ``root`` with ``sample_models.record``."""
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    args = [sys.executable, "-m", "sample_models.record", "--root", str(root)]
    if "--steps" in subprocess.run([*args, "--help"], capture_output=True, text=True, env=env).stdout:
        # one profiler window and, after warm-up, profiled and evaluation steps, at least
        # stats.MIN_STEPS steady-state steps per run, so the comparison can judge
        args += ["--steps", "20"]
    proc = subprocess.run(args, capture_output=True, text=True, env=env, cwd=PROJECT_ROOT, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"sample_models.record failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


@pytest.fixture(scope="session")
def sample_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of real runs recorded by the agent from sample_models (baseline and optimized),
    recorded once per session for all xdist workers (tests/once.py): read-only, copy it to change it.

    Skips when sample_models.record is not available.
    """
    if importlib.util.find_spec("sample_models.record") is None:
        pytest.skip("sample_models.record is not available")
    return build_once(tmp_path_factory, "sample_store", record_sample_store)


# The 4-rank DDP job of the torchrun tests: rank SLOW_DDP_RANK computes this much longer each step.
SLOW_DDP_RANK = 2
SLOW_DDP_MS = 150
DDP_STEPS = 8  # of which 5 are profiled: the straggler's consistency test has steps to go by


def torchrun_path() -> str:
    """The torchrun next to this python; skips the test when there is none."""
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if torchrun is None:
        pytest.skip("torchrun not installed next to this python")
    return torchrun


def record_torchrun(root: Path, name: str, job: str, *job_args: str, torchrun: str | None = None) -> None:
    """``torchscope run --wait 1 --warmup 1 --active 5 -- torchrun --standalone --nproc_per_node 4
    tests/agent/<job> <job_args>`` into the store ``root`` (the user's TORCHSCOPE_* settings left out)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHSCOPE_")} | {"PYTHONPATH": str(PROJECT_ROOT)}
    args = [sys.executable, "-m", "app", "run", "--root", str(root), "--name", name, "--wait", "1", "--warmup", "1",
            "--active", "5", "--", torchrun or torchrun_path(), "--standalone", "--nproc_per_node", "4",
            str(PROJECT_ROOT / "tests" / "agent" / job), *job_args]
    proc = subprocess.run(args, capture_output=True, text=True, env=env, cwd=PROJECT_ROOT, timeout=300)
    if proc.returncode != 0:
        pytest.fail(f"torchscope run -- torchrun failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


def record_ddp_store(root: Path, torchrun: str) -> None:
    """Record the 4-rank DDP job of ``ddp_store`` into ``root``."""
    record_torchrun(root, "ddp", "ddp_job.py", "--steps", str(DDP_STEPS), "--lr", "0.2",
                    "--slow-rank", str(SLOW_DDP_RANK), "--slow-ms", str(SLOW_DDP_MS), torchrun=torchrun)


@pytest.fixture(scope="session")
def ddp_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(store root, run folder) of a real 4-rank job: ``torchscope run -- torchrun --nproc_per_node 4
    tests/agent/ddp_job.py`` (gloo on CPU, 8 steps, 5 profiled) with rank SLOW_DDP_RANK slowed,
    recorded once per session for all xdist workers (tests/once.py): read-only, copy it to change it.

    Skips when torchrun is not installed next to this python.
    """
    torchrun = torchrun_path()
    root = build_once(tmp_path_factory, "ddp_store", lambda folder: record_ddp_store(folder, torchrun))
    runs = rf.list_runs(root).runs
    assert len(runs) == 1, f"expected one run in {root}, found {[p.name for p, _ in runs]}"
    return root, runs[0][0]


@pytest.fixture
def make_run(tmp_path: Path) -> Callable[..., Path]:
    """Factory: ``make_run(name, **kwargs)`` writes a run into a fresh store at ``tmp_path / "runs"``."""
    root = tmp_path / "runs"
    root.mkdir(exist_ok=True)

    def make(name: str = "run", **kwargs: Any) -> Path:
        return write_run(root, name, **kwargs)

    return make


@pytest.fixture
def copy_store(tmp_path: Path) -> Callable[[Path], Path]:
    """Copy a (session) store into this test's tmp folder, keeping symlinks, and return the copy."""

    def copy(src: Path) -> Path:
        dst = tmp_path / f"copy-{src.name}"
        shutil.copytree(src, dst, symlinks=True)
        return dst

    return copy


@pytest.fixture(autouse=True)
def _no_tab_prefetch(monkeypatch: pytest.MonkeyPatch) -> None:
    """AppTest runs build their tabs in one thread: the Run page's background prefetch of the
    other tabs (``app.ui.prefetch``) is off unless a test turns it on. Servers the browser tests
    start run with it, as users do."""
    monkeypatch.setenv("TORCHSCOPE_PREFETCH", "0")


@pytest.fixture
def no_store_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Remove $TORCHSCOPE_RUNS so a test decides the store itself."""
    monkeypatch.delenv(layout.ROOT_ENV, raising=False)
    yield


@pytest.fixture(scope="module")
def module_trace_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One trace cache per test module (``pytestmark = pytest.mark.usefixtures("module_trace_cache")``):
    a trace read by several tests of the module is parsed once, and no test reads another
    module's (or the user's) cache."""
    from app.data import trace_cache

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(trace_cache.CACHE_ENV, str(tmp_path_factory.mktemp("cache")))
        yield


# --- No process left behind: the suite fails when something it started outlives it ---------------


# Modules whose code forks (app.data.trace_split forks only in a one-thread process) and that check
# no child is left: run first in each xdist worker, before session fixtures start Streamlit servers,
# browsers and S3 servers, whose threads and processes live until the session ends. (xdist hands each
# worker its first tests in collection order.)
FORK_FIRST = ("tests/data/test_trace_split.py",)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not item.nodeid.startswith(FORK_FIRST))  # stable: the rest keep their order


def pytest_sessionstart(session: pytest.Session) -> None:
    """Mark everything this session starts (the variable is inherited), so a server orphaned to
    init is still known as the suite's at the end."""
    os.environ[process_tree.SESSION_ENV] = f"{os.getpid()}-{time.time_ns()}"


@pytest.hookimpl(trylast=True)  # after session fixtures and xdist have stopped their processes
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the session (exit status 1) when processes it started are still running, naming them;
    then kill them, so that they do not outlive it either way."""
    if hasattr(session.config, "workerinput"):  # an xdist worker: its controller checks
        return
    marker = os.environ.get(process_tree.SESSION_ENV, "")
    strays = process_tree.wait_for_strays(os.getpid(), marker)
    if not strays:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{len(strays)} process(es) started by the test suite were still running at its end "
             "(killed now; the fixture or test that started them must stop them):",
             *(f"  {s}" for s in strays)]
    if reporter is not None:
        reporter.write("\n")  # after the progress line's "[100%]"
    for line in lines:
        if reporter is not None:
            reporter.write_line(line, red=True, bold=True)
        else:
            print(line, file=sys.stderr)
    process_tree.kill_strays(strays)
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# --- The fault suite's tally, for every test marked fault("class") (tests/faults/summary.py) -----

pytest_runtest_makereport = fault_summary.pytest_runtest_makereport
pytest_runtest_logreport = fault_summary.pytest_runtest_logreport
pytest_terminal_summary = fault_summary.pytest_terminal_summary
