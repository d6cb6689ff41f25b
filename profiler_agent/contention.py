"""CPU time per step and how much of the machine other processes used meanwhile (agent layer, stdlib only).

Per iteration the session writes (see docs/run-format.md):

- ``cpu_time_s``: CPU seconds (user + system, all threads) this process used, from
  ``time.process_time`` (every platform);
- ``contention``: the share (0-1) of the machine's CPU capacity (step wall time x CPUs in
  ``/proc/stat``) that processes outside the job used: the busy time of ``/proc/stat``
  (user + nice + system + irq + softirq) minus this process's CPU minus the rest of the job's;
- ``steal``: the share of the capacity the hypervisor took (``/proc/stat`` steal).

"The job" is the ``torchscope run`` launcher and everything below it (other ranks, DataLoader
workers, torchrun's agent), or this process and its children without a launcher. Its CPU
besides this process is sampled about once a second by the system sampler thread
(:meth:`JobCpu.sample`, a few ``/proc/<pid>/stat`` reads) and extrapolated at its last rate
between samples, so a step costs one ``pread`` of ``/proc/stat`` (two after a profiler
export) and two ``process_time`` calls (about 10-25 us), never a process scan.

``/proc/stat`` counts in clock ticks (10 ms), so a short step's share is noisy. Clamping it to
0-1 would bias a mean over steps upward on a quiet machine; instead what the clamp cuts off is
carried into the next step (at most one tick per CPU), so sums over steps stay right. Off
Linux only ``cpu_time_s`` is written.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterable
from typing import NamedTuple

from . import procfs

__all__ = ["JobCpu", "StepCpu", "read_proc_stat", "job_root_pid"]

_PROC_STAT = "/proc/stat"
_REUSE_S = 0.002  # a step that starts this soon after the last one ended reuses its reading
_RESCAN_S = 10.0  # full descendant scan (all of /proc) at most this often; main-thread children each sample


class CpuTimes(NamedTuple):  # tuples, not frozen dataclasses: built twice per step (~0.3 vs ~2 us)
    """Machine-wide CPU seconds since boot, summed over CPUs."""

    busy_s: float  # user + nice + system + irq + softirq (guest time is inside user)
    steal_s: float | None  # None where the kernel does not report it


_ticks = procfs.ticks


def read_proc_stat(fd: int, tick: float) -> CpuTimes | None:
    """Parse the ``cpu`` line of /proc/stat read through ``fd``; None when unreadable."""
    try:
        head = os.pread(fd, 256, 0)
    except OSError:
        return None
    line = head[:head.find(b"\n")].split()
    if len(line) < 5 or line[0] != b"cpu":
        return None
    # user nice system idle iowait irq softirq steal guest guest_nice
    busy = int(line[1]) + int(line[2]) + int(line[3])
    if len(line) > 7:
        busy += int(line[6]) + int(line[7])
    steal = int(line[8]) / tick if len(line) > 8 else None
    return CpuTimes(busy / tick, steal)


def _count_cpus(fd: int) -> int:
    text = b""
    with contextlib.suppress(OSError):
        text = os.pread(fd, 1 << 20, 0)
    n = sum(1 for line in text.split(b"\n") if line.startswith(b"cpu") and line[3:4].isdigit())
    return n or (os.cpu_count() or 1)


def job_root_pid(owner_pid: int | None) -> int:
    """The process whose tree is "the job": the launcher when it is an ancestor of this process."""
    me = os.getpid()
    if not owner_pid or owner_pid == me:
        return me
    pid = me
    for _ in range(64):  # walk up the parents
        ppid = _parent_of(pid)
        if ppid is None or ppid <= 1:
            return me
        if ppid == owner_pid:
            return owner_pid
        pid = ppid
    return me


_stat_fields = procfs.stat_fields


def _parent_of(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields and len(fields) > 1 else None  # ppid


class JobCpu:
    """Cumulative CPU seconds of the job's processes other than this one's own threads.

    ``sample()`` (the system sampler's thread, about once a second) sums utime + stime +
    cutime + cstime of every process of the job's tree except this one, plus this process's
    cutime + cstime (its reaped children). ``estimate()`` extrapolates at the last rate.
    """

    def __init__(self, root_pid: int) -> None:
        self._root = root_pid
        self._me = os.getpid()
        self._tick = _ticks()
        self._scanned: set[int] = set()
        self._last_scan = float("-inf")
        self._lock = threading.Lock()
        # (perf_counter, cumulative seconds, rate in CPU seconds per second), swapped atomically
        self.snapshot: tuple[float, float, float] | None = None

    def sample(self, *, rescan: bool = True) -> None:
        """Read the job tree's CPU now; never raises. ``rescan=False``: follow /proc's children
        links only, never the full scan of /proc (milliseconds on a busy host: not on the job's thread)."""
        with self._lock, contextlib.suppress(Exception):
            now = time.perf_counter()
            total = 0.0
            for pid in self._tree(now, rescan):
                fields = _stat_fields(pid)
                if fields is None or len(fields) < 15:
                    continue
                utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
                total += (cutime + cstime) if pid == self._me else (utime + stime + cutime + cstime)
            total /= self._tick
            previous = self.snapshot
            rate = 0.0
            if previous is not None and now > previous[0]:
                rate = max(0.0, (total - previous[1]) / (now - previous[0]))
            self.snapshot = (now, total, rate)

    def estimate(self, now: float) -> float | None:
        """The job's other CPU seconds at ``now`` (perf_counter), or None before the first sample."""
        snap = self.snapshot
        if snap is None:
            return None
        at, total, rate = snap
        return total + rate * max(0.0, now - at)

    def _tree(self, now: float, rescan: bool = True) -> Iterable[int]:
        if rescan and now - self._last_scan >= _RESCAN_S:
            self._last_scan = now
            self._scanned = set(_scan_descendants(self._root))
        seen: set[int] = set()
        stack = [self._root, self._me, *self._scanned]
        while stack:
            pid = stack.pop()
            if pid in seen:
                continue
            seen.add(pid)
            stack.extend(procfs.main_thread_children(pid))
        return seen


def _scan_descendants(root: int) -> list[int]:
    if procfs.available():
        return procfs.scan_descendants(root)
    try:  # pragma: no cover - off Linux there is no /proc stat to read either
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency of torchscope
        return []
    with contextlib.suppress(Exception):  # pragma: no cover
        return [p.pid for p in psutil.Process(root).children(recursive=True)]
    return []  # pragma: no cover


class _Reading(NamedTuple):
    wall: float  # perf_counter
    cpu: float  # process_time
    stat: CpuTimes | None
    job: float | None  # JobCpu.estimate


def _share(value_s: float, capacity_s: float, carry: float, limit: float) -> tuple[float, float]:
    """``value_s / capacity_s`` clamped to 0-1, and what the clamp cut off (bounded by ``limit``)."""
    total = value_s + carry
    share = min(1.0, max(0.0, total / capacity_s))
    rest = total - share * capacity_s
    return share, min(limit, max(-limit, rest))


class StepCpu:
    """Measures one iteration at a time: ``start()`` when it begins, ``finish()`` when it ends."""

    def __init__(self, job: JobCpu | None = None) -> None:
        self.job = job
        self._tick = _ticks()
        self._fd: int | None = None
        if sys.platform.startswith("linux"):
            with contextlib.suppress(OSError):
                self._fd = os.open(_PROC_STAT, os.O_RDONLY)
        self.cpus = _count_cpus(self._fd) if self._fd is not None else (os.cpu_count() or 1)
        self._carry_limit = self.cpus / self._tick  # one tick per CPU
        self._carry_contention = 0.0
        self._carry_steal = 0.0
        self._start: tuple[float, float] | None = None  # wall, CPU at the iteration's start
        self._base: _Reading | None = None  # the contention window's start
        self._last: _Reading | None = None  # the previous finish

    def start(self) -> None:
        now, cpu = time.perf_counter(), time.process_time()
        self._start = (now, cpu)
        last = self._last
        if last is not None and now - last.wall <= _REUSE_S:
            # Only the agent's own bookkeeping since the last step ended: its reading stands for
            # this start, saving a /proc/stat read (the window is a few microseconds longer).
            self._base = last
        else:  # a profiler export or a pause in between: read afresh
            self._base = _Reading(now, cpu, self._stat(), self._job(now))

    def finish(self) -> dict[str, float]:
        """The ended iteration's ``cpu_time_s`` and, on Linux, ``contention`` and ``steal``."""
        start, base, self._start, self._base = self._start, self._base, None, None
        if start is None or base is None:
            return {}
        now, cpu = time.perf_counter(), time.process_time()
        end = self._last = _Reading(now, cpu, self._stat(), self._job(now))
        out = {"cpu_time_s": round(max(0.0, cpu - start[1]), 6)}
        capacity = (now - base.wall) * self.cpus
        if end.stat is None or base.stat is None or end.job is None or base.job is None or capacity <= 0:
            return out
        mine = max(0.0, cpu - base.cpu)
        others = (end.stat.busy_s - base.stat.busy_s) - mine - (end.job - base.job)
        share, self._carry_contention = _share(others, capacity, self._carry_contention, self._carry_limit)
        out["contention"] = round(share, 4)
        if end.stat.steal_s is not None and base.stat.steal_s is not None:
            stolen = end.stat.steal_s - base.stat.steal_s
            share, self._carry_steal = _share(stolen, capacity, self._carry_steal, self._carry_limit)
            out["steal"] = round(share, 4)
        return out

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _stat(self) -> CpuTimes | None:
        return read_proc_stat(self._fd, self._tick) if self._fd is not None else None

    def _job(self, now: float) -> float | None:
        return self.job.estimate(now) if self.job is not None else None
