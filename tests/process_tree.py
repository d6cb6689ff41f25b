"""Processes of the test session, read from /proc: which are still alive when the suite ends.

A process counts as the suite's when it descends from the pytest process, or when it carries the
session's marker variable in its environment (set by tests/conftest.py at session start and
inherited by everything the suite starts, so that a server orphaned to init still counts). Other
users' and other jobs' processes on a shared machine (another Streamlit, another pytest) never
count, however similar their command lines.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SESSION_ENV", "Stray", "descendants", "stray_processes", "wait_for_strays", "kill_strays"]

SESSION_ENV = "TORCHSCOPE_TEST_SESSION"
_PROC = Path("/proc")


@dataclass(frozen=True)
class Stray:
    pid: int
    cmdline: str
    why: str  # "descendant" or "session marker"

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.why}): {self.cmdline[:300]!r}"


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of ``pid``; None when it is gone."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1])


def _pids() -> list[int]:
    return [int(p.name) for p in _PROC.iterdir() if p.name.isdigit()]


def descendants(pid: int) -> list[int]:
    """The live (not zombie) descendants of ``pid``, children first."""
    children: dict[int, list[int]] = {}
    for p in _pids():
        st = _stat(p)
        if st is not None and st[0] != "Z":
            children.setdefault(st[1], []).append(p)
    out: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _cmdline(pid: int) -> str:
    try:
        return (_PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _has_marker(pid: int, marker: str) -> bool:
    try:
        env = (_PROC / str(pid) / "environ").read_bytes().split(b"\0")
    except OSError:  # another user's process, or gone
        return False
    return f"{SESSION_ENV}={marker}".encode() in env


def stray_processes(session_pid: int, marker: str) -> list[Stray]:
    """The suite's processes still alive (other than ``session_pid`` itself and its zombies)."""
    if not _PROC.is_dir():
        return []
    found = dict.fromkeys(descendants(session_pid), "descendant")
    for p in _pids():
        if p != session_pid and p not in found and _has_marker(p, marker):
            st = _stat(p)
            if st is not None and st[0] != "Z":
                found[p] = "session marker"
    return [Stray(p, _cmdline(p), why) for p, why in sorted(found.items())]


def wait_for_strays(session_pid: int, marker: str, grace_s: float = 5.0) -> list[Stray]:
    """stray_processes, after giving processes that are stopping ``grace_s`` to be gone."""
    deadline = time.monotonic() + grace_s
    while True:
        strays = stray_processes(session_pid, marker)
        if not strays or time.monotonic() > deadline:
            return strays
        time.sleep(0.2)


def kill_strays(strays: list[Stray]) -> None:
    """SIGKILL each (the check fails the session anyway; they must not outlive it)."""
    for s in strays:
        try:
            os.kill(s.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
