"""Reading runs tolerantly (run-format layer, stdlib only).

- unknown manifest fields are kept; older schema versions are migrated on read; a newer
  version is refused with :class:`SchemaVersionError`;
- a truncated last line of a ``.jsonl`` file (a job killed mid-write) is skipped silently,
  other bad lines are skipped and reported (the first MAX_REPORTED_LINES of a file one by one,
  then one count);
- the lines of metrics.jsonl and system.jsonl (:func:`read_samples`) follow the value rules of
  docs/run-format.md: a ``step`` or ``rank`` that is not a whole number in range drops its line, a
  ``time`` that is not a finite number or an integer beyond 2**53 drops its value, each with a
  message naming the file and the line;
- a JSON document nested deeper than Python can parse is a corrupt file (or a skipped line);
- a run whose status is ``running`` but whose heartbeat is stale and whose process is gone is
  reported as ``crashed``.
"""
from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterator
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
from .liveness import HEARTBEAT_INTERVAL_S, HEARTBEAT_STALE_S, recorded_process_gone
from .schema import Manifest, RunStatus, manifest_from_dict

__all__ = [
    "HEARTBEAT_INTERVAL_S",
    "HEARTBEAT_STALE_S",
    "JsonlRead",
    "StoreListing",
    "read_manifest",
    "read_jsonl",
    "read_samples",
    "MAX_REPORTED_LINES",
    "MAX_STEP",
    "iter_jsonl",
    "effective_status",
    "is_run_dir",
    "list_runs",
    "find_run",
]


# Bad lines of one file reported one by one; beyond, one message counts the rest (a file of a
# million bad lines must not print a million warnings).
MAX_REPORTED_LINES = 20
# Steps are whole numbers 0 <= step < MAX_STEP (2**53: exact as a float, so every reader agrees).
MAX_STEP = 2**53
_MAX_RANK = 2**24


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
    except RecursionError:
        raise CorruptFileError(f"{path}: JSON nested too deeply to read") from None
    try:
        return manifest_from_dict(raw, source=str(path))
    except RecursionError:  # a value nested just below the parser's limit, copied or compared
        raise CorruptFileError(f"{path}: JSON nested too deeply to read") from None


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


# A line's check: (the record to keep or None to drop the line, problems of the line).
RecordCheck = Callable[[dict[str, Any]], tuple[dict[str, Any] | None, list[str]]]


def _whole_number(value: Any, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < high


def check_sample(record: dict[str, Any]) -> tuple[dict[str, Any] | None, list[str]]:
    """One line of metrics.jsonl or system.jsonl under the value rules (module docstring):
    (the record, or None when the line is dropped; what was wrong)."""
    for key, high, bound in (("step", MAX_STEP, "2**53"), ("rank", _MAX_RANK, "2**24")):
        if key in record and record[key] is not None and not _whole_number(record[key], high):
            return None, [f"{key} {_short(record[key])} is not a whole number from 0 to below {bound}; line skipped"]
    problems: list[str] = []
    out = record
    for key, value in record.items():
        bad = ""
        if key == "time" and value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)):
            bad = "is not a finite number"
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= MAX_STEP:
            bad = "is an integer beyond 2**53"
        if bad:
            if out is record:
                out = dict(record)
            del out[key]
            problems.append(f"{key} {_short(value)} {bad}; value dropped")
    return out, problems


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def read_samples(path: str | os.PathLike[str]) -> JsonlRead:
    """Read metrics.jsonl or system.jsonl: :func:`read_jsonl` with the value rules of
    :func:`check_sample`, so no reader sees a step of 1e18 or an integer beyond int64."""
    return read_jsonl(path, check=check_sample)


def read_jsonl(path: str | os.PathLike[str], *, missing_ok: bool = True,
               check: RecordCheck | None = None) -> JsonlRead:
    """Read a JSON-lines file tolerantly; see :class:`JsonlRead`. ``check`` may drop or clean each
    record (see :func:`read_samples`); its problems are reported like bad lines.

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
    bad_lines = 0

    def report(lineno: int, problem: str) -> None:
        nonlocal bad_lines
        bad_lines += 1
        if bad_lines <= MAX_REPORTED_LINES:
            skipped.append(f"{path.name} line {lineno}: {problem}")

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
                report(lineno, f"not valid JSON ({e})")
            continue
        except RecursionError:
            report(lineno, "JSON nested too deeply to read")
            continue
        if not isinstance(obj, dict):
            report(lineno, f"expected a JSON object, got {type(obj).__name__}")
            continue
        if check is not None:
            kept, problems = check(obj)
            for problem in problems:
                report(lineno, problem)
            if kept is None:
                continue
            obj = kept
        records.append(obj)
    if bad_lines > MAX_REPORTED_LINES:
        skipped.append(f"{path.name}: {bad_lines - MAX_REPORTED_LINES:,} more problems in lines not listed")
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
