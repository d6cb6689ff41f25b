"""Allocator settings of a one-shot command that holds a big trace's tables (CLI layer).

glibc's malloc gives each thread that allocates under contention an arena of its own, and freed
memory stays in the arena it came from. A cold ``analyze`` allocates from several threads at once
(Arrow's and the trace reader's), so the same bytes are held once per arena at the peak. One arena
for the whole process keeps every free block reusable by every thread: measured on the 100 MB
synthetic trace, a cold ``analyze --json`` peaked at 220-222 MB with glibc's default and 201-207 MB
with one arena, at the same wall time (benchmarks/README.md, issue 13 wave 11). Lowering the mmap
and trim thresholds as well saved ~5 MB more but cost 0.3 s of wall in system calls: not done.

Only for commands that end when their output is written; the long-running UI server keeps glibc's
default, where per-thread arenas serve its concurrent sessions.
"""
from __future__ import annotations

import sys

__all__ = ["one_malloc_arena"]

_M_ARENA_MAX = -8  # mallopt's parameter number, from glibc's <malloc.h>


def one_malloc_arena() -> bool:
    """Limit glibc's malloc to one arena from now on (before the threads start); False where the C
    library is not glibc or refuses. Arenas made already stay; new threads share the main one."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, 1))
