"""The store's change journal read back, and compacted (data layer, stdlib only).

Every writer function of the run format announces a change of a run's run.json, metrics.jsonl or
system.jsonl with a line ``"<time_ns> <run folder>\\n"`` appended to ``<store>/.torchscope/journal``
(profiler_agent.runformat.writer.note_run_changed, one line before the change and one after). The
file starts with a header line, ``layout.JOURNAL_MAGIC`` and a random token, which names this
journal: a journal deleted and made again, or compacted, has another token.

A listing remembers, in its catalog index, the token and how many bytes of the journal it has
consumed (:class:`JournalState`). :func:`read_tail` reads what was appended since and returns the
folders it names; a line is consumed only once it is older than :data:`GRACE_NS`, so that the
change it announces (a line written before an atomic rewrite) is complete when the line is
dropped, even if its writer died before writing its second line. What cannot be trusted makes the
listing check every run (``full``): no state yet, another token (the journal deleted, replaced, or
compacted by another index's owner), a journal shorter than what was consumed, a line that does not
parse or names no folder, a last line without its newline (not consumed: a crash mid-write).

:func:`compact` replaces a journal whose every line was consumed by a new, empty one: it is called
by the listing that holds the index's write lock, and lines appended to the old file meanwhile are
copied into the new one (a writer that wrote into the old file after that sees the file replaced
and writes its line again: note_run_changed).
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import NamedTuple

from profiler_agent.runformat import layout

__all__ = ["GRACE_NS", "COMPACT_BYTES", "JournalState", "Tail", "journal_path", "read_tail", "compact"]

# A line is consumed (no longer re-checked) once it is this old. A writer's change follows its first
# line within milliseconds (an fsync'd atomic rewrite); a minute leaves room for a slow disk.
GRACE_NS = 60 * 1_000_000_000
# A journal whose every line was consumed is replaced by an empty one past this size (~6,000 lines).
COMPACT_BYTES = 256 * 1024
_BAD = "!"  # the token of a journal whose header does not parse: never trusted


class JournalState(NamedTuple):
    """Which journal (its header token; "" when there was none) and how many of its bytes a listing consumed."""

    token: str
    offset: int


class Tail(NamedTuple):
    """What :func:`read_tail` found.

    ``state``: what the listing stores once its entries are written (the lines consumed);
    ``end``: the journal's size as read; ``folders``: the run folders named since the stored state
    (young lines included); ``full``: the journal cannot say what changed, check every run;
    ``pending``: lines younger than GRACE_NS are left (their runs are checked again next time)."""

    state: JournalState
    end: int
    folders: frozenset[str]
    full: bool
    pending: bool

    def unchanged_since(self, stored: JournalState | None) -> bool:
        """Nothing was appended since ``stored`` and nothing is left to check."""
        return (stored is not None and not self.full and not self.pending and not self.folders
                and self.state == stored and self.end == stored.offset)


def journal_path(store_root: str | os.PathLike[str]) -> str:
    return os.path.join(os.fspath(store_root), layout.JOURNAL)


def _token(header: bytes) -> str:
    magic = layout.JOURNAL_MAGIC.encode()
    if not header.startswith(magic) or not header.endswith(b"\n"):
        return _BAD
    token = header[len(magic):-1]
    return token.decode("ascii") if token and token.isalnum() and token.isascii() else _BAD


def read_tail(store_root: str | os.PathLike[str], stored: JournalState | None, *, now_ns: int | None = None) -> Tail:
    """The journal of the store ``store_root`` read from ``stored`` on (see the module docstring)."""
    path = journal_path(store_root)
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        none = JournalState("", 0)
        return Tail(none, 0, frozenset(), stored != none, False)
    except OSError:
        return Tail(JournalState(_BAD, 0), 0, frozenset(), True, False)
    with f:
        header = f.readline(256)
        token = _token(header)
        start = len(header)
        size = os.fstat(f.fileno()).st_size
        trusted = (token != _BAD and stored is not None and stored.token == token
                   and start <= stored.offset <= size)
        if trusted:
            f.seek(stored.offset)  # type: ignore[union-attr]
            start = stored.offset  # type: ignore[union-attr]
        data = f.read()
    end = start + len(data)
    full = not trusted
    if token == _BAD:
        return Tail(JournalState(_BAD, end), end, frozenset(), True, False)
    limit = (time.time_ns() if now_ns is None else now_ns) - GRACE_NS
    folders: set[str] = set()
    consumed = start
    pending = False
    pos = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        if nl < 0:  # a last line without its newline: a crash mid-write; not consumed, so checked again
            full = pending = True
            break
        line = data[pos:nl]
        pos = nl + 1
        stamp, _, name = line.partition(b" ")
        try:
            when = int(stamp)
        except ValueError:
            when = None
        if when is None or not name or b"/" in name or name in (b".", b".."):
            full = True  # cannot say which run: every run is checked (then the line is consumed)
        else:
            folders.add(name.decode("utf-8", "surrogateescape"))
        if when is not None and when > limit:
            pending = True
        if not pending:
            consumed = start + pos
    return Tail(JournalState(token, consumed), end, frozenset(folders), full, pending)


def compact(store_root: str | os.PathLike[str], state: JournalState) -> JournalState | None:
    """Replace the journal, every byte of which up to ``state.offset`` was consumed, by a new one with
    a new token, holding the lines appended since; the new state, or None when not done (another
    journal there, no rights). Call it with the index's write lock held."""
    path = journal_path(store_root)
    try:
        old = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError:
        return None
    tmp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    with old:
        if state.token == "" or _token(old.readline(256)) != state.token:
            return None
        header = f"{layout.JOURNAL_MAGIC}{os.urandom(8).hex()}\n".encode()
        try:
            with open(tmp, "xb") as f:
                f.write(header)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            return None
        old.seek(state.offset)
        late = old.read()
    late = late[:late.rfind(b"\n") + 1]  # whole lines only (a torn one was never a line)
    if late:
        with contextlib.suppress(OSError):
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, late)
            finally:
                os.close(fd)
    return JournalState(header[len(layout.JOURNAL_MAGIC):-1].decode(), len(header))
