"""Per-step CPU time, contention and steal: arithmetic on fake counters, the job's CPU on real processes."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profiler_agent import contention
from profiler_agent.contention import CpuTimes, JobCpu, StepCpu, job_root_pid

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux-only")


class _Clock:
    def __init__(self) -> None:
        self.wall = 100.0
        self.cpu = 10.0

    def perf_counter(self) -> float:
        return self.wall

    def process_time(self) -> float:
        return self.cpu


class _Job:
    def __init__(self) -> None:
        self.value = 5.0

    def estimate(self, now: float) -> float:
        return self.value


def _meter(monkeypatch: pytest.MonkeyPatch, cpus: int = 2) -> tuple[StepCpu, _Clock, _Job, list[CpuTimes]]:
    clock, job = _Clock(), _Job()
    monkeypatch.setattr(contention, "time", clock)
    meter = StepCpu(job)  # type: ignore[arg-type]
    meter.cpus = cpus
    meter._carry_limit = cpus / 100
    stat = [CpuTimes(busy_s=1000.0, steal_s=50.0)]
    monkeypatch.setattr(meter, "_stat", lambda: stat[0])
    return meter, clock, job, stat


def test_contention_is_the_machine_busy_time_outside_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    meter, clock, job, stat = _meter(monkeypatch)
    meter.start()
    clock.wall += 1.0  # one second on 2 CPUs: 2 CPU-seconds of capacity
    clock.cpu += 0.5  # this process
    job.value += 0.3  # its DataLoader workers, other ranks
    stat[0] = CpuTimes(busy_s=1001.5, steal_s=50.2)  # everybody: 1.5 s busy, 0.2 s stolen
    out = meter.finish()
    assert out == {"cpu_time_s": 0.5, "contention": pytest.approx(0.35), "steal": pytest.approx(0.1)}


def test_clamped_shares_carry_over_so_means_stay_right(monkeypatch: pytest.MonkeyPatch) -> None:
    meter, clock, _job, stat = _meter(monkeypatch)
    busy = 1000.0
    # Coarse counters: busy time of others shows up in 10 ms lumps every other 4 ms step.
    shares = []
    for i in range(50):
        meter.start()
        clock.wall += 0.004
        clock.cpu += 0.004
        busy += 0.004 + (0.004 if i % 2 else 0.0)  # our 4 ms, plus 4 ms of others every other step
        stat[0] = CpuTimes(busy_s=round(busy, 2), steal_s=50.0)  # 10 ms resolution
        shares.append(meter.finish()["contention"])
    assert all(0 <= s <= 1 for s in shares)
    # Others used 0.1 CPU-s of 0.4 CPU-s capacity: 0.25, though single steps read 0 or 1.
    assert sum(shares) / len(shares) == pytest.approx(0.25, abs=0.03)
    assert len(set(shares)) > 1


def test_the_agent_work_between_steps_is_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    meter, clock, _job, stat = _meter(monkeypatch)
    for export_s in (0.0, 1.0):  # right after the last step; after a 1 s trace export
        clock.wall += export_s
        clock.cpu += export_s
        stat[0] = CpuTimes(busy_s=stat[0].busy_s + export_s, steal_s=50.0)
        meter.start()
        clock.wall += 0.5
        clock.cpu += 0.5
        stat[0] = CpuTimes(busy_s=stat[0].busy_s + 0.5, steal_s=50.0)
        out = meter.finish()
        assert out["cpu_time_s"] == 0.5 and out["contention"] == pytest.approx(0.0, abs=1e-9), export_s


def test_no_contention_before_the_job_is_measured_and_off_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    meter, clock, job, _stat = _meter(monkeypatch)
    monkeypatch.setattr(job, "estimate", lambda now: None)
    meter.start()
    clock.wall += 0.1
    clock.cpu += 0.05
    assert meter.finish() == {"cpu_time_s": 0.05}
    monkeypatch.setattr(meter, "_stat", lambda: None)  # no /proc/stat
    meter.job = _Job()  # type: ignore[assignment]
    meter.start()
    clock.wall += 0.1
    assert meter.finish() == {"cpu_time_s": 0.0}
    assert meter.finish() == {}  # nothing started


@linux
def test_read_proc_stat_parses_the_cpu_line() -> None:
    fd = os.open("/proc/stat", os.O_RDONLY)
    try:
        first = contention.read_proc_stat(fd, 100.0)
        sum(i * i for i in range(200_000))
        second = contention.read_proc_stat(fd, 100.0)
    finally:
        os.close(fd)
    assert first is not None and second is not None and second.busy_s >= first.busy_s > 0
    assert first.steal_s is not None and first.steal_s >= 0
    assert StepCpu().cpus == len([line for line in Path("/proc/stat").read_text().splitlines()
                                  if line[:3] == "cpu" and line[3:4].isdigit()])


@linux
def test_job_cpu_counts_children_but_not_this_process() -> None:
    job = JobCpu(os.getpid())
    job.sample()
    before = job.estimate(time.perf_counter())
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:  # this process's own CPU is measured per step, not here
        pass
    job.sample()
    mid = job.estimate(time.perf_counter())
    assert before is not None and mid is not None and mid - before < 0.1
    child = subprocess.Popen([sys.executable, "-c",
                              "import time\nt = time.process_time() + 0.4\n"
                              "while time.process_time() < t: pass\ntime.sleep(30)"])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # wait until the child burnt its CPU and sleeps
            job.sample()
            assert job.snapshot is not None
            if job.snapshot[1] - mid >= 0.35:
                break
            time.sleep(0.2)
        live = job.snapshot[1] - mid  # type: ignore[index]
    finally:
        child.kill()
        child.wait()
    job.sample()
    reaped = job.snapshot[1] - mid  # type: ignore[index]
    assert live >= 0.35  # a live child (a DataLoader worker) is the job
    assert reaped >= 0.35  # and stays counted once reaped (cutime)


@linux
def test_the_job_root_is_the_launcher_when_it_is_an_ancestor() -> None:
    assert job_root_pid(None) == os.getpid()
    assert job_root_pid(os.getppid()) == os.getppid()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert job_root_pid(other.pid) == os.getpid()  # not an ancestor: just this process's tree
    finally:
        other.kill()
        other.wait()
