"""One malloc arena for a cold analyze: set in a fresh process, threads then share it."""
from __future__ import annotations

import platform
import subprocess
import sys

import pytest

_GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"

# malloc_stats() prints one "Arena N:" block per arena to stderr; ten threads that each allocate
# while the others do make arenas of their own unless the limit holds.
_PROBE = """
import ctypes, sys, threading
from app.cli.process_memory import one_malloc_arena
if sys.argv[1] == "1":
    assert one_malloc_arena()
barrier = threading.Barrier(10)
def work():
    barrier.wait()
    keep = [bytearray(4096) for _ in range(2000)]
    barrier.wait()
threads = [threading.Thread(target=work) for _ in range(10)]
for t in threads: t.start()
for t in threads: t.join()
ctypes.CDLL(None).malloc_stats()
"""


@pytest.mark.skipif(not _GLIBC, reason="glibc's malloc only")
def test_one_arena_is_shared_by_every_thread() -> None:
    def arenas(flag: str) -> int:
        out = subprocess.run([sys.executable, "-c", _PROBE, flag], capture_output=True, text=True, check=True)
        return out.stderr.count("Arena ")

    assert arenas("0") > 1  # the probe can tell: glibc's default gives threads arenas of their own
    assert arenas("1") == 1
