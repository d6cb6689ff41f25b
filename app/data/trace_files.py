"""Which files and folders hold profiler traces, decided by their content (data layer).

One definition shared by ``torchscope import``, ``torchscope ui --root`` (the tb-profiler mirror),
``torchscope diff`` and ``torchscope analyze`` (``app.data.trace.list_trace_paths``):

- a **trace file** is a ``*.json`` / ``*.json.gz`` file (Kineto writes ``*.pt.trace.json[.gz]``)
  whose first bytes are a Kineto/Chrome trace: a JSON object with a ``"traceEvents": [`` list, or,
  when the file is larger than what is sniffed, ``"schemaVersion"`` / ``"deviceProperties"`` (the
  fields Kineto writes before its events); or Chrome's array form, ``[{"ph": ...}, ...]``.
  Gzip is recognised by its magic bytes, as the parser does, and only the head is decompressed.
  Memory timelines (``*.memory_timeline*`` files, or ``[[time, action, bytes, category], ...]``
  records) and other JSON are not traces. A file small enough to be read whole
  (``FULL_CHECK_BYTES``) is also decoded: invalid JSON is refused, while a file that merely ends
  early (a job killed while writing) is still a trace, whose events the parser recovers;
- a **folder of traces** is a folder (not a Torchscope run) that holds trace files itself;
- a **log folder** (torch-tb-profiler's layout) holds no trace file itself but sub-folders that
  are folders of traces, one run each.
"""
from __future__ import annotations

import os
import re
import threading
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import msgspec

from app.data.safe_io import UnsafePath, resolve_inside
from profiler_agent.runformat import layout
from profiler_agent.runformat.reader import is_run_dir

__all__ = [
    "rank_from_name",
    "TRACE_SUFFIXES",
    "SNIFF_BYTES",
    "FULL_CHECK_BYTES",
    "Skipped",
    "FolderScan",
    "has_trace_suffix",
    "trace_file_problem",
    "is_trace_file",
    "scan_trace_folder",
    "find_trace_run_folders",
    "describe_traceless_folder",
    "describe_non_run_folder",
]

# Names like "rank-34.Jul_15...", "rank_3", "rank3", "host.rank7", "host_1234_rank7", "sampled_rank-1.json.gz":
# the habit of torchrun users and of the agent (runformat.layout.worker_name); "rank" must not follow a
# letter ("crank3" is no rank).
_RANK_RE = re.compile(r"(?:^|[^a-z])rank[-_]?(\d+)", re.IGNORECASE)


def rank_from_name(name: str) -> int | None:
    """Return the rank written in a file or worker name (``rank-3``, ``rank_3``, ``rank3``), else None."""
    m = _RANK_RE.search(name)
    return int(m.group(1)) if m else None


TRACE_SUFFIXES = (".json", ".json.gz")
# Decompressed bytes looked at to recognise a trace: Kineto's header (devices, distributed info)
# comes first and is a few KiB, though a job with many process groups can write more.
SNIFF_BYTES = 1 << 16
# A file whose decompressed text fits in this is decoded whole, so invalid JSON is caught before
# import (~5 ms); larger files are judged by their head and the parser reports the rest.
FULL_CHECK_BYTES = 1 << 20

_GZIP_MAGIC = b"\x1f\x8b"
_SPACE = b"\xef\xbb\xbf \t\r\n"
_EVENTS_LIST = re.compile(rb'"traceEvents"\s*:\s*\[')
_KINETO_HEADER = re.compile(rb'"(?:schemaVersion|deviceProperties)"\s*:')
_EVENT_FIELD = re.compile(rb'"(?:ph|ts)"\s*:')
_MEMORY_TIMELINE_NAME = ".memory_timeline"


@dataclass(frozen=True)
class Skipped:
    """A file or folder that was looked at and left out, and why (one phrase, for the user)."""

    path: Path
    reason: str


@dataclass(frozen=True)
class FolderScan:
    """The trace files of one folder (sorted by name) and its ``*.json[.gz]`` files that are not."""

    traces: tuple[Path, ...]
    skipped: tuple[Skipped, ...]


def has_trace_suffix(path: Path) -> bool:
    """True for a visible ``*.json`` / ``*.json.gz`` name other than a run's manifest."""
    name = path.name
    return not name.startswith(".") and name.endswith(TRACE_SUFFIXES) and name != layout.MANIFEST


def _read_text_head(path: Path, limit: int) -> tuple[bytes, bool]:
    """(up to ``limit`` decompressed bytes, whether that is the whole text). Raises OSError and
    zlib.error; a gzip stream that ends early gives what was written before the cut."""
    with path.open("rb") as f:
        raw = f.read(limit + 1)
        if raw[:2] != _GZIP_MAGIC:
            return raw[:limit], len(raw) <= limit
        dec = zlib.decompressobj(47)
        out = bytearray()
        while raw and len(out) <= limit:
            out += dec.decompress(raw, limit + 1 - len(out))
            if dec.unconsumed_tail:
                raw = dec.unconsumed_tail
            elif dec.eof and dec.unused_data:  # concatenated gzip members
                raw, dec = dec.unused_data, zlib.decompressobj(47)
            else:
                raw = f.read(1 << 16)
        return bytes(out[:limit]), len(out) <= limit and (dec.eof or not raw)


def _object_problem(head: bytes, whole: bool) -> str | None:
    if _EVENTS_LIST.search(head):
        return None if not whole else _decode_problem(head)
    if not whole and _KINETO_HEADER.search(head):
        return None
    if not whole:
        return (f"no \"traceEvents\", \"schemaVersion\" or \"deviceProperties\" in its first "
                f"{len(head) // 1024:,} KiB: not a Kineto/Chrome trace")
    problem = _decode_problem(head)
    if problem:
        return problem
    try:
        doc = msgspec.json.decode(head)
    except RecursionError:
        return "a JSON object without a \"traceEvents\" list, nested too deeply to read: not a profiler trace"
    keys = ", ".join(list(doc)[:5]) if isinstance(doc, dict) else ""
    return f"a JSON object without a \"traceEvents\" list (keys: {keys or 'none'}): not a profiler trace"


def _decode_problem(text: bytes) -> str | None:
    """Why ``text`` (a whole file) is not valid JSON; None when it is, or when it only ends early."""
    try:
        msgspec.json.decode(text, type=msgspec.Raw)  # checks the syntax without building objects
    except RecursionError:  # nested thousands deep: the parser drops such fields and says so
        return None
    except msgspec.DecodeError as e:
        if "truncated" in str(e):  # a job killed while writing: the parser recovers the events
            return None
        if "UTF-8" in str(e):  # the parser replaces bad bytes in names and warns
            return _decode_problem(text.decode("utf-8", errors="replace").encode())
        return f"invalid JSON ({str(e).removeprefix('JSON is malformed: ')})"
    return None


def _array_problem(body: bytes, whole: bool) -> str | None:
    if body[:1] == b"[":
        return ("a memory timeline ([time, action, bytes, category] records, export_memory_timeline), "
                "not a trace")
    if body[:1] == b"]":
        return "an empty JSON array: no trace events"
    if body[:1] != b"{" or not _EVENT_FIELD.search(body):
        return "a JSON array that is not a list of trace events"
    return _decode_problem(b"[" + body) if whole else None


def _sniff(path: Path) -> str | None:
    if _MEMORY_TIMELINE_NAME in path.name:
        return "a memory timeline (export_memory_timeline), not a trace"
    try:
        small = path.stat().st_size <= FULL_CHECK_BYTES
        head, whole = _read_text_head(path, FULL_CHECK_BYTES if small else SNIFF_BYTES)
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    except zlib.error as e:
        return f"corrupt gzip data ({e})"
    text = head.lstrip(_SPACE)
    if not text:
        return "the file is empty"
    if text[:1] == b"{":
        return _object_problem(text, whole)
    if text[:1] == b"[":
        return _array_problem(text[1:].lstrip(_SPACE), whole)
    shown = text[:12].decode("utf-8", errors="replace")
    return f"not JSON (starts with {shown!r})"


class _SniffCache:
    """Verdicts by (path, size, mtime): the Runs page lists a log folder on every rerun."""

    def __init__(self, max_entries: int = 4096) -> None:
        self._data: OrderedDict[tuple[str, int, int], str | None] = OrderedDict()
        self._max = max_entries
        self._lock = threading.Lock()

    def problem(self, path: Path) -> str | None:
        try:
            st = path.stat()
        except OSError as e:
            return f"cannot be read ({e.strerror or e})"
        key = (str(path), st.st_size, st.st_mtime_ns)
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        verdict = _sniff(path)
        with self._lock:
            self._data[key] = verdict
            while len(self._data) > self._max:
                self._data.popitem(last=False)
        return verdict


_CACHE = _SniffCache()


def trace_file_problem(path: str | os.PathLike[str]) -> str | None:
    """Return None when ``path`` is a Kineto/Chrome trace file (see the module docstring), else
    why it is not, as a phrase to show after the file's name. Never raises."""
    p = Path(path)
    if not p.is_file():
        return "not a file"
    if not has_trace_suffix(p):
        return f"not a trace file (expected {' or '.join('*' + s for s in TRACE_SUFFIXES)})"
    return _CACHE.problem(p)


def is_trace_file(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a Kineto/Chrome trace file (see :func:`trace_file_problem`)."""
    return trace_file_problem(path) is None


def scan_trace_folder(folder: str | os.PathLike[str]) -> FolderScan:
    """Sort the ``*.json[.gz]`` files directly in ``folder`` into traces and skipped files.
    An unreadable folder holds nothing."""
    try:
        files = sorted(f for f in Path(folder).iterdir() if f.is_file() and has_trace_suffix(f))
    except OSError:
        return FolderScan((), ())
    traces, skipped = [], []
    for f in files:
        problem = _outside(Path(folder), f) or _CACHE.problem(f)
        if problem is None:
            traces.append(f)
        else:
            skipped.append(Skipped(f, problem))
    return FolderScan(tuple(traces), tuple(skipped))


def _outside(folder: Path, f: Path) -> str | None:
    """Why ``f`` is not read: a symlink (or one on the way) out of ``folder``; None when it stays inside."""
    try:
        resolve_inside(folder, f)
    except UnsafePath:
        return f"a link to a file outside {folder}; not followed"
    return None


def _holds_a_trace(folder: Path) -> bool:
    try:
        return any(f.is_file() and has_trace_suffix(f) and _outside(folder, f) is None and _CACHE.problem(f) is None
                   for f in folder.iterdir())
    except OSError:
        return False


def find_trace_run_folders(folder: str | os.PathLike[str]) -> list[Path]:
    """Return the sub-folders of ``folder`` that are folders of traces (one run each), sorted by
    name; hidden folders and Torchscope runs are not. [] when ``folder`` is not a folder or is a run.

    Whether ``folder`` holds trace files itself is not looked at: a run store may hold native
    runs and tb-profiler sub-folders side by side (callers that treat a folder with its own traces
    as one run check :func:`scan_trace_folder` first).
    """
    p = Path(folder)
    if not p.is_dir() or is_run_dir(p):
        return []
    try:
        children = sorted(p.iterdir())
    except OSError:
        return []
    return [c for c in children
            if c.is_dir() and not c.name.startswith(".") and not is_run_dir(c) and _holds_a_trace(c)]


def describe_traceless_folder(folder: str | os.PathLike[str]) -> str:
    """Why ``folder`` is not a folder of traces: "no trace files …", or which of its
    ``*.json[.gz]`` files is not a trace and why. "" when it is one."""
    scan = scan_trace_folder(folder)
    if scan.traces:
        return ""
    if not scan.skipped:
        return "no trace files (*.json or *.json.gz) in it"
    first = scan.skipped[0]
    more = f" and {len(scan.skipped) - 1} more" if len(scan.skipped) > 1 else ""
    return (f"none of its {len(scan.skipped)} *.json[.gz] file(s) is a profiler trace "
            f"({first.path.name}: {first.reason}{more})")


def describe_non_run_folder(folder: str | os.PathLike[str]) -> str:
    """Why ``folder``, a sub-folder of a store without a run manifest, was skipped: the phrase
    after its name in the store's problems."""
    why = f"not a run folder (no {layout.MANIFEST})"
    traceless = describe_traceless_folder(folder)
    if not traceless:
        return f"{why}; it holds trace files, listed as a torch-tb-profiler run"
    return f"{why} and {traceless}; skipped"
