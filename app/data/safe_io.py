"""Safe reading of run files: no symlink out of the run folder, no unbounded inflate (data layer).

Two hostile inputs every reader of a run must survive:

- **A link out of the run.** A run folder planted by someone else (or a copied one) can hold
  ``logs/stdout.log -> /etc/passwd``. :func:`resolve_inside` resolves a path and refuses it
  (:class:`UnsafePath`) when it, or a symlink on the way, points outside the folder;
  :func:`open_inside` opens it without following a link out (the final component is opened
  with ``O_NOFOLLOW`` after resolving, and on Linux the opened descriptor's real path is checked
  again, so a link swapped in between the check and the open is refused too).
- **A decompression bomb.** A 3 MB gzip can inflate to 1.5 GB. :func:`iter_limited` inflates a
  plain or gzip file in bounded chunks and raises :class:`InflateLimit` as soon as the inflated
  size passes the limit; :func:`read_limited` joins those chunks for readers that need the whole
  text. The limit is :func:`inflate_limit_bytes`: ``TORCHSCOPE_MAX_INFLATE_MB`` (MiB) or
  :data:`DEFAULT_MAX_INFLATE_MB`.

Errors (both are project errors, so front ends show their message, and ValueErrors)::

    TorchscopeError
     ├── UnsafePath       a path leaves its folder (names the file and the folder)
     └── InflateLimit     a file inflates beyond the limit (names the file, the limit, the variable)

The default, 2048 MiB: far above any artifact a real job writes for one file here (the largest
Kineto traces torch-tb-profiler and Perfetto open comfortably are a few hundred MB inflated;
allocator snapshots of large CUDA jobs are tens to hundreds of MB), and low enough that one
hostile file cannot take a machine's memory: streaming readers keep far less than what they
inflate, and the readers that keep the whole text (a snapshot pickle) stop at 2 GiB.
"""
from __future__ import annotations

import errno
import io
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from app.errors import UsageError
from profiler_agent.runformat.errors import CorruptFileError, TorchscopeError

__all__ = [
    "UnsafePath",
    "InflateLimit",
    "DEFAULT_MAX_INFLATE_MB",
    "MAX_INFLATE_ENV",
    "inflate_limit_bytes",
    "resolve_inside",
    "open_inside",
    "iter_limited",
    "iter_stream_limited",
    "read_limited",
]

MAX_INFLATE_ENV = "TORCHSCOPE_MAX_INFLATE_MB"
DEFAULT_MAX_INFLATE_MB = 2048

_GZIP_MAGIC = b"\x1f\x8b"
_GZIP_OR_ZLIB = 47  # zlib's wbits for "gzip or zlib header, 32 KiB window"
_READ_BYTES = 1 << 16  # compressed bytes read at a time
_CHUNK_BYTES = 1 << 20  # most inflated bytes produced by one decompress call
_MIB = 1 << 20


class UnsafePath(TorchscopeError, ValueError):
    """A path that leaves its folder (itself or through a symlink); names the file and the folder."""


class InflateLimit(TorchscopeError, ValueError):
    """A file that inflates beyond the limit; names the file, the limit and how to raise it."""

    def __init__(self, path: Path | str, limit: int) -> None:
        self.path = Path(path)
        self.limit = limit
        super().__init__(
            f"{path}: inflates to more than {_format_limit(limit)}, the limit on what Torchscope "
            f"decompresses from one file (a decompression bomb?); to read it, raise the limit with "
            f"{MAX_INFLATE_ENV}=<MiB> (now {_format_limit(inflate_limit_bytes())})"
        )


def _format_limit(limit: int) -> str:
    return f"{limit / _MIB:,.0f} MiB" if limit >= _MIB else f"{limit:,} bytes"


def inflate_limit_bytes() -> int:
    """The most bytes a reader inflates from one file: ``TORCHSCOPE_MAX_INFLATE_MB`` MiB, else
    :data:`DEFAULT_MAX_INFLATE_MB`. Raises UsageError when the variable is not a positive number."""
    text = os.environ.get(MAX_INFLATE_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_INFLATE_MB * _MIB
    try:
        mib = float(text)
    except ValueError:
        mib = float("nan")
    if not mib > 0 or mib == float("inf"):
        raise UsageError(f"{MAX_INFLATE_ENV}={text!r}: expected a positive number of MiB "
                         f"(default {DEFAULT_MAX_INFLATE_MB})")
    return max(1, int(mib * _MIB))


def _is_inside(path: Path, folder: Path) -> bool:
    return path == folder or path.is_relative_to(folder)


def _spelled_through(folder: Path, path: Path) -> bool:
    """True when the relative ``path`` is written through the relative ``folder`` (``runs/a`` and
    ``runs/a/trace.json``, ``../t`` and ``../t/x.json``): a path a caller built from the folder,
    not one taken under it."""
    return not folder.is_absolute() and len(path.parts) > len(folder.parts) > 0 and \
        path.parts[:len(folder.parts)] == folder.parts


def resolve_inside(folder: Path, path: Path | str) -> Path:
    """The resolved ``path`` (relative paths are taken under ``folder``, except one written through a
    relative ``folder`` itself, ``folder / name``), checked to lie inside the resolved ``folder``. Raises UnsafePath when it, or a symlink on the way, points outside, or
    when its symlinks loop."""
    try:
        base = Path(folder).resolve()
        p = Path(path)
        if not p.is_absolute() and _spelled_through(Path(folder), p):
            p = p.absolute()  # `folder / name` with a relative folder: taken from here, not doubled
        target = (p if p.is_absolute() else base / p).resolve()
    except (OSError, RuntimeError) as e:  # RuntimeError: a symlink loop (Python < 3.13)
        raise UnsafePath(f"{path}: cannot be resolved inside {folder} ({e})") from None
    if not _is_inside(target, base):
        raise UnsafePath(f"{path}: points outside {folder} (to {target}); not followed")
    return target


def open_inside(folder: Path, path: Path | str, mode: str = "rb") -> BinaryIO:
    """Open ``path`` for reading (``"rb"``) without following a symlink out of ``folder``.
    Raises UnsafePath (a link out, or a link swapped in after the check), OSError (missing,
    unreadable) and ValueError (a mode other than ``"rb"``)."""
    if mode != "rb":
        raise ValueError(f"open_inside opens for reading only (mode 'rb'), not {mode!r}")
    target = resolve_inside(folder, path)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(target, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafePath(f"{path}: became a symlink after it was checked; not followed") from None
        raise
    try:
        proc = Path(f"/proc/self/fd/{fd}")
        if proc.parent.is_dir():
            real = Path(os.readlink(proc))
            if not _is_inside(real, Path(folder).resolve()):
                raise UnsafePath(f"{path}: points outside {folder} (to {real}); not followed")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _open(path: Path, folder: Path | None) -> BinaryIO:
    if folder is not None:
        return open_inside(folder, path)
    return open(path, "rb")


def iter_limited(path: Path, limit: int | None = None, *, folder: Path | None = None,
                 chunk_bytes: int = _CHUNK_BYTES) -> Iterator[bytes]:
    """Yield the bytes of ``path`` (gzip, by its magic bytes, is inflated; concatenated members
    too) in chunks of at most ``chunk_bytes``. Raises InflateLimit once more than ``limit`` bytes
    (default :func:`inflate_limit_bytes`) would be yielded, CorruptFileError for corrupt or
    truncated gzip data, OSError, and UnsafePath when ``folder`` is given and the file leaves it."""
    with _open(path, folder) as f:
        yield from iter_stream_limited(f, path, limit, chunk_bytes=chunk_bytes)


def iter_stream_limited(f: BinaryIO, name: Path | str, limit: int | None = None, *,
                        chunk_bytes: int = _CHUNK_BYTES) -> Iterator[bytes]:
    """:func:`iter_limited` for an open binary file (an upload, a member of an archive);
    ``name`` names it in error messages."""
    cap = inflate_limit_bytes() if limit is None else limit
    head = f.read(2)
    if head == _GZIP_MAGIC:
        yield from _inflate(name, f, head, cap, chunk_bytes)
        return
    done = 0
    pending = head
    while True:
        data = pending + f.read(chunk_bytes - len(pending))
        pending = b""
        if not data:
            return
        done += len(data)
        if done > cap:
            raise InflateLimit(name, cap)
        yield data


def _inflate(path: Path | str, f: BinaryIO, head: bytes, cap: int, chunk_bytes: int) -> Iterator[bytes]:
    dec = zlib.decompressobj(_GZIP_OR_ZLIB)
    raw = head + f.read(_READ_BYTES)
    done = 0
    at = 0  # compressed bytes consumed, for the error message
    while True:
        try:
            # At most chunk_bytes per call: a bomb never inflates more than one chunk at once.
            out = dec.decompress(raw, min(chunk_bytes, cap + 1 - done))
        except zlib.error as e:
            raise CorruptFileError(f"{path}: corrupt gzip data near compressed byte {at:,} ({e})") from None
        done += len(out)
        if done > cap:
            raise InflateLimit(path, cap)
        if out:
            yield out
        if dec.unconsumed_tail:
            at += len(raw) - len(dec.unconsumed_tail)
            raw = dec.unconsumed_tail
            continue
        at += len(raw)
        if dec.eof:
            rest = dec.unused_data
            if not rest:
                rest = f.read(_READ_BYTES)
                if not rest:
                    return
            if len(rest) < 2:
                rest += f.read(2 - len(rest))
            if rest[:2] != _GZIP_MAGIC:  # trailing padding or garbage after the last member, as gzip does
                return
            dec = zlib.decompressobj(_GZIP_OR_ZLIB)  # concatenated gzip members
            raw = rest
            continue
        raw = f.read(_READ_BYTES)
        if not raw:
            raise CorruptFileError(f"{path}: the gzip stream is truncated at compressed byte {at:,}")


def read_limited(path: Path, limit: int | None = None, *, folder: Path | None = None) -> bytes:
    """The whole (inflated, when gzip) content of ``path``. Raises InflateLimit beyond ``limit``
    bytes (default :func:`inflate_limit_bytes`, ``TORCHSCOPE_MAX_INFLATE_MB``), CorruptFileError for
    corrupt or truncated gzip, OSError, and UnsafePath when ``folder`` is given and the file
    leaves it. Never holds more than the limit plus one chunk."""
    buf = io.BytesIO()
    for piece in iter_limited(path, limit, folder=folder):
        buf.write(piece)
    return buf.getvalue()
