"""Cleaning the local spool of a remote store: runs whose upload is complete, after a retention (agent layer).

``torchscope run --root URL`` records into ``<spool>/<run id>/`` and uploads from there
(profiler_agent.upload). Once a run's upload is complete -- its spooled run.json says
``"upload": {"state": "complete"}``, its status is final, and every file is as it was when it was
uploaded -- the spooled copy is no longer needed: :func:`clean_spool` deletes such runs when
they are older than the retention (``TORCHSCOPE_SPOOL_RETENTION_DAYS``, default 7; 0 keeps every
run). It runs at the start of every launcher's uploader (in its thread, never on the job's path),
after ``torchscope sync``, and at once with ``torchscope sync --clean`` (``--dry-run`` says what
it would do). A run whose upload is not complete is never deleted: it is what ``sync`` works from.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from .runformat import RunStatus, effective_status, layout, read_manifest
from .upload import state_path, upload_field, uploaded_unchanged

__all__ = ["RETENTION_ENV", "DEFAULT_RETENTION_DAYS", "SpoolVerdict", "clean_spool", "retention_days"]

RETENTION_ENV = "TORCHSCOPE_SPOOL_RETENTION_DAYS"
DEFAULT_RETENTION_DAYS = 7.0
_DAY_S = 86400.0


@dataclass(frozen=True)
class SpoolVerdict:
    """One spooled run: ``removed`` (or, in a dry run, would be), else ``kept`` says why."""

    run_dir: Path
    removed: bool
    kept: str | None = None


def retention_days() -> float:
    """$TORCHSCOPE_SPOOL_RETENTION_DAYS (days; 0 = keep every spooled run), default 7; a value
    that is not a number ≥ 0 counts as the default."""
    try:
        value = float(os.environ.get(RETENTION_ENV, ""))
    except ValueError:
        return DEFAULT_RETENTION_DAYS
    return value if value >= 0 else DEFAULT_RETENTION_DAYS


def _why_kept(run_dir: Path, older_than_s: float, now: float) -> str | None:
    """Why the spooled run must stay, or None when its copy can go."""
    upload = upload_field(run_dir)
    if upload.get("state") != "complete":
        return f"upload {upload.get('state') or 'not complete'}: `torchscope sync` completes it"
    status = _status(run_dir)
    if status is None or status is RunStatus.RUNNING:
        return f"status {status or 'unreadable'}"
    if not uploaded_unchanged(run_dir):
        return "changed since its upload"
    age_s = now - _mtime(state_path(run_dir))  # written by the last upload that put something
    if age_s < older_than_s:
        return f"uploaded {age_s / _DAY_S:.1f} day(s) ago, kept {older_than_s / _DAY_S:g} day(s)"
    return None


def _status(run_dir: Path) -> RunStatus | None:
    """The run's status as readers judge it (a run that stopped beating is crashed, so final)."""
    try:
        return effective_status(read_manifest(run_dir))
    except Exception:  # noqa: BLE001 - an unreadable manifest: kept
        return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def clean_spool(spool: Path, *, older_than_days: float, dry_run: bool = False, keep: frozenset[str] = frozenset(),
                now: float | None = None) -> list[SpoolVerdict]:
    """Delete from ``spool`` every run whose upload is complete and older than ``older_than_days``
    (its upload state file too); ``keep``: run ids left alone (the launcher's own run). With
    ``dry_run`` nothing is deleted. Returns a verdict per spooled run; never raises for a run that
    cannot be deleted (it is kept, with the reason)."""
    if not spool.is_dir():
        return []
    now = time.time() if now is None else now
    verdicts: list[SpoolVerdict] = []
    for run_dir in sorted(p for p in spool.iterdir() if not p.name.startswith(".") and p.is_dir()):
        if run_dir.name in keep or not (run_dir / layout.MANIFEST).is_file():
            continue
        why = _why_kept(run_dir, older_than_days * _DAY_S, now)
        if why is None and not dry_run:
            try:
                shutil.rmtree(run_dir)
            except OSError as e:
                why = f"cannot delete it: {e}"
            else:
                with contextlib.suppress(OSError):
                    state_path(run_dir).unlink()
        verdicts.append(SpoolVerdict(run_dir, why is None, why))
    return verdicts
