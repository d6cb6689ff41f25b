"""Process and machine figures read straight from Linux's /proc (agent layer, stdlib only).

The system sampler and the job's CPU counter need a few numbers per second: each process's CPU
ticks and resident memory, the job's descendants, the machine's busy share and used memory.
psutil gives them too, but importing it and building its Process objects costs the sampler
thread 16-19 ms of CPU at a job's start, which a short job (or one of an interleaved A/B's runs)
pays in full. Here each figure is one small read of a /proc file. Off Linux ``available()`` is
False and callers use psutil.

How each figure is computed (the same definitions psutil uses on Linux, so runs recorded either
way compare):

- process CPU %: the change of utime + stime (/proc/<pid>/stat, clock ticks) over the wall time
  between two readings, x 100 (above 100 for several busy threads);
- process RSS: the ``rss`` field of /proc/<pid>/stat (pages) x the page size;
- machine CPU %: 100 x (1 - change of idle + iowait / change of all time) from /proc/stat's
  ``cpu`` line, guest time left out (it is counted inside user);
- machine memory used: MemTotal - MemAvailable (/proc/meminfo; MemFree where it is missing).
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import NamedTuple

__all__ = ["available", "ticks", "stat_fields", "main_thread_children", "scan_descendants", "ProcessCpu",
           "MachineCpu", "machine_memory_used"]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def ticks() -> float:
    """Clock ticks per second, the unit of /proc's CPU times."""
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 100.0


_TICK = ticks()


def available() -> bool:
    """Whether this machine has a Linux /proc to read."""
    return os.path.exists("/proc/self/stat")


def stat_fields(pid: int) -> list[bytes] | None:
    """Fields of /proc/<pid>/stat from the 3rd (state) on, or None when the process is gone.

    The command name (2nd field) may hold spaces and parentheses: everything up to the last ``)``
    is skipped. Index ``i`` here is field ``i + 3`` of proc(5): ppid 1, utime 11, stime 12,
    starttime 19, rss 21.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2:].split()


def main_thread_children(pid: int) -> list[int]:
    """Children forked by the process's main thread (needs CONFIG_PROC_CHILDREN; [] otherwise)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", "rb") as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []


def scan_descendants(root: int) -> list[int]:
    """Every live descendant of ``root``, found by reading the parent of each process in /proc."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        fields = stat_fields(int(name))
        if fields is None or len(fields) < 2:
            continue
        with contextlib.suppress(ValueError):
            children.setdefault(int(fields[1]), []).append(int(name))
    found: list[int] = []
    stack = list(children.get(root, ()))
    seen = {root}
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        found.append(pid)
        stack.extend(children.get(pid, ()))
    return found


class _Last(NamedTuple):
    start: bytes  # starttime: a reused pid is a new process
    ticks: int
    at: float


class ProcessCpu:
    """CPU % and RSS of processes between successive ``sample`` calls, like psutil's cpu_percent(None).

    The first reading of a process gives 0.0 (psutil's convention: there is no previous one).
    """

    def __init__(self) -> None:
        self._last: dict[int, _Last] = {}

    def sample(self, pid: int) -> tuple[float, int] | None:
        """(CPU %, RSS bytes) of ``pid`` since the last call for it; None when it is gone."""
        fields = stat_fields(pid)
        if fields is None or len(fields) < 22:
            self._last.pop(pid, None)
            return None
        now = time.monotonic()
        ticks = int(fields[11]) + int(fields[12])
        rss = int(fields[21]) * _PAGE
        last = self._last.get(pid)
        self._last[pid] = _Last(fields[19], ticks, now)
        if last is None or last.start != fields[19] or now <= last.at:
            return 0.0, rss
        return 100.0 * (ticks - last.ticks) / _TICK / (now - last.at), rss

    def forget_except(self, pids: set[int]) -> None:
        """Drop the readings of processes no longer followed."""
        for pid in [p for p in self._last if p not in pids]:
            del self._last[pid]


class MachineCpu:
    """The machine's busy CPU % between successive ``percent`` calls (0.0 the first time)."""

    def __init__(self) -> None:
        self._last: tuple[int, int] | None = None

    def percent(self) -> float | None:
        try:
            with open("/proc/stat", "rb") as f:
                line = f.readline().split()
        except OSError:
            return None
        if len(line) < 5 or line[0] != b"cpu":
            return None
        values = [int(x) for x in line[1:9]]  # user nice system idle iowait irq softirq steal
        total = sum(values)
        idle = values[3] + (values[4] if len(values) > 4 else 0)
        last, self._last = self._last, (total, idle)
        if last is None or total <= last[0]:
            return 0.0
        return round(100.0 * (1.0 - (idle - last[1]) / (total - last[0])), 1)


def machine_memory_used() -> int | None:
    """Used memory in bytes as psutil's ``virtual_memory().used`` computes it on Linux."""
    fields: dict[bytes, int] = {}
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                key, _, rest = line.partition(b":")
                parts = rest.split()
                if parts:
                    fields[key] = int(parts[0]) * 1024
    except (OSError, ValueError):
        return None
    if b"MemTotal" not in fields:
        return None
    total, free = fields[b"MemTotal"], fields.get(b"MemFree", 0)
    available = fields.get(b"MemAvailable")
    if available is None or not 0 <= available <= total:  # old kernels; containers that distort it
        available = free
    return total - available
