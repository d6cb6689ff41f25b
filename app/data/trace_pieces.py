"""A trace file's decompressed bytes, read in bounded pieces, and positions in them (data layer).

Used by the streaming parser (``trace_parse``): gzip is decompressed on the fly, so a piece is the
only part of the file in memory; a truncated or corrupt gzip stream ends the pieces early with a
warning, keeping what was decompressed before the damage.
"""
from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["Progress", "read_pieces", "line_col", "close_pieces"]

Progress = Callable[[int, int], None]

_READ_BYTES = 1 << 20  # compressed bytes read at a time
_SLICE_BYTES = 1 << 16  # compressed bytes decompressed at a time
_GZIP_OR_ZLIB = 47  # zlib's wbits for "gzip or zlib header, 32 KiB window"


def read_pieces(path: Path, warnings: list[str], progress: Progress | None) -> Iterator[bytes]:
    """Yield the decompressed bytes of ``path`` in pieces; a broken gzip ends the stream early."""
    total = path.stat().st_size
    done = 0
    with path.open("rb") as f:
        head = f.read(2)
        f.seek(0)
        dec = zlib.decompressobj(_GZIP_OR_ZLIB) if head == b"\x1f\x8b" else None
        while True:
            raw = f.read(_READ_BYTES)
            done += len(raw)
            if progress is not None:
                progress(done, total)
            if not raw:
                if dec is not None and not dec.eof:
                    warnings.append(
                        f"{path}: the gzip stream is truncated at compressed byte {done:,}; "
                        "reading what was written before the cut"
                    )
                return
            if dec is None:
                yield raw
                continue
            out: list[bytes] = []
            # Small slices, so that a corrupt block loses only the bytes after it.
            for i in range(0, len(raw), _SLICE_BYTES):
                try:
                    out.append(dec.decompress(raw[i:i + _SLICE_BYTES]))
                    while dec.eof and dec.unused_data:  # concatenated gzip members
                        rest = dec.unused_data
                        dec = zlib.decompressobj(_GZIP_OR_ZLIB)
                        out.append(dec.decompress(rest))
                except zlib.error as e:
                    at = done - len(raw) + i  # noted first: the reader may stop at the bytes yielded below
                    warnings.append(f"{path}: the gzip data is corrupt near compressed byte {at:,} ({e}); "
                                    "reading what was decompressed before it")
                    if out:
                        yield b"".join(out)
                    return
            data = b"".join(out)
            if data:
                yield data


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
