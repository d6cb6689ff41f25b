"""``--scheduler`` and ``--progress`` for the commands that ingest traces (analyze, diff, advise), and the per-file progress line (CLI layer).

The parallel ingest itself is app.workspace.ingest; a command wraps its work in
``ingest_context(args)``, so every trace set it loads (one or two sides, a run's ranks) is parsed
on the given Dask cluster or the local cores, with progress on stderr, never on stdout.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from app.presentation.units import format_bytes, format_seconds
from app.workspace.ingest import SCHEDULER_ENV, ingest_settings

__all__ = ["add_ingest_arguments", "ingest_context", "FilesProgress"]


def add_ingest_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scheduler", metavar="ADDRESS", default=None,
                        help="parse many trace files on this Dask distributed scheduler (e.g. tcp://host:8786; "
                             f"default ${SCHEDULER_ENV}); the workers must share this filesystem "
                             "(docs/distributed.md)")
    try:
        parser.add_argument("--progress", action="store_true",
                            help="show ingest progress (files, MB, ETA) on stderr even when it is not a terminal")
    except argparse.ArgumentError:  # the command has its own --progress (analyze's reading bar): one flag for both
        pass


class FilesProgress:
    """``files done/total, MB, ETA`` on one stderr line, rewritten at most ten times a second."""

    def __init__(self, stream: TextIO | None = None, *, force: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = force or self.stream.isatty()
        self.started = time.monotonic()
        self.last = 0.0
        self.shown = False

    def __call__(self, files_done: int, files_total: int, bytes_done: int, bytes_total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last < (0.1 if self.stream.isatty() else 1.0) and files_done < files_total:
            return
        self.last = now
        elapsed = now - self.started
        eta = elapsed * (bytes_total - bytes_done) / bytes_done if bytes_done > 0 else None
        line = (f"ingesting traces: {files_done}/{files_total} files, {format_bytes(bytes_done)} of "
                f"{format_bytes(bytes_total)}, {format_seconds(elapsed)} elapsed, ETA {format_seconds(eta)}")
        self.stream.write(f"\r{line:<100}" if self.stream.isatty() else f"{line}\n")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown and self.stream.isatty():
            self.stream.write("\n")
            self.stream.flush()


@contextmanager
def ingest_context(args: argparse.Namespace) -> Iterator[FilesProgress]:
    """The context a command runs in so that its trace loading follows ``--scheduler``/``--progress``."""
    bar = FilesProgress(force=bool(getattr(args, "progress", False)))
    try:
        with ingest_settings(scheduler=getattr(args, "scheduler", None), progress=bar):
            yield bar
    finally:
        bar.close()
