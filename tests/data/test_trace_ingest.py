"""Trace ingest: every real trace reads, the cache is used and invalidated, ranks and folders are found."""
from __future__ import annotations

import gzip
import itertools
import json
import os
import shutil
from pathlib import Path

import orjson
import pytest

from app.data import trace_cache
from app.data.trace import list_trace_paths, load_trace, load_traces, rank_from_name
from app.errors import UsageError
from profiler_agent.runformat import layout

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[1] / ".." / "shared" / "data" / "traces"
TINY = HERE / "traces" / "cpu_torch213" / "tiny_mlp.pt.trace.json.gz"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present")


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(trace_cache.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def _shared_files() -> list[Path]:
    return sorted(SHARED.glob("*/*.json.gz")) if SHARED.is_dir() else []


@needs_shared
@pytest.mark.parametrize("path", _shared_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shared_trace_ingests_without_warnings(path: Path) -> None:
    raw = orjson.loads(gzip.decompress(path.read_bytes()))
    t = load_trace(path)
    assert t.warnings == []
    assert t.n_events == len(raw["traceEvents"])
    assert len(t.events) == sum(1 for e in raw["traceEvents"] if e.get("ph") == "X")
    assert (t.events["dur_us"] >= 0).all()
    assert t.events["ts_us"].is_monotonic_increasing
    assert "traceEvents" not in t.meta and t.meta.get("schemaVersion") == raw.get("schemaVersion")


@needs_shared
def test_two_ranks_folder_gives_two_ranks() -> None:
    traces = load_traces(SHARED / "two_ranks")
    assert [t.rank for t in traces] == [0, 1]


@needs_shared
def test_rank_from_distributed_info() -> None:
    assert load_trace(SHARED / "gpu_before_after" / "control.json.gz").rank == 3
    assert load_trace(SHARED / "cpu_only" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz").rank == 34


def test_rank_from_file_name_then_zero(tmp_path: Path) -> None:
    assert rank_from_name("sampled_rank-1.json.gz") == 1
    assert rank_from_name("host_rank_12.123.pt.trace.json") == 12
    assert rank_from_name("worker0.123.pt.trace.json") is None
    doc = {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]}
    (tmp_path / "rank7.json").write_text(json.dumps(doc))
    (tmp_path / "plain.json").write_text(json.dumps(doc))
    assert load_trace(tmp_path / "rank7.json").rank == 7
    assert load_trace(tmp_path / "plain.json").rank == 0


def test_cache_is_used_and_rebuilt_when_the_file_changes(tmp_path: Path, _cache: Path) -> None:
    f = tmp_path / "t.pt.trace.json.gz"
    shutil.copy(TINY, f)
    first = load_trace(f)
    assert not first.from_cache and any(_cache.rglob(f"events{trace_cache.SUFFIX}"))
    second = load_trace(f)
    assert second.from_cache
    assert second.events.equals(first.events) and second.memory.equals(first.memory)
    assert second.meta == first.meta and second.n_events == first.n_events
    doc = json.loads(gzip.decompress(f.read_bytes()))
    doc["traceEvents"] = doc["traceEvents"][: len(doc["traceEvents"]) // 2]
    f.write_bytes(gzip.compress(json.dumps(doc).encode()))
    os.utime(f, (1, 1))
    third = load_trace(f)
    assert not third.from_cache and third.n_events == len(doc["traceEvents"])
    assert len(list(_cache.rglob("meta.json"))) == 1  # the stale entry was removed


def test_a_fresh_ingest_serves_its_events_from_memory_and_the_rest_from_the_entry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The events just written to the cache are converted from the tables in memory, once (not read
    back); every other table is read from the entry; all equal what a cached open gives."""
    f = tmp_path / "t.pt.trace.json.gz"
    shutil.copy(TINY, f)
    fresh = load_trace(f)
    reads: list[str] = []
    read = trace_cache.read_cached_table
    monkeypatch.setattr(trace_cache, "read_cached_table", lambda entry, name: reads.append(name) or read(entry, name))
    cached = load_trace(f)
    names = ("events", "memory", "flows", "counters", "threads")
    for name in names:
        assert getattr(fresh, name).equals(getattr(cached, name)), name
    # the cached open reads each table; the fresh one every table but the events
    assert reads == ["events", "memory", "memory", "flows", "flows", "counters", "counters", "threads", "threads"]


def test_run_folder_caches_inside_the_run(tmp_path: Path) -> None:
    run = tmp_path / "run1"
    (run / layout.TRACES_DIR).mkdir(parents=True)
    shutil.copy(TINY, run / layout.TRACES_DIR / layout.trace_file_name("rank0", 123))
    (traces,) = load_traces(run)
    assert traces.rank == 0
    assert any((run / layout.CACHE_DIR).rglob(f"events{trace_cache.SUFFIX}"))


def test_run_without_traces_is_a_usage_error(tmp_path: Path) -> None:
    run = tmp_path / "run2"
    run.mkdir()
    (run / layout.MANIFEST).write_text("{}")
    with pytest.raises(UsageError, match="no profiler traces"):
        list_trace_paths(run)


def test_tb_profiler_layout_one_subfolder_per_run(tmp_path: Path) -> None:
    for run, worker in (("run_a", "rank0"), ("run_a", "rank1"), ("run_b", "rank0")):
        (tmp_path / run).mkdir(exist_ok=True)
        shutil.copy(TINY, tmp_path / run / f"{worker}.1.pt.trace.json.gz")
    paths = list_trace_paths(tmp_path)
    assert [p.parent.name for p in paths] == ["run_a", "run_a", "run_b"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no trace files"):
        list_trace_paths(tmp_path / "empty")
    with pytest.raises(UsageError, match="no such file"):
        list_trace_paths(tmp_path / "missing")


def test_read_only_input_uses_user_cache(tmp_path: Path, _cache: Path) -> None:
    t = load_trace(TINY)
    assert len(t.events) > 100 and len(t.memory) > 10
    assert any(_cache.rglob("meta.json"))
    assert not (TINY.parent / layout.CACHE_DIR).exists()


def test_progress_reaches_total(tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    load_trace(TINY, progress=lambda d, t: seen.append((d, t)), use_cache=False)
    assert seen and seen[-1][0] == seen[-1][1] == TINY.stat().st_size
    assert all(a[0] <= b[0] for a, b in itertools.pairwise(seen))


def test_flows_counters_and_thread_names_are_kept(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 10, "dur": 5},
        {"ph": "s", "id": 7, "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 2, "ts": 11},
        {"ph": "f", "id": 7, "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 20, "bp": "e"},
        {"ph": "C", "name": "GPU Util", "pid": 0, "ts": 12, "args": {"util": 0.75}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "trainer"}},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 2, "ts": 13, "s": "t",
         "args": {"Device Type": 1, "Device Id": 0, "Addr": 99, "Bytes": 512, "Total Allocated": 1024,
                  "Total Reserved": 2048}},
    ]
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"traceEvents": events}))
    t = load_trace(f)
    assert list(t.flows["ph"].astype(str)) == ["s", "f"] and set(t.flows["id"]) == {"7"}
    assert t.counters[["name", "value"]].astype(str).values.tolist() == [["GPU Util", "0.75"]]
    assert set(zip(t.threads["kind"].astype(str), t.threads["name"])) == {("thread", "trainer"), ("process", "GPU 0")}
    m = t.memory.iloc[0]
    assert (m["device_type"], m["device_id"], m["addr"], m["bytes"], m["total_allocated_bytes"],
            m["total_reserved_bytes"]) == (1, 0, 99, 512, 1024, 2048)
