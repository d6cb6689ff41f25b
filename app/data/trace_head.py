"""What a trace file says about itself, read from its first and last bytes without parsing its
events (data layer): rank, world size, devices and when its profiling started.

Used to turn outside traces into runs (``tbprofiler``), where opening every trace with the full
parser would cost seconds per file.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.data.safe_io import InflateLimit, iter_limited
from profiler_agent.runformat.errors import CorruptFileError

__all__ = ["TraceMeta", "read_trace_meta", "read_trace_start"]

# Bytes of (decompressed) text read to find the metadata Kineto writes before "traceEvents".
_HEAD_BYTES = 1 << 18
# Bytes of the end of a trace searched for the fields Kineto writes after "traceEvents".
_TAIL_BYTES = 1 << 12
_BASE_TIME_RE = re.compile(rb'"baseTimeNanoseconds"\s*:\s*(\d+)')
_TS_RE = re.compile(rb'"ts"\s*:\s*(\d+(?:\.\d*)?)')
# Event timestamps read as epoch µs are believed between these dates (2015-01-01 .. 2100-01-01).
_EPOCH_S_RANGE = (1_420_070_400.0, 4_102_444_800.0)


@dataclass(frozen=True)
class TraceMeta:
    """What a trace says about where it was recorded (from the fields before ``traceEvents``)."""

    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    devices: tuple[dict[str, Any], ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


def _read_head(path: Path) -> bytes:
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            return f.read(_HEAD_BYTES)
    except (OSError, EOFError, zlib.error):
        return b""


def _open_text_head(path: Path) -> str:
    return _read_head(path).decode("utf-8", errors="replace")


def _read_tail(path: Path) -> bytes:
    """The last ``_TAIL_BYTES`` of the trace's text. A plain file is read from its end; a gzip
    stream cannot be entered at its end, so it is decompressed in chunks keeping only the last
    ones (constant memory, ~0.1 s per 30 MB of JSON); one that inflates beyond the inflate limit
    (``TORCHSCOPE_MAX_INFLATE_MB``) has no tail here (the parser names the limit when it opens it)."""
    try:
        if not path.name.endswith(".gz"):
            with open(path, "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - _TAIL_BYTES))
                return f.read()
        tail = b""
        for chunk in iter_limited(path):
            tail = (tail + chunk)[-_TAIL_BYTES:]
        return tail
    except (OSError, EOFError, zlib.error, CorruptFileError, InflateLimit):
        return b""


def read_trace_start(path: str | os.PathLike[str]) -> float | None:
    """Return when the trace's profiling started, in epoch seconds, or None when the trace does
    not say (the caller then falls back to the file's modification time).

    Kineto (torch ≥ 2.3) writes ``ts`` in µs *relative to* ``baseTimeNanoseconds``, a top-level
    field it writes after ``traceEvents``, at the end of the file; that base is the wall clock
    floored to a 3-month boundary, so on its own it can be three months early. The start is
    therefore base + the earliest ``ts`` found in the head of the file. Older traces have no base
    and write ``ts`` as epoch µs: the earliest ``ts`` is used when it reads as a date between 2015
    and 2100. Only the first 256 KiB of events are looked at, so the start is that of the
    earliest event there (Kineto writes host events in time order, first).
    """
    p = Path(path)
    head = _read_head(p)
    cut = head.find(b'"traceEvents"')
    if cut < 0:
        return None
    stamps = [float(m.group(1)) for m in _TS_RE.finditer(head, cut)]
    stamps = [t for t in stamps if t > 0]
    if not stamps:
        return None
    first_us = min(stamps)
    base = _BASE_TIME_RE.search(head[:cut]) or _BASE_TIME_RE.search(_read_tail(p))
    # A writer that sets a base but still writes epoch µs: the second reading is the plausible one.
    candidates = ([int(base.group(1)) / 1e9 + first_us / 1e6] if base else []) + [first_us / 1e6]
    return next((s for s in candidates if _EPOCH_S_RANGE[0] <= s <= _EPOCH_S_RANGE[1]), None)


def read_trace_meta(path: str | os.PathLike[str]) -> TraceMeta:
    """Read rank, world size and devices from the head of a trace, without parsing its events.

    Returns an empty TraceMeta when the head cannot be parsed (the trace engine will still
    report the trace's own problems when it is opened).
    """
    head = _open_text_head(Path(path))
    cut = head.find('"traceEvents"')
    if cut < 0:
        return TraceMeta()
    prefix = head[:cut].rstrip().rstrip(",")
    try:
        meta = json.loads(prefix + "}") if prefix.lstrip().startswith("{") else {}
    except (json.JSONDecodeError, RecursionError):  # RecursionError: a header nested thousands deep
        return TraceMeta()
    raw_dist = meta.get("distributedInfo")
    dist: dict[str, Any] = raw_dist if isinstance(raw_dist, dict) else {}
    devices = tuple(
        {
            "type": "cuda",
            "index": d.get("id"),
            "name": d.get("name"),
            "total_memory_bytes": d.get("totalGlobalMem"),
        }
        for d in meta.get("deviceProperties") or ()
        if isinstance(d, dict)
    )
    rank = dist.get("rank")
    ws = dist.get("world_size")
    return TraceMeta(
        rank=rank if isinstance(rank, int) else None,
        world_size=ws if isinstance(ws, int) else None,
        backend=dist.get("backend") if isinstance(dist.get("backend"), str) else None,
        devices=devices,
    )
