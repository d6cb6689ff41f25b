"""TensorBoard event files (tfevents) read into scalar points, grouped in runs (data layer: files → tables).

A **TensorBoard run** is a folder holding event files (TensorBoard's own rule: a file whose name
contains ``tfevents``), found anywhere under the folder given, as TensorBoard finds them. The
sub-folders ``SummaryWriter.add_scalars`` writes next to its writer's file (``<main_tag>_<tag>/``,
each holding one tag, ``main_tag``) are folded back into their parent's run as ``main_tag/tag``,
the key the agent gives the same call. Scalars only (``add_scalar``'s ``simple_value`` and
tensor-valued ``scalars`` summaries); histograms, images and text are left out.

Records are read with tensorboard's own reader (an optional dependency, imported only when an
event file is found). That reader stops quietly at a damaged record, so where it stopped is
checked against the file's size: a last record cut short (a job killed while writing) is
accepted, like a truncated last ``.jsonl`` line; a record that fails its checksum makes the file
corrupt, and it is skipped with the byte offset in the reason.
"""
from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.data.trace_files import Skipped
from app.errors import UsageError
from profiler_agent.runformat.metric_keys import tensorboard_key
from profiler_agent.runformat.reader import is_run_dir

__all__ = [
    "EVENT_FILE_MARKER",
    "TENSORBOARD_PACKAGE",
    "ScalarPoint",
    "EventRun",
    "EventScan",
    "is_event_file",
    "read_event_file",
    "scan_event_runs",
]

# TensorBoard's rule for an event file: "tfevents" in its name (events.out.tfevents.<time>.<host>…).
EVENT_FILE_MARKER = "tfevents"
TENSORBOARD_PACKAGE = "tensorboard"
# A TFRecord: length (8 bytes), masked CRC of the length (4), data, masked CRC of the data (4).
_RECORD_OVERHEAD = 16
_HEADER = 12


@dataclass(frozen=True)
class ScalarPoint:
    """One scalar of an event file: its metrics key (see ``metric_keys.tensorboard_key``), the
    writer's step, its wall time (epoch seconds) and value."""

    key: str
    step: int
    wall_time: float
    value: float


@dataclass(frozen=True)
class EventFileScalars:
    """The scalars of one event file, and the span of wall time its events cover."""

    path: Path
    points: tuple[ScalarPoint, ...]
    first_wall_time: float
    last_wall_time: float
    tags: frozenset[str]


@dataclass(frozen=True)
class EventRun:
    """One TensorBoard run: its folder, every event file read for it (add_scalars folders
    included) and their scalar points, sorted by step then wall time."""

    folder: Path
    files: tuple[Path, ...]
    points: tuple[ScalarPoint, ...]
    started_at: float
    ended_at: float


@dataclass(frozen=True)
class EventScan:
    """The TensorBoard runs under a folder, and the event files left out and why."""

    runs: tuple[EventRun, ...]
    skipped: tuple[Skipped, ...]


class _BadEventFile(Exception):
    """An event file that cannot be imported; the message is the reason, for a Skipped entry."""


def is_event_file(path: str | os.PathLike[str]) -> bool:
    """True for a visible file whose name contains ``tfevents`` (TensorBoard's own test)."""
    p = Path(path)
    return EVENT_FILE_MARKER in p.name and not p.name.startswith(".") and p.is_file()


def _tensorboard() -> tuple[Any, Any, Any, Any]:
    """tensorboard's record reader, Event proto, tensor decoder and CRC; UsageError when not installed."""
    try:
        from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
        from tensorboard.util.tensor_util import make_ndarray
    except ImportError as e:
        raise UsageError(
            f"reading TensorBoard event files needs the '{TENSORBOARD_PACKAGE}' package, which is not "
            f"installed ({e}): pip install {TENSORBOARD_PACKAGE}  (or: pip install 'torchscope[tensorboard]')"
        ) from None
    return RawEventFileLoader, Event, make_ndarray, masked_crc32c


def _records(path: Path) -> Iterator[bytes]:
    loader, _, _, _ = _tensorboard()
    yield from loader(str(path)).Load()


def _check_stop(path: Path, offset: int, read: int, crc: Any) -> None:
    """Raise _BadEventFile unless the reader stopped at the end of ``path`` or at a last record cut short."""
    with path.open("rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(offset)
        header = f.read(_HEADER)  # only the header: a file corrupt near its start may be large
    if len(header) < _HEADER:
        return
    length_bytes, (length_crc,) = header[:8], struct.unpack("<I", header[8:12])
    if crc(length_bytes) != length_crc:
        if read == 0:
            raise _BadEventFile("not a TensorBoard event file (its first record's length fails its checksum)")
        raise _BadEventFile(f"corrupt at byte {offset:,} of {size:,} (a record's length fails "
                            f"its checksum) after {read} good record(s)")
    (length,) = struct.unpack("<Q", length_bytes)
    if size - offset >= length + _RECORD_OVERHEAD:
        if read == 0:
            raise _BadEventFile("corrupt: its first record's data fails its checksum")
        raise _BadEventFile(f"corrupt at byte {offset:,} of {size:,} (a record's data fails "
                            f"its checksum) after {read} good record(s)")
    # Otherwise the last record was cut short while being written: what came before is kept.


def _scalar_value(value: Any, make_ndarray: Any) -> float | None:
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind == "tensor" and value.metadata.plugin_data.plugin_name == "scalars":
        array = make_ndarray(value.tensor)
        return float(array.reshape(())) if array.size == 1 else None
    return None


def read_event_file(path: str | os.PathLike[str]) -> EventFileScalars:
    """Read the scalar summaries of one event file.

    Raises UsageError when the file cannot be read, is empty, is not an event file or is
    corrupt (naming the file, the byte offset and what failed), and when tensorboard is not
    installed.
    """
    p = Path(path)
    try:
        return _read(p)
    except _BadEventFile as e:
        raise UsageError(f"{p}: {e}") from None


def _read(path: Path) -> EventFileScalars:
    _, event_cls, make_ndarray, crc = _tensorboard()
    try:
        size = path.stat().st_size
        if size == 0:
            raise _BadEventFile("the file is empty (the writer was stopped before its first flush?)")
        offset, read, points, walls, tags = 0, 0, [], [], set()
        for record in _records(path):
            offset += len(record) + _RECORD_OVERHEAD
            read += 1
            try:
                event = event_cls.FromString(record)
            except Exception as e:  # noqa: BLE001 - protobuf's DecodeError: a record with a valid checksum
                raise _BadEventFile(f"record {read} is not a TensorBoard event ({type(e).__name__})") \
                    from None
            walls.append(event.wall_time)
            for value in event.summary.value:
                number = _scalar_value(value, make_ndarray)
                if number is not None:
                    tags.add(value.tag)
                    key = tensorboard_key(value.tag)
                    points.append(ScalarPoint(key, int(event.step), event.wall_time, number))
        _check_stop(path, offset, read, crc)
    except OSError as e:
        raise _BadEventFile(f"cannot be read ({e.strerror or e})") from None
    except (_BadEventFile, UsageError):
        raise
    except Exception as e:  # noqa: BLE001 - the reader's own errors (tensorboard's OpError): one line, not a traceback
        raise _BadEventFile(f"cannot be read ({type(e).__name__}: {e})") from None
    if read == 0:
        raise _BadEventFile(f"holds no complete event ({size:,} bytes)")
    return EventFileScalars(path, tuple(points), min(walls), max(walls), frozenset(tags))


def _event_files(folder: Path) -> list[Path]:
    try:
        return sorted(f for f in folder.iterdir() if is_event_file(f))
    except OSError:
        return []


def _walk(source: Path) -> Iterator[tuple[Path, list[Path]]]:
    """(folder, its event files) for ``source`` and every folder below it holding some; hidden
    folders and Torchscope runs are not entered."""
    for here, dirs, _ in os.walk(source):
        folder = Path(here)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not is_run_dir(folder / d))
        files = _event_files(folder)
        if files:
            yield folder, files


def _add_scalars_key(child: EventFileScalars, folder: Path) -> str | None:
    """The main tag when ``folder`` is an add_scalars folder (``<main_tag>_<tag>``, one tag: main_tag)."""
    if len(child.tags) != 1:
        return None
    (main,) = child.tags
    return main if folder.name.startswith(main.replace("/", "_") + "_") else None


def scan_event_runs(source: str | os.PathLike[str]) -> EventScan:
    """Find and read the TensorBoard runs under ``source`` (a folder, or one event file).

    Unreadable, empty and corrupt event files are listed in ``skipped`` with the reason; a
    folder left with no readable file makes no run. Raises UsageError when an event file is
    found and tensorboard is not installed.
    """
    root = Path(source)
    found = [(root.parent, [root])] if root.is_file() else list(_walk(root))
    read: dict[Path, list[EventFileScalars]] = {}
    skipped: list[Skipped] = []
    for folder, files in found:
        for f in files:
            try:
                scalars = _read(f)
            except _BadEventFile as e:
                skipped.append(Skipped(f, str(e)))
                continue
            read.setdefault(folder, []).append(scalars)
    merged = {folder: _merge(folder, parts) for folder, parts in read.items()}
    # Judged by where event files were found, so a parent whose own file is corrupt keeps its children.
    holders = {folder for folder, _ in found}
    children: dict[Path, list[tuple[Path, str]]] = {}
    for folder, scalars in merged.items():
        main = _add_scalars_key(scalars, folder) if folder != root and folder.parent in holders else None
        if main is not None:
            children.setdefault(folder.parent, []).append((folder, main))
    folded = {child for kids in children.values() for child, _ in kids}
    folders = [f for f, _ in found if f not in folded and (f in merged or f in children)]
    runs = [_event_run(folder, read, merged, children.get(folder, [])) for folder in folders]
    return EventScan(tuple(runs), tuple(skipped))


def _event_run(folder: Path, read: dict[Path, list[EventFileScalars]], merged: dict[Path, EventFileScalars],
               children: list[tuple[Path, str]]) -> EventRun:
    """The run of ``folder``, with its add_scalars ``children`` (folder, main tag) folded in."""
    parts = [merged[folder]] if folder in merged else []
    points = [p for own in parts for p in own.points]
    files = [s.path for s in read.get(folder, [])]
    for child, main in children:
        scalars = merged[child]
        key = tensorboard_key(f"{main}/{child.name[len(main.replace('/', '_')) + 1:]}")
        points += [ScalarPoint(key, p.step, p.wall_time, p.value) for p in scalars.points]
        parts.append(scalars)
        files += [s.path for s in read[child]]
    points.sort(key=lambda p: (p.step, p.wall_time))
    return EventRun(folder, tuple(files), tuple(points), min(s.first_wall_time for s in parts),
                    max(s.last_wall_time for s in parts))


def _merge(folder: Path, scalars: list[EventFileScalars]) -> EventFileScalars:
    """The event files of one folder as one (an add_scalars folder is judged by all its files)."""
    return EventFileScalars(folder, tuple(p for s in scalars for p in s.points),
                            min(s.first_wall_time for s in scalars), max(s.last_wall_time for s in scalars),
                            frozenset(t for s in scalars for t in s.tags))
