"""A one-line progress bar with an ETA on stderr, for reading big traces (CLI layer).

Shown only when stderr is a terminal (or when asked with ``--progress``) and only for inputs
large enough to take a while; stdout (``--json``) is never touched. The ETA extrapolates the
bytes read so far at the rate measured since the first call, which suits a reader whose cost
grows linearly with the bytes (docs/trace-engine.md).
"""
from __future__ import annotations

import sys
import time
from typing import TextIO

from app.presentation.progress import progress_text

__all__ = ["ProgressBar", "MIN_BYTES", "progress_line"]

MIN_BYTES = 32 << 20  # below this, ingest is quick enough not to need a bar
_EVERY_S = 0.1  # redraw at most this often
_WIDTH = 30


def progress_line(label: str, done: int, total: int, elapsed_s: float) -> str:
    """``label [####......] 120 of 1,000 MiB, 3 s, about 22 s left``."""
    frac = min(1.0, done / total) if total else 1.0
    fill = int(frac * _WIDTH)
    return f"{label} [{'#' * fill}{'.' * (_WIDTH - fill)}] {progress_text(done, total, elapsed_s)}"


class ProgressBar:
    """``progress(done_bytes, total_bytes)`` callback drawing one line on ``stream`` (stderr)."""

    def __init__(self, label: str, *, force: bool = False, stream: TextIO | None = None,
                 min_bytes: int = MIN_BYTES) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = force or self.stream.isatty()
        self.min_bytes = 0 if force else min_bytes
        self.started = time.monotonic()
        self.last = 0.0
        self.shown = False
        self.width = 0

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total < self.min_bytes:
            return
        now = time.monotonic()
        if now - self.last < _EVERY_S and done < total:
            return
        self.last = now
        line = progress_line(self.label, done, total, now - self.started)
        pad = " " * max(0, self.width - len(line))  # a shorter line overwrites the last one whole
        self.width = len(line)
        self.stream.write(f"\r{line}{pad}")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()
