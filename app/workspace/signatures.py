"""File signatures that key the front ends' in-memory caches: what must change for a cached load to be redone (workspace layer)."""
from __future__ import annotations

import os
from pathlib import Path

from profiler_agent.runformat import layout

__all__ = ["run_signature", "file_signature"]


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def run_signature(run_dir: str | os.PathLike[str]) -> tuple[float, ...]:
    """Modification times of the files whose change must invalidate the run's cached data."""
    p = Path(run_dir)
    traces = layout.list_trace_files(p)
    return (
        _mtime(p / layout.MANIFEST),
        _mtime(p / layout.METRICS),
        _mtime(p / layout.SYSTEM),
        float(len(traces)),
        max((_mtime(t) for t in traces), default=0.0),
    )


def file_signature(path: str | os.PathLike[str]) -> tuple[float, int]:
    """(mtime, size) of a file, or (0, -1) when it is missing: part of a cache key."""
    try:
        st_ = Path(path).stat()
    except OSError:
        return (0.0, -1)
    return (st_.st_mtime, st_.st_size)
