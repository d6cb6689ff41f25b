"""A trace file's decompressed bytes, read in bounded pieces, and positions in them (data layer).

Used by the streaming parser (``trace_parse``): gzip is decompressed on the fly, so a piece is the
only part of the file in memory; a truncated or corrupt gzip stream ends the pieces early with a
warning, keeping what was decompressed before the damage.
"""
from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from app.data.safe_io import InflateLimit, inflate_limit_bytes
from app.data.trace_kinds import Progress
from app.errors import TraceError

__all__ = ["Progress", "read_pieces", "line_col", "close_pieces"]

_READ_BYTES = 1 << 20  # compressed bytes read at a time
_SLICE_BYTES = 1 << 16  # compressed bytes decompressed at a time
_OUT_BYTES = 1 << 20  # most decompressed bytes held before they are yielded
_GZIP_OR_ZLIB = 47  # zlib's wbits for "gzip or zlib header, 32 KiB window"


def read_pieces(path: Path, warnings: list[str], progress: Progress | None) -> Iterator[bytes]:
    """Yield the decompressed bytes of ``path`` in pieces; a broken gzip ends the stream early.

    A gzip piece is at most about ``_OUT_BYTES`` however well the data compresses (one MiB of
    zeros inflates to a GB), and the inflated total is capped (``safe_io.inflate_limit_bytes``,
    ``TORCHSCOPE_MAX_INFLATE_MB``): beyond it TraceError names the file, the limit and the variable.
    """
    total = path.stat().st_size
    done = 0
    with path.open("rb") as f:
        head = f.read(2)
        f.seek(0)
        if head != b"\x1f\x8b":
            while raw := f.read(_READ_BYTES):
                done += len(raw)
                if progress is not None:
                    progress(done, total)
                yield raw
            if progress is not None:
                progress(done, total)
            return
        yield from _inflate_pieces(path, f, warnings, progress, total)


def _inflate_pieces(path: Path, f: BinaryIO, warnings: list[str], progress: Progress | None,
                    total: int) -> Iterator[bytes]:
    cap = inflate_limit_bytes()
    dec = zlib.decompressobj(_GZIP_OR_ZLIB)
    done = inflated = 0
    while True:
        raw = f.read(_READ_BYTES)
        done += len(raw)
        if progress is not None:
            progress(done, total)
        if not raw:
            if not dec.eof:
                warnings.append(
                    f"{path}: the gzip stream is truncated at compressed byte {done:,}; "
                    "reading what was written before the cut"
                )
            return
        out: list[bytes] = []
        have = 0
        # Small slices, so that a corrupt block loses only the bytes after it; at most _OUT_BYTES
        # out of each decompress call, so that a bomb never inflates more than that at once.
        for i in range(0, len(raw), _SLICE_BYTES):
            data = raw[i:i + _SLICE_BYTES]
            try:
                while data:
                    chunk = dec.decompress(data, _OUT_BYTES)
                    data = dec.unconsumed_tail
                    if dec.eof and dec.unused_data:  # concatenated gzip members
                        data = dec.unused_data
                        dec = zlib.decompressobj(_GZIP_OR_ZLIB)
                    if not chunk:
                        continue
                    inflated += len(chunk)
                    if inflated > cap:
                        raise TraceError(str(InflateLimit(path, cap)))
                    out.append(chunk)
                    have += len(chunk)
                    if have >= _OUT_BYTES:
                        yield b"".join(out)
                        out, have = [], 0
            except zlib.error as e:
                at = done - len(raw) + i  # noted first: the reader may stop at the bytes yielded below
                warnings.append(f"{path}: the gzip data is corrupt near compressed byte {at:,} ({e}); "
                                "reading what was decompressed before it")
                if out:
                    yield b"".join(out)
                return
        if out:
            yield b"".join(out)


def line_col(path: Path, at: int) -> tuple[int, int]:
    """Line and column (1-based, in bytes) of decompressed byte ``at`` (read again: errors only)."""
    line, col_start, done = 1, 0, 0
    for piece in read_pieces(path, [], None):
        chunk = piece[: max(0, at - done)]
        n = chunk.count(b"\n")
        if n:
            line += n
            col_start = done + chunk.rindex(b"\n") + 1
        done += len(piece)
        if done >= at:
            break
    return line, at - col_start + 1


def close_pieces(pieces: Iterator[bytes]) -> None:
    """Close the file under ``pieces`` before they are all read (a generator from ``read_pieces``)."""
    close = getattr(pieces, "close", None)
    if close is not None:
        close()
