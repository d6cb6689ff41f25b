"""Heartbeat: keeps run.json's ``heartbeat`` fresh while the job lives (agent layer, stdlib only).

Readers call a run whose heartbeat is older than HEARTBEAT_STALE_S and whose process is gone
``crashed`` (see runformat.effective_status); this thread is what keeps a live run ``running``.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

# Submodules, not the package's names: the launcher loads no reader module (runformat/__init__
# may load its names lazily).
from .job_start import Background
from .runformat.liveness import HEARTBEAT_INTERVAL_S
from .runformat.writer import update_manifest

__all__ = ["Heartbeat"]


class Heartbeat:
    """Daemon thread updating the manifest's heartbeat every ``interval_s`` seconds."""

    def __init__(self, run_dir: Path, *, interval_s: float = HEARTBEAT_INTERVAL_S) -> None:
        self._run_dir = run_dir
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread: Background | None = None
        self.failures = 0

    def start(self) -> Heartbeat:
        self._thread = Background(self._loop)  # no wait for the thread to be scheduled
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._interval + 5)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                update_manifest(self._run_dir, heartbeat=time.time())
            except Exception:  # noqa: BLE001 - a missed beat is harmless; keep trying
                self.failures += 1
