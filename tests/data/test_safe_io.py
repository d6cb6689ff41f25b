"""app.data.safe_io: paths kept inside their folder, inflate capped (unit tests)."""
from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import pytest

from app.data import safe_io
from app.data.safe_io import InflateLimit, UnsafePath, iter_limited, open_inside, read_limited, resolve_inside
from app.errors import UsageError
from profiler_agent.runformat.errors import CorruptFileError, TorchscopeError


def test_the_public_surface_is_the_agreed_one() -> None:
    for name in ("UnsafePath", "resolve_inside", "open_inside", "InflateLimit", "read_limited"):
        assert name in safe_io.__all__
    assert issubclass(UnsafePath, ValueError) and issubclass(UnsafePath, TorchscopeError)
    assert issubclass(InflateLimit, ValueError) and issubclass(InflateLimit, TorchscopeError)


def test_resolve_inside_keeps_paths_and_links_inside(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    f = tmp_path / "logs" / "stdout.log"
    f.write_text("hello")
    (tmp_path / "alias.log").symlink_to(f)
    assert resolve_inside(tmp_path, "logs/stdout.log") == f.resolve()
    assert resolve_inside(tmp_path, tmp_path / "alias.log") == f.resolve()
    assert resolve_inside(tmp_path, "missing.log") == (tmp_path / "missing.log").resolve()


def test_resolve_inside_refuses_links_and_dots_out(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    (run / "logs" / "stdout.log").symlink_to(secret)
    (run / "outdir").symlink_to(tmp_path)
    for bad in ("logs/stdout.log", "../secret.txt", "outdir/secret.txt", str(secret)):
        with pytest.raises(UnsafePath) as e:
            resolve_inside(run, bad)
        assert bad in str(e.value) and str(run) in str(e.value)


def test_a_symlink_loop_is_an_unsafe_path(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(UnsafePath):
        open_inside(tmp_path, "a")


def test_open_inside_reads_inside_and_refuses_out(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "a.txt").write_bytes(b"abc")
    (tmp_path / "out.txt").write_bytes(b"out")
    (run / "link.txt").symlink_to(tmp_path / "out.txt")
    with open_inside(run, "a.txt") as f:
        assert f.read() == b"abc"
    with pytest.raises(UnsafePath, match=r"link\.txt"):
        open_inside(run, "link.txt")
    with pytest.raises(FileNotFoundError):
        open_inside(run, "missing.txt")
    with pytest.raises(ValueError, match="reading only"):
        open_inside(run, "a.txt", "wb")


def test_read_limited_reads_plain_gzip_and_concatenated_members(tmp_path: Path) -> None:
    plain = tmp_path / "p.json"
    plain.write_bytes(b'{"a": 1}')
    gz = tmp_path / "g.json.gz"
    gz.write_bytes(gzip.compress(b"hello ") + gzip.compress(b"world"))
    assert read_limited(plain) == b'{"a": 1}'
    assert read_limited(gz) == b"hello world"
    empty = tmp_path / "e"
    empty.write_bytes(b"")
    assert read_limited(empty) == b""
    padded = tmp_path / "pad.gz"
    padded.write_bytes(gzip.compress(b"x" * 10) + b"\0" * 7)
    assert read_limited(padded) == b"x" * 10


def test_read_limited_refuses_beyond_the_limit_naming_file_limit_and_variable(tmp_path: Path) -> None:
    gz = tmp_path / "bomb.json.gz"
    gz.write_bytes(gzip.compress(b"\0" * (5 << 20)))
    with pytest.raises(InflateLimit) as e:
        read_limited(gz, limit=1 << 20)
    msg = str(e.value)
    assert str(gz) in msg and "1 MiB" in msg and "TORCHSCOPE_MAX_INFLATE_MB" in msg
    assert len(read_limited(gz, limit=5 << 20)) == 5 << 20
    plain = tmp_path / "big.txt"
    plain.write_bytes(b"y" * 1000)
    with pytest.raises(InflateLimit):
        read_limited(plain, limit=999)
    assert read_limited(plain, limit=1000) == b"y" * 1000


def test_the_limit_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHSCOPE_MAX_INFLATE_MB", raising=False)
    assert safe_io.inflate_limit_bytes() == 2048 << 20
    monkeypatch.setenv("TORCHSCOPE_MAX_INFLATE_MB", "1")
    assert safe_io.inflate_limit_bytes() == 1 << 20
    gz = tmp_path / "two.gz"
    gz.write_bytes(gzip.compress(b"z" * (2 << 20)))
    with pytest.raises(InflateLimit, match="1 MiB"):
        read_limited(gz)
    for bad in ("0", "-3", "lots", "nan", "inf"):
        monkeypatch.setenv("TORCHSCOPE_MAX_INFLATE_MB", bad)
        with pytest.raises(UsageError, match="TORCHSCOPE_MAX_INFLATE_MB"):
            safe_io.inflate_limit_bytes()


def test_iter_limited_yields_bounded_chunks(tmp_path: Path) -> None:
    gz = tmp_path / "zeros.gz"
    gz.write_bytes(gzip.compress(b"\0" * (3 << 20)))
    sizes = [len(c) for c in iter_limited(gz, chunk_bytes=1 << 18)]
    assert sum(sizes) == 3 << 20 and max(sizes) <= 1 << 18


def test_corrupt_and_truncated_gzip_are_corrupt_file_errors(tmp_path: Path) -> None:
    data = gzip.compress(os.urandom(50_000))
    cut = tmp_path / "cut.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptFileError, match="truncated"):
        read_limited(cut)
    bad = tmp_path / "bad.gz"
    bad.write_bytes(data[:10] + b"\xff" * 100)
    with pytest.raises(CorruptFileError, match=r"bad\.gz"):
        read_limited(bad)
    zlib_only = tmp_path / "z"
    zlib_only.write_bytes(zlib.compress(b"plain zlib is not gzip"))
    assert read_limited(zlib_only) == zlib.compress(b"plain zlib is not gzip")  # no gzip magic: read as is


def test_read_limited_inside_a_folder_refuses_links_out(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "secret").write_text("secret")
    (run / "x.log").symlink_to(tmp_path / "secret")
    with pytest.raises(UnsafePath):
        read_limited(run / "x.log", folder=run)
