"""The agent's /proc readings against psutil's on the same processes (Linux only)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from profiler_agent import procfs

pytestmark = pytest.mark.skipif(not procfs.available(), reason="needs Linux /proc")

# Busy for {s} s of wall time, killed by the test long before: on a loaded machine the test's own 0.5 s of
# CPU can take many seconds of wall time, and a burner that ended would be read as a zombie (RSS 0).
_BURN = "import time\nt = time.time()\nwhile time.time() - t < {s}: pass\n"


def test_descendants_match_psutil_and_survive_odd_command_names(tmp_path: Path) -> None:
    # A command name holding ") " must not shift the fields that follow it in /proc/<pid>/stat.
    odd = tmp_path / "a) b (c"
    odd.symlink_to(sys.executable)
    sleeper = "import subprocess, sys, time\np = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\ntime.sleep(30)\n"
    parent = subprocess.Popen([str(odd), "-c", sleeper])
    try:
        deadline = time.monotonic() + 10
        while len(psutil.Process(parent.pid).children(recursive=True)) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        expected = {p.pid for p in psutil.Process(os.getpid()).children(recursive=True)}
        assert parent.pid in expected and len(expected) >= 2
        assert set(procfs.scan_descendants(os.getpid())) == expected
        fields = procfs.stat_fields(parent.pid)
        assert fields is not None and int(fields[1]) == os.getpid()  # ppid read past the odd name
    finally:
        for p in psutil.Process(parent.pid).children(recursive=True):
            p.kill()
        parent.kill()
        parent.wait()


def test_cpu_percent_rss_and_machine_figures_agree_with_psutil() -> None:
    busy = subprocess.Popen([sys.executable, "-c", _BURN.format(s=120)])
    try:
        ours = procfs.ProcessCpu()
        assert ours.sample(busy.pid) is not None  # the first reading: 0.0 by convention
        theirs = psutil.Process(busy.pid)
        theirs.cpu_percent(None)
        time.sleep(1.0)
        reading = ours.sample(busy.pid)
        assert reading is not None
        cpu, rss = reading
        their_cpu = theirs.cpu_percent(None)
        assert abs(cpu - their_cpu) < 15  # both read the same ticks a few microseconds apart
        assert abs(rss - theirs.memory_info().rss) <= 2 * 1024 * 1024
        assert procfs.machine_memory_used() == pytest.approx(psutil.virtual_memory().used, rel=0.05)
    finally:
        busy.kill()
        busy.wait()
    assert ours.sample(busy.pid) is None  # gone


# In a process of its own: the test process may have other children (a fixture's server, a
# multiprocessing resource tracker), which the tree would rightly count too.
_TREE = """
import subprocess, sys, time
import psutil
from profiler_agent import system
tree = system._ProcessTree(rescan_s=0.0)
child = subprocess.Popen([sys.executable, "-c", BURN])
try:
    time.sleep(0.3)
    tree.sample()  # finds the child (its first reading is 0 %)
    theirs = psutil.Process(child.pid)
    theirs.cpu_percent(None)
    t = time.process_time()
    while time.process_time() - t < 0.5:
        pass
    sample = tree.sample()
    their_cpu = theirs.cpu_percent(None)  # the same interval, a few microseconds later
    assert sample["children"] == 1, sample
    assert sample["children_cpu_percent"] > 0, sample  # a busy loop: how much depends on the machine's load
    assert abs(sample["children_cpu_percent"] - their_cpu) < 15, (sample, their_cpu)
    assert sample["children_rss_bytes"] > 1024 * 1024, sample
    assert sample["rss_bytes"] > 10 * 1024 * 1024, sample
    assert 0 <= sample["system_cpu_percent"] <= 100, sample
    assert sample["system_memory_used_bytes"] > 0, sample
finally:
    child.kill()
    child.wait()
assert tree.sample()["children"] == 0
"""


def test_the_sampler_tree_counts_its_children() -> None:
    script = f"BURN = {_BURN.format(s=120)!r}\n{_TREE}"
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2])
    assert res.returncode == 0, res.stderr
