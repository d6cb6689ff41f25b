"""Reading runs tolerantly (run-format layer, stdlib only).

- unknown manifest fields are kept; older schema versions are migrated on read; a newer
  version is refused with :class:`SchemaVersionError`;
- a truncated last line of a ``.jsonl`` file (a job killed mid-write) is skipped silently,
  other bad lines are skipped and reported;
- a run whose status is ``running`` but whose heartbeat is stale and whose process is gone is
  reported as ``crashed``.
"""
from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import layout
from .errors import (
    CorruptFileError,
    NotARunError,
    RunFormatError,
    RunNotFoundError,
    RunStoreNotFoundError,
)
from .liveness import recorded_process_gone
from .schema import Manifest, RunStatus, manifest_from_dict

__all__ = [
    "HEARTBEAT_INTERVAL_S",
    "HEARTBEAT_STALE_S",
    "JsonlRead",
    "StoreListing",
    "read_manifest",
    "read_jsonl",
    "iter_jsonl",
    "effective_status",
    "is_run_dir",
    "list_runs",
    "find_run",
]

# The agent refreshes the heartbeat this often; a run is stale after several missed beats.
HEARTBEAT_INTERVAL_S = 5.0
HEARTBEAT_STALE_S = 6 * HEARTBEAT_INTERVAL_S


def is_run_dir(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a folder holding a run.json."""
    return (Path(path) / layout.MANIFEST).is_file()


def read_manifest(run_dir: str | os.PathLike[str]) -> Manifest:
    """Return the run's manifest.

    Raises NotARunError (no run.json), CorruptFileError (unreadable or wrong types) or
    SchemaVersionError (written by a newer Torchscope).
    """
    run_dir = Path(run_dir)
    path = run_dir / layout.MANIFEST
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        if not run_dir.exists():
            raise NotARunError(f"{run_dir}: no such folder") from None
        raise NotARunError(f"{run_dir}: not a run folder (no {layout.MANIFEST})") from None
    except IsADirectoryError:
        raise CorruptFileError(f"{path}: is a folder, expected a JSON file") from None
    if not data.strip():
        raise CorruptFileError(f"{path}: file is empty")
    try:
        raw = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise CorruptFileError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise CorruptFileError(f"{path}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    return manifest_from_dict(raw, source=str(path))


@dataclass(frozen=True)
class JsonlRead:
    """Records read from a JSON-lines file and the lines that had to be skipped."""

    records: list[dict[str, Any]]
    skipped: list[str] = field(default_factory=list)  # human-readable reasons, one per bad line
    truncated_tail: bool = False  # last line had no newline and did not parse (writer killed)


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[tuple[int, bytes]]:
    """Yield (line number, raw line) of a file, 1-based, without the newline."""
    with open(path, "rb") as f:
        yield from enumerate(f, start=1)


def read_jsonl(path: str | os.PathLike[str], *, missing_ok: bool = True) -> JsonlRead:
    """Read a JSON-lines file tolerantly; see :class:`JsonlRead`.

    A missing file gives no records when ``missing_ok``; otherwise raises CorruptFileError.
    """
    path = Path(path)
    records: list[dict[str, Any]] = []
    skipped: list[str] = []
    truncated = False
    try:
        lines = list(iter_jsonl(path))
    except FileNotFoundError:
        if missing_ok:
            return JsonlRead(records=[])
        raise CorruptFileError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise CorruptFileError(f"{path}: is a folder, expected a JSON-lines file") from None
    for lineno, raw in lines:
        text = raw.strip()
        if not text:
            continue
        try:
            obj = json.loads(text.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            if lineno == len(lines) and not raw.endswith(b"\n"):
                truncated = True  # the writer was killed mid-line: expected, not an error
            else:
                skipped.append(f"{path.name} line {lineno}: not valid JSON ({e})")
            continue
        if not isinstance(obj, dict):
            skipped.append(f"{path.name} line {lineno}: expected a JSON object, got {type(obj).__name__}")
            continue
        records.append(obj)
    return JsonlRead(records=records, skipped=skipped, truncated_tail=truncated)


def effective_status(manifest: Manifest, *, now: float | None = None) -> RunStatus:
    """Return the status to show: ``crashed`` for a running run that stopped beating.

    On the run's own host a recorded process that is gone (or whose pid another process now
    holds) means crashed at once, whatever the heartbeat says (``liveness``). Otherwise a run is
    crashed when its heartbeat is older than HEARTBEAT_STALE_S -- or lies in the future beyond
    that, which no live writer gives -- and its process is not known alive.
    """
    if manifest.status is not RunStatus.RUNNING:
        return manifest.status
    gone = recorded_process_gone(manifest)
    if gone:
        return RunStatus.CRASHED
    now = time.time() if now is None else now
    beat = manifest.heartbeat if manifest.heartbeat is not None else manifest.started_at
    if beat is None or not math.isfinite(beat):
        return RunStatus.RUNNING
    if abs(now - beat) <= HEARTBEAT_STALE_S or gone is False:
        return RunStatus.RUNNING
    return RunStatus.CRASHED


@dataclass(frozen=True)
class StoreListing:
    """The readable runs of a store, and one message per folder that could not be read."""

    root: Path
    runs: list[tuple[Path, Manifest]]
    problems: list[str] = field(default_factory=list)
    # The sub-folders without a manifest (each also has its message in ``problems``), so that a
    # reader can say more about them without parsing that message.
    not_runs: list[Path] = field(default_factory=list)


def not_a_run_problem(folder: Path) -> str:
    """The problem ``list_runs`` reports for a sub-folder without a manifest (in ``not_runs`` too)."""
    return f"{folder}: not a run folder (no {layout.MANIFEST}); skipped"


def list_runs(root: str | os.PathLike[str] | None = None) -> StoreListing:
    """Read every run manifest under the store ``root`` (see layout.resolve_root), newest first.

    Folders that are not runs, or whose manifest cannot be read, are reported in ``problems``
    and skipped, so one bad run never hides the others. Raises RunStoreNotFoundError when the
    store folder does not exist or is not a folder.
    """
    root = layout.resolve_root(root)
    if not root.exists():
        raise RunStoreNotFoundError(f"{root}: run store not found (create it by recording a run, or pass --root)")
    if not root.is_dir():
        raise RunStoreNotFoundError(f"{root}: is a file, expected a run store folder")
    runs: list[tuple[Path, Manifest]] = []
    problems: list[str] = []
    not_runs: list[Path] = []
    for child in sorted(root.iterdir(), reverse=True):
        if not child.is_dir() or child.name.startswith("."):
            continue
        try:
            runs.append((child, read_manifest(child)))
        except NotARunError:
            not_runs.append(child)
            problems.append(not_a_run_problem(child))
        except RunFormatError as e:
            problems.append(str(e))
    return StoreListing(root=root, runs=runs, problems=problems, not_runs=not_runs)


def find_run(ref: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> Path:
    """Resolve a run reference: a run folder path, a run id, or a unique name / id prefix.

    Raises RunNotFoundError when nothing matches or the prefix is ambiguous.
    """
    as_path = Path(ref)
    if is_run_dir(as_path):
        return as_path
    listing = list_runs(root)
    text = str(ref)
    exact = [p for p, m in listing.runs if m.id == text or p.name == text]
    if exact:
        return exact[0]
    by_name = [p for p, m in listing.runs if m.name == text]
    if len(by_name) >= 1:
        return by_name[0]  # newest run of that name (list is newest first)
    prefix = [p for p, m in listing.runs if m.id.startswith(text) or m.name.startswith(text)]
    if len(prefix) == 1:
        return prefix[0]
    if not prefix:
        candidate = listing.root / text
        if candidate.is_dir():
            # The folder exists but was not listed as a run: let read_manifest say why (newer
            # schema, broken run.json, no run.json) instead of a misleading "no such run".
            read_manifest(candidate)
            return candidate
        raise RunNotFoundError(f"{text!r}: no run with that id or name in {listing.root}")
    names = ", ".join(p.name for p in prefix[:5])
    raise RunNotFoundError(f"{text!r}: matches {len(prefix)} runs in {listing.root} ({names}...); be more specific")
