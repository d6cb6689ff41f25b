"""System sampler: CPU, memory and GPU figures written to system.jsonl from a daemon thread (agent layer).

One sampler runs in each training process (each rank). CPU % and RSS cover the process and,
separately, its children (DataLoader workers). GPU figures come from torch.cuda for this
process's device when CUDA is initialised; utilisation only when NVML is available.
The same thread refreshes the job's CPU counter (``contention.JobCpu``) that per-step
contention is computed from.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import Any

import torch

from . import procfs
from .contention import JobCpu
from .failures import FailureLog
from .runformat import JsonlWriter, layout

# Off Linux the figures come from psutil (~9 ms to import), loaded by the sampler thread
# (_load_psutil), off the job's start-up path. On Linux they come from /proc (procfs).
psutil: Any = None

__all__ = ["SystemSampler", "read_system_sample"]


def _load_psutil() -> bool:
    """Import psutil into this module; False when the job's interpreter lacks it (GPU figures only)."""
    global psutil
    if psutil is None:
        try:
            import psutil as module
        except ImportError:  # pragma: no cover - psutil is a dependency of torchscope
            return False
        psutil = module
    return True


class _ProcessTree:
    """This process and its descendants (DataLoader workers), read from /proc between samples.

    CPU % needs the previous reading of each process, so the readings are kept. Finding
    descendants scans all of /proc (milliseconds of CPU on a busy host), so the list is refreshed
    only every ``rescan_s`` seconds; known children are sampled each time.
    """

    def __init__(self, rescan_s: float = 10.0) -> None:
        self.rescan_s = rescan_s
        self.last_scan = float("-inf")
        self.me = os.getpid()
        self.cpu = procfs.ProcessCpu()
        self.machine = procfs.MachineCpu()
        self.cpu.sample(self.me)  # the first reading of each counter is meaningless (0.0)
        self.machine.percent()
        self.children: list[int] = []

    def sample(self) -> dict[str, Any]:
        cpu, rss = self.cpu.sample(self.me) or (0.0, 0)
        if time.monotonic() - self.last_scan >= self.rescan_s:
            self.last_scan = time.monotonic()
            self.children = procfs.scan_descendants(self.me)
        child_cpu = 0.0
        child_rss = 0
        alive: list[int] = []
        for pid in self.children:
            reading = self.cpu.sample(pid)
            if reading is None:
                continue
            child_cpu += reading[0]
            child_rss += reading[1]
            alive.append(pid)
        self.children = alive
        self.cpu.forget_except({self.me, *alive})
        out: dict[str, Any] = {
            "cpu_percent": round(cpu, 1),
            "rss_bytes": rss,
            "children": len(alive),
            "children_cpu_percent": round(child_cpu, 1),
            "children_rss_bytes": child_rss,
        }
        machine_cpu = self.machine.percent()
        if machine_cpu is not None:
            out["system_cpu_percent"] = machine_cpu
        used = procfs.machine_memory_used()
        if used is not None:
            out["system_memory_used_bytes"] = used
        return out


class _PsutilTree:  # pragma: no cover - off Linux
    """The same figures through psutil where there is no /proc."""

    def __init__(self, rescan_s: float = 10.0) -> None:
        self.rescan_s = rescan_s
        self.last_scan = float("-inf")
        self.me = psutil.Process(os.getpid())
        self.me.cpu_percent(None)
        psutil.cpu_percent(None)  # the first reading of each counter is meaningless (0.0)
        self.children: dict[int, Any] = {}

    def sample(self) -> dict[str, Any]:
        with self.me.oneshot():
            cpu = self.me.cpu_percent(None)
            rss = self.me.memory_info().rss
        child_cpu = 0.0
        child_rss = 0
        alive: dict[int, Any] = {}
        candidates = list(self.children.values())
        if time.monotonic() - self.last_scan >= self.rescan_s:
            self.last_scan = time.monotonic()
            with contextlib.suppress(psutil.Error):
                candidates = [self.children.get(c.pid, c) for c in self.me.children(recursive=True)]
        for proc in candidates:
            try:
                child_cpu += proc.cpu_percent(None)
                child_rss += proc.memory_info().rss
                alive[proc.pid] = proc
            except psutil.Error:
                continue
        self.children = alive
        return {
            "cpu_percent": cpu,
            "rss_bytes": rss,
            "children": len(alive),
            "children_cpu_percent": child_cpu,
            "children_rss_bytes": child_rss,
            "system_cpu_percent": psutil.cpu_percent(None),
            "system_memory_used_bytes": psutil.virtual_memory().used,
        }


def _new_tree() -> _ProcessTree | _PsutilTree | None:
    if procfs.available():
        return _ProcessTree()
    return _PsutilTree() if _load_psutil() else None  # pragma: no cover - off Linux


def read_system_sample(tree: _ProcessTree | _PsutilTree | None = None) -> dict[str, Any]:
    """Return one sample (CPU, RSS, GPU) of this process; a helper for tests and the API."""
    sample: dict[str, Any] = {}
    tree = tree or _new_tree()
    if tree is not None:
        sample.update(tree.sample())
    sample.update(_cuda_sample())
    return sample


def _cuda_sample() -> dict[str, Any]:
    # Only when the job already initialised CUDA: the sampler must not create a context itself.
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return {}
    device = torch.cuda.current_device()
    out: dict[str, Any] = {
        "gpu_index": device,
        "gpu_allocated_bytes": torch.cuda.memory_allocated(device),
        "gpu_reserved_bytes": torch.cuda.memory_reserved(device),
        "gpu_max_allocated_bytes": torch.cuda.max_memory_allocated(device),
    }
    with contextlib.suppress(Exception):  # needs pynvml / amdsmi
        out["gpu_util_percent"] = float(torch.cuda.utilization(device))
    with contextlib.suppress(Exception):
        free, total = torch.cuda.mem_get_info(device)
        out["gpu_used_bytes"] = int(total - free)
        out["gpu_total_bytes"] = int(total)
    return out


class SystemSampler:
    """Daemon thread appending a sample to system.jsonl every ``interval_s`` seconds."""

    def __init__(self, run_dir: Path, failures: FailureLog, *, rank: int, interval_s: float,
                 t0: float, job_cpu: JobCpu | None = None) -> None:
        self._path = run_dir / layout.SYSTEM
        self._job_cpu = job_cpu
        self._failures = failures
        self._rank = rank
        self._interval = interval_s
        self._t0 = t0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._job_cpu is not None:  # a first reading now: steps can be measured before the thread's first
            self._job_cpu.sample(rescan=False)  # the thread's first sample does the full scan
        self._thread = threading.Thread(target=self._loop, name="torchscope-system", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2 * self._interval + 1)

    def _loop(self) -> None:
        writer: JsonlWriter | None = None
        try:
            tree = _new_tree()
            writer = JsonlWriter(self._path)
            while not self._stop.wait(self._interval):
                if self._job_cpu is not None:
                    self._job_cpu.sample()
                now = time.time()
                record: dict[str, Any] = {"time": round(now - self._t0, 4), "rank": self._rank,
                                          "pid": os.getpid()}
                record.update(read_system_sample(tree))
                writer.write(record)
        except Exception as e:  # noqa: BLE001 - a failed sampler must not disturb training
            self._failures.record("system sampler", e)
        finally:
            if writer is not None:
                with contextlib.suppress(Exception):
                    writer.close()
