"""CUDA out-of-memory capture: an allocator snapshot taken before the error propagates (agent layer).

Two ways in, whichever comes first, once per process:

- on CUDA builds the caching allocator's out-of-memory observer
  (``torch._C._cuda_attach_out_of_memory_observer``), attached once CUDA is initialized: it
  runs inside the failed allocation, before ``torch.OutOfMemoryError`` is raised, so the
  snapshot shows the memory exactly as it was (also when the script catches the error);
- the exception hooks (``sys.excepthook`` through ``activation``, ``Run.__exit__``) for a
  ``torch.OutOfMemoryError`` that reached the top of the job: the traceback still holds the
  frames, so their tensors are still allocated.

The snapshot (``torch.cuda.memory._dump_snapshot``) goes to ``memory/`` under
``layout.oom_snapshot_file_name``; outside profiler windows it holds the allocator's blocks and
segments without allocation stacks (history is recorded only during windows). The manifest's
``out_of_memory`` list gets one entry per process: ``rank``, ``step``, ``snapshot`` (its path
in the run, or null) and ``detail`` (the error, or why no snapshot was taken).
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .failures import FailureLog
from .runformat import Artifact, ArtifactKind, add_artifact, layout, update_manifest

__all__ = ["OomSnapshots", "OUT_OF_MEMORY_KEY"]

OUT_OF_MEMORY_KEY = "out_of_memory"  # run.json: the list of out-of-memory records


class OomSnapshots:
    """Dumps one allocator snapshot per process at its first out-of-memory error."""

    def __init__(self, run_dir: Path, failures: FailureLog, *, worker: str, rank: int,
                 step: Callable[[], int]) -> None:
        self._run_dir = run_dir
        self._failures = failures
        self._worker = worker
        self._rank = rank
        self._step = step
        self._lock = threading.Lock()
        self._done = False
        self.attached = False

    def attach(self) -> None:
        """Attach the allocator's observer once CUDA is initialized (no-op before, and on CPU builds)."""
        if self.attached or not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return
        self.attached = True  # one try: a failure is recorded once, not every step
        attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        if attach is None:
            return
        with self._failures.guard("out-of-memory observer"):
            attach(self._observe)

    def on_exception(self, exc: BaseException) -> None:
        """An exception reached the top of the job: take the snapshot if it is an out-of-memory error."""
        if isinstance(exc, torch.OutOfMemoryError):
            self.capture(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)

    def capture(self, detail: str) -> Path | None:
        """Dump the snapshot (once per process) and record it in the manifest; return its path or None."""
        with self._lock:
            if self._done:
                return None
            self._done = True
        path: Path | None = None
        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            detail = f"{detail} (no CUDA device in use: no allocator snapshot)"
        else:
            with self._failures.guard("out-of-memory snapshot"):
                path = self._dump()
            if path is None:
                detail = f"{detail} (the snapshot failed: see {layout.AGENT_ERRORS})"
        with self._failures.guard("out-of-memory record"):
            self._record(path, detail)
        return path

    # -- internals -------------------------------------------------------------------------

    def _observe(self, device: int, alloc: int, device_alloc: int, device_free: int) -> None:
        # Runs inside the allocator's failed allocation: never let anything escape.
        try:
            self.capture(f"CUDA out of memory on device {device}: {alloc} bytes asked, "
                         f"{device_alloc} allocated, {device_free} free")
        except Exception as e:  # noqa: BLE001 - the agent must never break the job
            self._failures.record("out-of-memory observer", e)

    def _dump(self) -> Path:
        folder = self._run_dir / layout.MEMORY_DIR
        folder.mkdir(parents=True, exist_ok=True)
        name = layout.oom_snapshot_file_name(self._worker, time.time_ns())
        tmp = folder / f".{name}.{os.getpid()}.tmp"
        try:
            torch.cuda.memory._dump_snapshot(str(tmp))
            os.replace(tmp, folder / name)
        finally:
            if tmp.exists():
                tmp.unlink()
        add_artifact(self._run_dir, Artifact(ArtifactKind.MEMORY_SNAPSHOT, f"{layout.MEMORY_DIR}/{name}",
                                             rank=self._rank, bytes=(folder / name).stat().st_size))
        return folder / name

    def _record(self, path: Path | None, detail: str) -> None:
        entry = {"rank": self._rank, "step": self._step(),
                 "snapshot": f"{layout.MEMORY_DIR}/{path.name}" if path is not None else None,
                 "detail": detail}

        def change(m: Any) -> Any:
            entries = [*m.extra.get(OUT_OF_MEMORY_KEY, []), entry]
            return m.replace(extra={**m.extra, OUT_OF_MEMORY_KEY: entries})

        update_manifest(self._run_dir, change)
