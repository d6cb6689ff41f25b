"""Catching the agent's own failures so the job never breaks, and recording them (agent layer).

Every hook the agent installs runs inside :meth:`FailureLog.guard`: an exception is caught,
appended to the run's agent_errors.jsonl when the folder is writable, announced once per
place on stderr, and the job goes on.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

from .runformat import JsonlWriter, layout

__all__ = ["FailureLog"]


class FailureLog:
    """Writes one JSON line per failure inside the agent; never raises."""

    def __init__(self, run_dir: Path | None, *, rank: int = 0) -> None:
        self._run_dir = run_dir
        self._rank = rank
        self._writer: JsonlWriter | None = None
        self._announced: set[str] = set()
        self._lock = threading.Lock()
        self.count = 0

    def record(self, where: str, exc: BaseException) -> None:
        """Record that ``where`` failed with ``exc``; never raises."""
        with self._lock:
            self.count += 1
            entry = {
                "time": time.time(),
                "rank": self._rank,
                "pid": os.getpid(),
                "where": where,
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": "".join(traceback.format_exception(exc))[-4000:],
            }
            try:
                if self._writer is None and self._run_dir is not None:
                    self._writer = JsonlWriter(self._run_dir / layout.AGENT_ERRORS)
                if self._writer is not None:
                    self._writer.write(entry)
            except Exception:  # noqa: BLE001 - the disk may be full or the folder gone; keep going
                self._run_dir = None
            if where not in self._announced:
                self._announced.add(where)
                with contextlib.suppress(Exception):
                    print(f"torchscope agent: {where} failed ({entry['error']}); the job continues",
                          file=sys.stderr)

    @contextlib.contextmanager
    def guard(self, where: str) -> Iterator[None]:
        """Run the block; on any exception record it and carry on."""
        try:
            yield
        except Exception as e:  # noqa: BLE001 - the agent must never break the job
            self.record(where, e)

    def close(self) -> None:
        with self._lock, contextlib.suppress(Exception):
            if self._writer is not None:
                self._writer.close()
                self._writer = None
