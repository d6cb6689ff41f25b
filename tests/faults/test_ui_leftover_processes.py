"""The session-finish check of tests/conftest.py: processes the suite started and left running are
found (descendants, and orphans through the session's marker variable), reported, killed, and the
session fails."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import conftest, process_tree

pytestmark = [pytest.mark.fault("orphan server"),
              pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process tree from /proc")]


def _orphan(env: dict[str, str]) -> int:
    """Start a sleeper whose parent exits at once (so init adopts it); return the sleeper's pid."""
    out = subprocess.run(
        [sys.executable, "-c", "import os, subprocess, sys\n"
         "p = subprocess.Popen(['sleep', '60'], start_new_session=True, stdin=subprocess.DEVNULL,\n"
         "                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\nprint(p.pid)"],
        env=env, capture_output=True, text=True, check=True)
    return int(out.stdout)


def _wait_gone(pid: int) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if not any(s.pid == pid for s in process_tree.stray_processes(os.getpid(), "x")) and \
                not Path(f"/proc/{pid}").exists():
            return True
        time.sleep(0.1)
    return not Path(f"/proc/{pid}").exists()


def test_orphan_with_the_marker_is_found_and_others_are_not():
    marker = f"test-{time.time_ns()}"
    mine = _orphan({**os.environ, process_tree.SESSION_ENV: marker})
    other = _orphan({k: v for k, v in os.environ.items() if k != process_tree.SESSION_ENV})
    try:
        found = {s.pid: s for s in process_tree.stray_processes(os.getpid(), marker)}
        assert mine in found and found[mine].why == "session marker" and "sleep 60" in found[mine].cmdline
        assert other not in found  # not the suite's (another job on a shared machine)
    finally:
        process_tree.kill_strays([process_tree.Stray(p, "", "") for p in (mine, other)])


def test_live_child_is_a_descendant():
    child = subprocess.Popen(["sleep", "60"])
    try:
        assert child.pid in process_tree.descendants(os.getpid())
    finally:
        child.kill()
        child.wait()
    assert child.pid not in process_tree.descendants(os.getpid())


def test_session_finish_fails_the_session_and_kills(monkeypatch, capsys):
    marker = f"test-{time.time_ns()}"
    monkeypatch.setenv(process_tree.SESSION_ENV, marker)
    pid = _orphan(dict(os.environ))
    session = SimpleNamespace(
        exitstatus=pytest.ExitCode.OK,
        config=SimpleNamespace(pluginmanager=SimpleNamespace(get_plugin=lambda name: None)),
    )
    conftest.pytest_sessionfinish(session, 0)  # type: ignore[arg-type]
    assert session.exitstatus == pytest.ExitCode.TESTS_FAILED
    assert f"pid {pid}" in capsys.readouterr().err
    assert _wait_gone(pid)
