"""The streamed ingest (compressed pieces, sorted batch by batch into the cache: app.data.trace_spill)
gives the same tables, warnings and metadata as reading the trace whole into memory. Every trace
here is small enough for the cache's whole-in-memory path (trace.IN_MEMORY_BYTES), so each test
forces the streamed one; the last tests check the choice between the two."""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pandas as pd
import pytest

from app.data import trace, trace_parse, trace_pieces, trace_spill
from app.data.trace import TraceTables, load_trace
from app.data.trace_kinds import TABLES
from app.errors import TraceError


@pytest.fixture(autouse=True)
def streamed_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every trace goes through the streamed path (trace_spill), whatever its size."""
    monkeypatch.setattr(trace, "IN_MEMORY_BYTES", -1)


def _whole(path: Path, monkeypatch: pytest.MonkeyPatch) -> TraceTables:
    """The reference: the in-memory reader with the whole file as one piece (no cache)."""
    with monkeypatch.context() as m:
        m.setattr(trace_parse, "PIECE_BYTES", 1 << 30)
        return load_trace(path, use_cache=False)


def _assert_same(a: TraceTables, b: TraceTables) -> None:
    assert a.warnings == b.warnings
    assert a.meta == b.meta and a.n_events == b.n_events and a.rank == b.rank
    for name in TABLES:
        x, y = getattr(a, name), getattr(b, name)
        pd.testing.assert_frame_equal(x, y, check_exact=True)
        for col in x.columns:  # the categories' order too (groupby orders by it)
            if isinstance(x[col].dtype, pd.CategoricalDtype):
                assert list(x[col].cat.categories) == list(y[col].cat.categories), (name, col)


def _shared_traces() -> list:
    """Every shared trace and every trace of tests/data; the two 1.5 MB GPU traces are slow (the
    golden tests read them through this path too)."""
    root = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"
    here = Path(__file__).parent / "traces"
    files = sorted(root.rglob("*.json*")) + sorted(here.rglob("*.json*"))
    return [pytest.param(f, id=f.name, marks=[pytest.mark.slow] if f.stat().st_size > 1 << 20 else [])
            for f in files]


@pytest.mark.parametrize("path", _shared_traces())
def test_streamed_tables_equal_the_whole_file_reader(path: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace_spill, "BATCH_ROWS", 4096)  # several sorted batches, pieces read again
    streamed = load_trace(path, cache_dir=tmp_path)
    assert streamed.cache_entry is not None and not streamed.from_cache
    _assert_same(_whole(path, monkeypatch), streamed)


def _crafted(n: int = 400, seed: int = 3) -> dict:
    """Events whose strings hold what a cut must not split: escaped quotes, brackets, braces,
    commas, unicode (raw and escaped), out of time order, with flows, memory, counters, threads,
    events without ts and with bad dur."""
    rng = random.Random(seed)
    names = ['aten::mm', 'a"}, {"b', "x]y[z", "}{", "名前 ✓ ü", "\u00e9\\n\u2028", "tab\tend", "back\\slash\"", "},{"]
    ev: list[dict] = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": 'main "thread" ]'}},
                      {"ph": "M", "name": "process_name", "pid": "stream 7", "tid": 0, "args": {"name": "GPU ✓"}}]
    for i in range(n):
        e = {"ph": "X", "cat": rng.choice(["cpu_op", "kernel", 'we"ird']), "name": rng.choice(names),
             "pid": rng.choice([1, 2, "stream 7"]), "tid": rng.choice([7, 8, "Spans"]),
             "ts": rng.randrange(0, 10_000) + rng.random(), "dur": rng.choice([5.0, 0.5, 12.25, -1.0]),
             "args": {"External id": i, "Input Dims": [[rng.randrange(1, 9), 3], []],
                      "Input type": ["float", 'c10::"Half"'], "note": "[{]}" * rng.randrange(0, 3)}}
        if i % 50 == 7:
            del e["ts"]
        if i % 61 == 3:
            del e["dur"]
        ev.append(e)
        if i % 9 == 0:
            ev.append({"ph": "s" if i % 2 else "f", "id": i, "cat": "ac2g", "name": "flow", "pid": 1, "tid": 7,
                       "ts": rng.randrange(0, 10_000)})
        if i % 13 == 0:
            ev.append({"ph": "i", "name": "[memory]", "pid": 1, "tid": 7, "ts": rng.randrange(0, 10_000),
                       "args": {"Device Type": 0, "Device Id": -1, "Addr": i, "Bytes": 512 - i,
                                "Total Allocated": 4096 + i, "Total Reserved": 8192}})
        if i % 17 == 0:
            ev.append({"ph": "C", "name": "ctr", "pid": 1, "ts": rng.randrange(0, 10_000), "args": {"v": i}})
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "a \"]} device"}],
            "traceEvents": ev, "traceName": "crafted ]}"}


@pytest.mark.parametrize("gz", [False, True])
def test_tiny_pieces_and_reads_give_the_same_tables(gz: bool, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    text = json.dumps(_crafted(), indent=1, ensure_ascii=False).encode()
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(text) if gz else text)
    whole = _whole(path, monkeypatch)
    assert len(whole.events) > 300 and len(whole.flows) and len(whole.memory) and len(whole.counters)
    # Reads of 7 bytes and pieces of ~200 bytes: cuts fall inside strings, escapes and multi-byte characters;
    # batches of 5 rows gather each column from many pieces.
    monkeypatch.setattr(trace_pieces, "_READ_BYTES", 7)
    monkeypatch.setattr(trace_pieces, "_SLICE_BYTES", 5)
    monkeypatch.setattr(trace_pieces, "_OUT_BYTES", 11)
    monkeypatch.setattr(trace_parse, "PIECE_BYTES", 200)
    monkeypatch.setattr(trace_spill, "BATCH_ROWS", 5)
    streamed = load_trace(path, cache_dir=tmp_path / "cache")
    assert streamed.cache_entry is not None
    _assert_same(whole, streamed)
    assert any("without a timestamp" in w for w in streamed.warnings)
    assert any("invalid 'dur'" in w for w in streamed.warnings)


def test_bad_input_mid_stream_keeps_its_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = json.dumps(_crafted(200)).encode()
    cut = tmp_path / "cut.json"
    cut.write_bytes(text[: len(text) // 2])
    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(b'{"traceEvents": [{"ph": "X", ts: 2}, {"ph": "X", "ts": 1}]}')
    whole_cut = _whole(cut, monkeypatch)
    with pytest.raises(TraceError) as whole_err:
        _whole(garbage, monkeypatch)
    monkeypatch.setattr(trace_parse, "PIECE_BYTES", 64)
    monkeypatch.setattr(trace_spill, "BATCH_ROWS", 3)
    streamed = load_trace(cut, cache_dir=tmp_path / "cache")
    _assert_same(whole_cut, streamed)
    assert any(f"{cut}: recovered" in w and "ends mid-event" in w for w in streamed.warnings)
    with pytest.raises(TraceError) as err:
        load_trace(garbage, cache_dir=tmp_path / "cache")
    assert str(err.value) == str(whole_err.value)
    assert str(garbage) in str(err.value) and "invalid JSON at byte" in str(err.value)


def test_a_cache_that_cannot_be_written_keeps_the_tables_in_memory(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_crafted(100)))
    monkeypatch.setattr("app.data.trace_cache.write_cached", lambda *a, **k: False)
    monkeypatch.setattr(trace_spill, "BATCH_ROWS", 7)
    t = load_trace(path, cache_dir=tmp_path / "cache")
    assert t.cache_entry is None
    _assert_same(_whole(path, monkeypatch), t)


@pytest.mark.parametrize("gz", [False, True])
def test_a_small_trace_goes_to_the_cache_whole_with_the_same_tables(gz: bool, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    text = json.dumps(_crafted(300, seed=11), indent=1, ensure_ascii=False).encode()
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(text) if gz else text)
    monkeypatch.setattr(trace_parse, "PIECE_BYTES", 500)  # several pieces on both paths
    monkeypatch.setattr(trace_spill, "BATCH_ROWS", 40)
    streamed = load_trace(path, cache_dir=tmp_path / "streamed")
    calls: list[str] = []
    for name in ("_ingest_into", "_ingest_whole_into"):
        real = getattr(trace, name)
        monkeypatch.setattr(trace, name, lambda *a, _real=real, _name=name: calls.append(_name) or _real(*a))
    monkeypatch.setattr(trace, "IN_MEMORY_BYTES", len(text))  # exactly the uncompressed size: whole
    whole = load_trace(path, cache_dir=tmp_path / "whole")
    monkeypatch.setattr(trace, "IN_MEMORY_BYTES", len(text) - 1)  # one byte less: streamed
    again = load_trace(path, cache_dir=tmp_path / "again")
    assert calls == ["_ingest_whole_into", "_ingest_into"]
    assert whole.cache_entry is not None and not whole.from_cache
    _assert_same(streamed, whole)
    _assert_same(streamed, again)
    # the entry written whole reads back as the same tables
    _assert_same(streamed, load_trace(path, cache_dir=tmp_path / "whole"))
