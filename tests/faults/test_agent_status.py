"""Stale status: a run whose process is gone is `crashed` at once; a heartbeat in the future is not trusted."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from profiler_agent.runformat import RunStatus, create_run, effective_status, read_manifest, update_manifest
from profiler_agent.runformat.liveness import PID_START_FIELD, process_start_ticks, recorded_process_gone

YEAR_S = 365 * 24 * 3600.0


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.fault("stale status")
def test_a_dead_process_is_crashed_at_once_even_with_a_fresh_heartbeat(tmp_path: Path) -> None:
    _run_dir, m = create_run(tmp_path, "dead")
    dead = m.replace(pid=_dead_pid(), heartbeat=time.time())
    assert effective_status(dead) is RunStatus.CRASHED
    assert effective_status(m) is RunStatus.RUNNING  # this very process: alive


@pytest.mark.fault("stale status")
def test_a_heartbeat_a_year_ahead_does_not_keep_a_dead_run_running(tmp_path: Path) -> None:
    _run_dir, m = create_run(tmp_path, "future")
    future = m.replace(heartbeat=time.time() + YEAR_S)
    assert effective_status(future.replace(pid=_dead_pid())) is RunStatus.CRASHED
    # On another host the pid cannot be checked: the untrusted heartbeat counts as stale.
    assert effective_status(future.replace(host="another-host")) is RunStatus.CRASHED
    assert effective_status(m.replace(host="another-host")) is RunStatus.RUNNING  # fresh, elsewhere
    assert effective_status(future) is RunStatus.RUNNING  # our own live process still wins


@pytest.mark.fault("stale status")
def test_a_reused_pid_is_told_apart_by_its_start_time(tmp_path: Path) -> None:
    run_dir, m = create_run(tmp_path, "reused")
    assert read_manifest(run_dir).extra[PID_START_FIELD] == process_start_ticks(m.pid or 0)
    # Another process now holds the recorded pid: its start time differs from the recorded one.
    reused = update_manifest(run_dir, extra={**m.extra, PID_START_FIELD: m.extra[PID_START_FIELD] - 1})
    assert recorded_process_gone(reused) is True
    assert effective_status(reused) is RunStatus.CRASHED
    # Without a recorded start time (older runs) a live pid still counts as alive.
    old = reused.replace(extra={})
    assert recorded_process_gone(old) is False and effective_status(old) is RunStatus.RUNNING


@pytest.mark.fault("stale status")
@pytest.mark.parametrize("pid", [None, 0, -5, True, 2**70])
def test_odd_recorded_pids_do_not_raise(tmp_path: Path, pid: object) -> None:
    _run_dir, m = create_run(tmp_path, "odd")
    odd = m.replace(pid=pid, heartbeat=time.time() - YEAR_S)
    assert effective_status(odd) is RunStatus.CRASHED
