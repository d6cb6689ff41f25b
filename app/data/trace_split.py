"""One big uncompressed trace parsed by two processes at once (data layer).

A cold ``torchscope analyze`` of one trace file spends most of its time in one core: the imports
(pandas, the analysis), then the parse. When the file is big and uncompressed, ``start`` cuts it at
an event boundary and forks a child that parses the tail while this process goes on (its imports,
and the head: ``parse_head``, from the command's main thread while another imports, or when the
tables are taken). The child streams each piece's tables as Arrow IPC into a file per kind, and
reports the bytes it has read through a shared page (the progress bar counts both parts). Two ways to
take them:

- a trace read whole (up to ``trace.IN_MEMORY_BYTES``): ``take`` maps the child's tables (anonymous
  memory files: no copy, no file on disk) and joins them (``trace_parse.join_parts``) into the
  tables one pass over the whole file gives;
- a bigger trace, streamed in bounded memory: the child's streams are lz4-compressed temporary files
  on disk, the head is parsed into spilled tables (app.data.trace_spill), and ``take_spilled`` adds
  the child's record batches to them one at a time (``trace_parse.join_spilled``): the pieces one
  spilled pass over the whole file gives.

The split is only an optimisation and never changes a result: a part is made into a trace of its own
(the head closed with ``]}``, the tail opened with ``{"traceEvents":[``), and when either part has
anything to say (any warning: a cut that was not a real boundary always gives one, since its head
then ends inside an unclosed value), when the child fails, or when the file changed, ``take`` returns
None and the caller parses the whole file itself, as without a split. It is used only where a fork
is safe and pays: POSIX with ``memfd_create``, one thread in the process, two cores or more, and a
core idle (by the 1-minute load average, or by the threads running right now: ``_can_fork``).
"""
from __future__ import annotations

import atexit
import importlib.abc
import math
import mmap
import os
import pickle
import re
import signal
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.data.trace_kinds import Progress
from app.errors import TraceError

if TYPE_CHECKING:
    from app.data.trace_parse import ParsedTrace

__all__ = ["SPLIT_MIN_BYTES", "TAIL_SHARE", "SPILL_TAIL_SHARE", "IDLE_MARGIN", "SWITCH_ENV", "start", "parse_head",
           "take", "take_spilled", "cancel_all"]

# Below this the split's own costs (the fork, a second pass's setup, the join) are not won back.
SPLIT_MIN_BYTES = 24 << 20
# The share of the file the child parses: it starts while this process still imports pandas and the
# analysis (~0.35 s), so it takes the larger part (measured: benchmarks/README.md, issue 13 wave 10).
TAIL_SHARE = 0.6
# The same for a trace streamed in bounded memory (above the caller's in-memory size): this process
# spills its head while it imports, then adds the child's pieces to its own (``take_spilled``, ~0.13 s
# at 300 MB). At 0.5 the head ended ~0.3 s after the child at 300 MB; 0.65 evens them out.
SPILL_TAIL_SHARE = 0.65
# No split when the 1-minute load average and the threads running now are both above the cores less
# this: no core is idle (_can_fork).
IDLE_MARGIN = 0.25
SWITCH_ENV = "TORCHSCOPE_SPLIT_PARSE"  # "0": never split (one process, the lower summed peak)
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_WINDOW = 1 << 20  # where the boundary after the cut point is looked for
_READ = 1 << 20  # bytes read at a time, as trace_pieces reads a plain file
_OPEN, _CLOSE = b'{"traceEvents":[', b"]}"
_PIECE_KINDS = ("events", "memory", "flows", "threads")
_INFO = "info"  # the memory file of the child's counters, metadata and status
_DONE = struct.Struct("q")  # the child's bytes read so far, in a page shared across the fork


@dataclass
class _Child:
    stat: tuple[int, int, int]
    cut: int  # the head is bytes [0, cut): it ends with an event's "}"
    pid: int
    fds: dict[str, int]  # the files the child writes into: one per table kind, and _INFO
    spill: bool  # a streamed trace: the head is spilled, the child's tables are compressed, on disk
    done: mmap.mmap  # the child's progress (_DONE)
    head: tuple[ParsedTrace, list[dict[str, Any]]] | None = None  # parsed ahead of take (parse_head)
    head_done: bool = False  # the head is parsed (ahead, or by take)

    def progress(self) -> int:
        """Bytes of the file parsed so far: the child's, and the head's once it is parsed."""
        return int(_DONE.unpack_from(self.done)[0]) + (self.cut if self.head_done else 0)


_started: dict[str, _Child] = {}
_lock = threading.Lock()


def _key(path: Path) -> str:
    return os.path.realpath(path)


def _stat(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns, st.st_ino


def _can_fork() -> bool:
    """Whether a fork is safe (one thread, POSIX) and pays: a core is idle. The split costs ~0.2 s
    more CPU than one pass at 100 MB (pages copied after the fork, two parses sharing caches and
    memory bandwidth, the join), so with every core busy it would be slower. Busy: the 1-minute
    load average within IDLE_MARGIN of the cores, unless fewer threads than that run right now. The
    average lags: for a minute after a training job (or the benchmark's previous case) ends it
    still counts it, while the cores are idle."""
    if os.environ.get(SWITCH_ENV) == "0":  # the user prefers one process (memory over wall time)
        return False
    if not hasattr(os, "fork") or not hasattr(os, "memfd_create") or threading.active_count() != 1:
        return False
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return cores >= 2 and min(os.getloadavg()[0], _others_running()) < cores - IDLE_MARGIN


def _others_running() -> float:
    """Threads that other processes have running or ready to run right now (Linux: the running count
    of ``/proc/loadavg``, less this thread); infinity where it cannot be read."""
    try:
        with open("/proc/loadavg", "rb") as f:
            return int(f.read().split()[3].split(b"/")[0]) - 1
    except (OSError, ValueError, IndexError):
        return math.inf


def _cut(path: Path, size: int, share: float) -> tuple[int, int] | None:
    """(end of the head, start of the tail's first event), or None when the file does not look like
    a trace object whose events can be cut (the parse then goes as usual)."""
    from app.data.trace_envelope import find_start

    with path.open("rb") as f:
        head = f.read(1 << 16)
        try:
            start = find_start(head)
        except (ValueError, TraceError):  # not a trace, a memory timeline: the whole-file parse says so
            return None
        if start is None or not start[1]:  # a bare array of events, or a huge header: not split
            return None
        at = int(size * (1 - share))
        f.seek(at)
        window = f.read(_WINDOW)
    m = _BOUNDARY.search(window)
    if m is None:
        return None
    return at + m.start() + 1, at + m.end() - 1


def start(path: Path, in_memory_bytes: int) -> bool:
    """Fork a child that parses the tail of the trace file ``path`` (uncompressed, at least
    ``SPLIT_MIN_BYTES``), when this process may fork; True when one was started. The caller's next
    parse of ``path`` then reads only the head: ``take`` for a file of at most ``in_memory_bytes``
    (its tables whole in memory), ``take_spilled`` for a bigger one (streamed in bounded memory:
    the child's tables go compressed to a temporary file, as the one-pass spill keeps its pieces)."""
    if not _can_fork():
        return False
    try:
        stat = _stat(path)
        if stat[0] < SPLIT_MIN_BYTES:
            return False
        with path.open("rb") as f:
            if f.read(2) == b"\x1f\x8b":
                return False
        spill = stat[0] > in_memory_bytes
        where = _cut(path, stat[0], SPILL_TAIL_SHARE if spill else TAIL_SHARE)
    except OSError:
        return False
    if where is None:
        return False
    cut, tail_from = where
    # The modules the child parses with (numpy, pyarrow, the parser: ~0.2 s of a core) are imported
    # here, before the fork: the child inherits them instead of importing them again, and this process
    # needs them for its own part anyway. A cold analyze at 100 MB: 0.89x the wall time of importing
    # them after the fork (benchmarks/README.md, issue 13 wave 18).
    import app.data.trace_parse  # noqa: F401

    fds: dict[str, int] = {}
    try:
        for kind in _PIECE_KINDS:
            fds[kind] = _disk_file() if spill else os.memfd_create(f"torchscope-trace-{kind}")
        fds[_INFO] = os.memfd_create(f"torchscope-trace-{_INFO}")
    except OSError:  # no room or no temporary folder: parsed in one pass, as without a split
        for fd in fds.values():
            os.close(fd)
        return False
    done = mmap.mmap(-1, _DONE.size)  # anonymous and shared: the child's writes are seen here
    pid = os.fork()
    if pid == 0:  # the child: parse, write, and leave without running the parent's exit handlers
        code = 1
        try:
            _child(path, tail_from, fds, spill, done)
            code = 0
        finally:
            os._exit(code)
    with _lock:
        if not _started:
            atexit.register(cancel_all)
        old = _started.pop(_key(path), None)
        _started[_key(path)] = _Child(stat, cut, pid, fds, spill, done)
    if old is not None:
        _cancel(old)
    return True


def _pieces(path: Path, lo: int, hi: int | None, progress: Progress | None = None) -> Iterator[bytes]:
    with path.open("rb") as f:
        f.seek(lo)
        done = lo
        while hi is None or done < hi:
            raw = f.read(_READ if hi is None else min(_READ, hi - done))
            if not raw:
                break
            done += len(raw)
            if progress is not None:
                progress(done, done)
            yield raw


def _disk_file() -> int:
    """An anonymous temporary file in the temporary folder (where trace_spill keeps its pieces)."""
    fd, name = tempfile.mkstemp(prefix="torchscope-split-")
    os.unlink(name)
    return fd


def _tail_pieces(path: Path, tail_from: int, done: mmap.mmap) -> Iterator[bytes]:
    yield _OPEN
    yield from _pieces(path, tail_from, None, lambda d, _t: _DONE.pack_into(done, 0, d - tail_from))


def _head_pieces(child: _Child, path: Path, progress: Progress | None) -> Iterator[bytes]:
    size = child.stat[0]
    report = None if progress is None else (lambda d, _t: progress(d + child.progress(), size))
    yield from _pieces(path, 0, child.cut, report)
    yield _CLOSE


class _NoPandas(importlib.abc.MetaPathFinder):
    """pyarrow imports pandas on its first conversion of Python objects (to recognise a Series):
    ~0.35 s and ~45 MB that the child, which makes no DataFrame, does without."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname.partition(".")[0] == "pandas":
            raise ImportError("pandas is not needed to parse a part of a trace")
        return None


def _child(path: Path, tail_from: int, fds: dict[str, int], spill: bool, done: mmap.mmap) -> None:
    """Parse the tail; each piece's tables are streamed into its kind's file as they are made
    (Arrow IPC; a stream may change its dictionaries), so the child never holds its tables whole.
    For a streamed trace (``spill``) the files are on disk and the stream is lz4-compressed."""
    sys.meta_path.insert(0, _NoPandas())
    import pyarrow as pa

    from app.data.trace_parse import parse_trace_part

    pa.set_memory_pool(pa.system_memory_pool())  # as trace.system_memory_pool: a lower peak
    files = {kind: os.fdopen(fd, "wb", closefd=False) for kind, fd in fds.items()}
    writers: dict[str, pa.ipc.RecordBatchStreamWriter] = {}
    options = pa.ipc.IpcWriteOptions(compression="lz4") if spill else None

    def emit(kind: str, table: pa.Table) -> None:
        if kind not in writers:
            writers[kind] = pa.ipc.new_stream(files[kind], table.schema, options=options)
        writers[kind].write_table(table)

    out, rows = parse_trace_part(path, _tail_pieces(path, tail_from, done), emit=emit)
    for w in writers.values():
        w.close()
    for f in files.values():
        f.flush()
    with os.fdopen(fds[_INFO], "wb", closefd=False) as f:
        f.write(pickle.dumps({"ok": not out.warnings, "meta": out.meta, "rows": rows, "n_events": out.n_events,
                              "kinds": sorted(writers)}, protocol=pickle.HIGHEST_PROTOCOL))


def _read_info(fds: dict[str, int]) -> dict[str, Any] | None:
    """What the child says of its part (metadata, counter rows, events, the kinds it wrote), or None
    when it had anything to say (a warning) or said nothing."""
    with os.fdopen(os.dup(fds[_INFO]), "rb") as f:
        f.seek(0)
        data = f.read()
    if not data:
        return None
    info = pickle.loads(data)
    return info if info["ok"] else None


def _stream(fd: int) -> Any:
    """The Arrow IPC stream the child wrote into ``fd``, read from a mapping of it (no copy: the
    tables' buffers point into the mapping, which lives as long as they do)."""
    import pyarrow as pa

    mm = mmap.mmap(fd, os.fstat(fd).st_size, prot=mmap.PROT_READ)
    return pa.ipc.open_stream(pa.py_buffer(mm))


def _read_tail(fds: dict[str, int]) -> tuple[ParsedTrace, list[dict[str, Any]]] | None:
    from app.data.trace_parse import ParsedTrace

    info = _read_info(fds)
    if info is None:
        return None
    out = ParsedTrace(meta=info["meta"], n_events=info["n_events"])
    for kind in info["kinds"]:
        setattr(out, kind, _stream(fds[kind]).read_all())
    return out, info["rows"]


def _wait(child: _Child, progress: Progress | None) -> bool:
    """Wait for the child to end (saying how far it got meanwhile); whether it succeeded."""
    if progress is None:
        _, status = os.waitpid(child.pid, 0)
    else:
        while True:
            pid, status = os.waitpid(child.pid, os.WNOHANG)
            if pid:
                break
            progress(child.progress(), child.stat[0])
            time.sleep(0.01)
    child.pid = 0
    return os.waitstatus_to_exitcode(status) == 0


def parse_head(path: Path, progress: Progress | None = None) -> None:
    """Parse the head of ``path`` now, ahead of ``take`` (which then only waits for the child and
    joins), when ``start`` forked a child for it. For a caller with other work for the interpreter
    meanwhile: the C accelerator reads each piece without the GIL, so another thread's imports go on
    during the head's parse. A failure here is left for ``take`` (it parses the head again)."""
    with _lock:
        child = _started.get(_key(path))
    if child is None or child.head is not None:
        return
    from app.data.trace_parse import parse_trace_part

    try:
        child.head = parse_trace_part(path, _head_pieces(child, path, progress), spill=child.spill)
        child.head_done = True
    except Exception:  # noqa: BLE001 - an optimisation only: take reads the head again and reports
        child.head = None


def take(path: Path, progress: Progress | None = None) -> ParsedTrace | None:
    """The tables of ``path`` when ``start`` forked a child for it: this process parses the head
    and joins the child's tail. None when no child was started for this file, or when the split
    cannot stand for the whole file (then parse it whole, as usual)."""
    return _take(path, progress, spill=False)


def take_spilled(path: Path, progress: Progress | None = None) -> ParsedTrace | None:
    """``take`` for a streamed trace (bigger than ``start``'s in-memory size): the head is parsed
    into spilled tables (``trace_spill``), then the child's pieces are added to them in order, read
    a record batch at a time from its compressed file, so that memory stays bounded. The result is
    what ``parse_trace_file(path, spill=True)`` gives. None as for ``take``."""
    return _take(path, progress, spill=True)


def _take(path: Path, progress: Progress | None, *, spill: bool) -> ParsedTrace | None:
    child = _claim(path, spill=spill)
    if child is None:
        return None
    head = None
    try:
        head, head_rows = _head(child, path, progress)
        if head.warnings or not _wait(child, progress):
            return None
        joined = (_join_spilled if spill else _join)(child, head, head_rows)
        if joined is None:
            return None
        head = None  # the joined trace holds the head's tables now (a spilled head's files too)
        if progress is not None:
            progress(child.stat[0], child.stat[0])
        return joined
    except Exception:  # noqa: BLE001 - an optimisation only: the whole-file parse reports any problem
        return None
    finally:
        if head is not None:
            _close_spilled(head)
        _cancel(child)


def _join(child: _Child, head: ParsedTrace, head_rows: list[dict[str, Any]]) -> ParsedTrace | None:
    from app.data.trace_parse import join_parts

    tail = _read_tail(child.fds)
    return None if tail is None else join_parts(head, head_rows, *tail)


def _join_spilled(child: _Child, head: ParsedTrace, head_rows: list[dict[str, Any]]) -> ParsedTrace | None:
    from app.data.trace_parse import join_spilled

    info = _read_info(child.fds)
    if info is None:
        return None
    tables = {kind: _stream(child.fds[kind]) for kind in info["kinds"]}
    return join_spilled(head, head_rows, tables, info["meta"], info["n_events"], info["rows"])


def _claim(path: Path, *, spill: bool) -> _Child | None:
    """The child started for ``path`` with that kind of parse, taken off the list; None when there
    is none, or the file changed since (then it is stopped)."""
    with _lock:
        child = _started.pop(_key(path), None)
    if child is None:
        return None
    try:
        if child.spill == spill and _stat(path) == child.stat:
            return child
    except OSError:
        pass
    _cancel(child)
    return None


def _head(child: _Child, path: Path, progress: Progress | None) -> tuple[ParsedTrace, list[dict[str, Any]]]:
    """The head's tables: parsed ahead (``parse_head``), else now."""
    from app.data.trace_parse import parse_trace_part

    if child.head is not None:
        head, child.head = child.head, None
        return head
    head = parse_trace_part(path, _head_pieces(child, path, progress), spill=child.spill)
    child.head_done = True
    return head


def _close_spilled(parsed: ParsedTrace) -> None:
    for table in (parsed.spilled or {}).values():
        table.close()


def _cancel(child: _Child) -> None:
    if child.pid:
        try:
            os.kill(child.pid, signal.SIGKILL)
            os.waitpid(child.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        child.pid = 0
    for fd in child.fds.values():
        os.close(fd)
    child.fds = {}
    child.done.close()
    if child.head is not None:  # parsed ahead, never taken
        _close_spilled(child.head[0])
        child.head = None


def cancel_all() -> None:
    """Stop and reap every child whose tables were not taken (at exit, or a test's teardown)."""
    with _lock:
        children = list(_started.values())
        _started.clear()
    for child in children:
        _cancel(child)
