"""Decompression bombs: every reader inflates in bounded chunks, caps what it inflates, and keeps
RSS a small multiple of what it keeps (each reader runs in a child whose peak RSS is measured)."""
from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from tests.faults.readers_helpers import baseline_rss_mib, records_json, run_reader, write_gzip_bomb

RECORD = b"[1696966048083248105, 2, 1048576, 4], "
MEMORY_IMPORTS = "import app.data.snapshot, app.workspace.memory, app.data.trace_memory\n"


@pytest.fixture(scope="module")
def memory_base_rss() -> int:
    return baseline_rss_mib(MEMORY_IMPORTS)


def _timeline_run(tmp_path: Path, inflated: int) -> Path:
    run = tmp_path / "run"
    (run / "memory").mkdir(parents=True)
    write_gzip_bomb(run / "memory" / "rank0.1.memory_timeline.raw.json.gz", b"[", RECORD, inflated,
                    b"[1, 4, -1048576, 4]]")
    return run


@pytest.mark.fault("decompression bomb")
def test_a_memory_timeline_bomb_is_refused_at_the_limit_with_bounded_rss(tmp_path: Path, memory_base_rss: int) -> None:
    run = _timeline_run(tmp_path, 160 << 20)  # a small gzip inflating to 160 MiB of records
    assert (run / "memory").stat().st_size < 5 << 20
    out, rss = run_reader(f"""
        {MEMORY_IMPORTS}
        from pathlib import Path
        from app.data.safe_io import InflateLimit
        p = next(Path({str(run)!r}, "memory").iterdir())
        try:
            app.data.snapshot.load_memory_timeline_raw(p)
        except InflateLimit as e:
            print("REFUSED", e)
        peaks, why = app.workspace.memory.try_load_category_peaks({str(run)!r})
        print("WORKSPACE", peaks, why)
    """, env={"TORCHSCOPE_MAX_INFLATE_MB": "32"})
    assert "REFUSED" in out and "32 MiB" in out and "TORCHSCOPE_MAX_INFLATE_MB" in out and "rank0.1" in out, out
    assert "WORKSPACE None" in out and "32 MiB" in out.split("WORKSPACE")[1], out  # a note for diff/report, no crash
    assert "Traceback" not in out, out
    assert rss < memory_base_rss + 200, f"peak RSS {rss} MiB (imports alone {memory_base_rss} MiB)"


@pytest.mark.fault("decompression bomb")
@pytest.mark.slow
def test_a_100_mib_memory_timeline_is_read_in_a_small_multiple_of_its_size(tmp_path: Path, memory_base_rss: int) -> None:
    run = _timeline_run(tmp_path, 100 << 20)  # it cost 1.8 GB when decoded whole
    out, rss = run_reader(f"""
        {MEMORY_IMPORTS}
        peaks = app.workspace.memory.load_category_peaks({str(run)!r})
        print("PEAK", int(peaks.table["peak_bytes"].iloc[0]), peaks.problems)
    """, timeout=120)
    assert "PEAK" in out and "Traceback" not in out, out
    n = (100 << 20) // len(RECORD)
    assert int(out.split("PEAK")[1].split()[0]) >= n * (1 << 20) * 0.99
    assert rss < memory_base_rss + 500, f"peak RSS {rss} MiB (imports alone {memory_base_rss} MiB)"


@pytest.mark.fault("decompression bomb")
def test_the_trace_memory_reader_is_capped_too(tmp_path: Path, memory_base_rss: int) -> None:
    bomb = write_gzip_bomb(tmp_path / "x.memory_timeline.raw.json.gz", b"[", RECORD, 64 << 20, b"[1, 4, 1, 4]]")
    out, rss = run_reader(f"""
        {MEMORY_IMPORTS}
        from app.errors import TraceError
        from app.data.safe_io import InflateLimit
        try:
            app.data.trace_memory.load_memory_timeline_raw({str(bomb)!r})
        except (TraceError, InflateLimit) as e:
            print("REFUSED", e)
    """, env={"TORCHSCOPE_MAX_INFLATE_MB": "16"})
    assert "REFUSED" in out and "16 MiB" in out, out
    assert rss < memory_base_rss + 150


@pytest.mark.fault("decompression bomb")
def test_an_uploaded_timeline_bomb_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.data.safe_io import InflateLimit
    from app.data.snapshot import parse_memory_timeline_raw

    monkeypatch.setenv("TORCHSCOPE_MAX_INFLATE_MB", "4")
    data = gzip.compress(b"[" + RECORD * ((8 << 20) // len(RECORD)) + b"[1, 4, 1, 4]]")
    with pytest.raises(InflateLimit, match=r"upload\.json\.gz"):
        parse_memory_timeline_raw(data, "upload.json.gz")
    ok = parse_memory_timeline_raw(gzip.compress(records_json(10)), "ok.json.gz")
    assert len(ok) == 10


@pytest.mark.fault("decompression bomb")
def test_a_gzipped_snapshot_bomb_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.data.safe_io import InflateLimit
    from app.data.snapshot import load_snapshot

    monkeypatch.setenv("TORCHSCOPE_MAX_INFLATE_MB", "8")
    bomb = write_gzip_bomb(tmp_path / "s.snapshot.pickle", b"", b"\0", 64 << 20)
    with pytest.raises(InflateLimit, match=r"s\.snapshot\.pickle"):
        load_snapshot(bomb)


TRACE_IMPORTS = "import app.data.trace, app.data.trace_head, app.data.trace_files\n"
EVENT = b'{"ph": "X", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0, "args": {}}, '


@pytest.fixture(scope="module")
def trace_base_rss() -> int:
    return baseline_rss_mib(TRACE_IMPORTS)


@pytest.mark.fault("decompression bomb")
def test_a_whitespace_trace_bomb_inflates_in_bounded_pieces(tmp_path: Path, trace_base_rss: int) -> None:
    # The case: 1.5 MB of gzip inflating to 1.5 GB took 4.3 GB of RSS, though the parser
    # gives up after 32 MB: each MiB of compressed input was inflated at once.
    bomb = write_gzip_bomb(tmp_path / "w.pt.trace.json.gz", b'{"traceEvents": [', b" ", 1536 << 20)
    assert bomb.stat().st_size < 3 << 20
    out, rss = run_reader(f"""
        {TRACE_IMPORTS}
        from pathlib import Path
        from app.errors import TraceError
        p = Path({str(bomb)!r})
        print("META", app.data.trace_head.read_trace_meta(p), app.data.trace_head.read_trace_start(p))
        print("SCAN", app.data.trace_files.scan_trace_folder(p.parent))
        try:
            t = app.data.trace.load_trace(p, cache_dir=Path({str(tmp_path / "cache")!r}))
            print("LOADED", t.n_events, t.warnings)
        except TraceError as e:
            print("REFUSED", e)
    """, timeout=120)
    assert "Traceback" not in out and ("REFUSED" in out or "LOADED 0" in out), out
    assert "w.pt.trace.json.gz" in out.split("SCAN")[-1]
    assert rss < trace_base_rss + 250, f"peak RSS {rss} MiB (imports alone {trace_base_rss} MiB)"


@pytest.mark.fault("decompression bomb")
def test_a_trace_of_repeated_events_is_refused_beyond_the_limit(tmp_path: Path, trace_base_rss: int) -> None:
    bomb = write_gzip_bomb(tmp_path / "e.pt.trace.json.gz", b'{"traceEvents": [', EVENT, 256 << 20,
                           EVENT[:-2] + b"]}")
    out, rss = run_reader(f"""
        {TRACE_IMPORTS}
        from pathlib import Path
        from app.errors import TraceError
        try:
            app.data.trace.load_trace(Path({str(bomb)!r}), cache_dir=Path({str(tmp_path / "cache")!r}))
            print("LOADED")
        except TraceError as e:
            print("REFUSED", e)
    """, env={"TORCHSCOPE_MAX_INFLATE_MB": "24"}, timeout=120)
    assert "REFUSED" in out and "24 MiB" in out and "TORCHSCOPE_MAX_INFLATE_MB" in out and "e.pt.trace" in out, out
    assert rss < trace_base_rss + 250, f"peak RSS {rss} MiB (imports alone {trace_base_rss} MiB)"
