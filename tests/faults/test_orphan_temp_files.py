"""Temporary files a SIGKILLed launcher left in a run are removed when the catalog lists the run,
once nothing can still write them (issue 15: "nothing ever cleans them up")."""
from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import pytest

from app.workspace.catalog import load_catalog
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout
from tests.conftest import DEAD_PID, write_run


def _dead_running_run(root: Path, name: str, *, pid: int = DEAD_PID, job_pid: int | None = None) -> Path:
    run_dir = write_run(root, name, status=rf.RunStatus.RUNNING)
    extra = {"job_pid": job_pid} if job_pid is not None else {}
    rf.update_manifest(run_dir, lambda m: m.replace(pid=pid, host=platform.node(), extra={**m.extra, **extra}))
    return run_dir


def _temp(run_dir: Path, age_s: float) -> Path:
    tmp = run_dir / layout.TRACES_DIR / ".rank0.pt.trace.json.1234.abcd.tmp"
    tmp.parent.mkdir(exist_ok=True)
    tmp.write_bytes(b"{partial")
    then = time.time() - age_s
    os.utime(tmp, (then, then))
    return tmp


@pytest.mark.fault("SIGKILL mid-run")
def test_a_dead_launchers_old_temp_files_are_removed_when_the_run_is_listed(tmp_path: Path) -> None:
    run_dir = _dead_running_run(tmp_path, "killed-launcher")
    old, fresh = _temp(run_dir, 3600), _temp(run_dir, 0)
    fresh = fresh.rename(fresh.with_name(".second.json.99.ef01.tmp"))
    table = load_catalog(tmp_path)
    assert len(table.table) == 1 and table.table.iloc[0]["status"] == "crashed"
    assert not old.exists()  # nothing can write it any more
    assert fresh.exists()  # younger than ORPHAN_TEMP_AGE_S: a job told to stop may still be flushing


@pytest.mark.fault("SIGKILL mid-run")
@pytest.mark.parametrize("case", ["launcher alive", "job alive", "finished run"])
def test_temp_files_of_a_run_that_may_still_write_are_kept(tmp_path: Path, case: str) -> None:
    if case == "launcher alive":
        run_dir = _dead_running_run(tmp_path, "live", pid=os.getpid())
    elif case == "job alive":
        run_dir = _dead_running_run(tmp_path, "orphaned-job", job_pid=os.getpid())
    else:
        run_dir = write_run(tmp_path, "done")
    tmp = _temp(run_dir, 3600)
    load_catalog(tmp_path)
    assert tmp.exists(), case
