"""Derived-table cache (app.workspace.traces over app.data.trace_analysis_cache): a hit returns the computed tables exactly; a changed trace, another set of
ranks or another analysis version never reads old tables; tables of a cached trace load lazily."""
from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from app.analysis.trace import summary as trace_summary
from app.data import trace_analysis_cache as tac
from app.data import trace_cache
from app.data.trace import load_trace, load_traces
from app.presentation.analyze_json import analysis_to_json
from app.workspace import traces as ws_traces
from app.workspace.traces import analyze_trace_set as analyze_traces

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[1] / ".." / "shared" / "data" / "traces"
TINY = HERE.parent / "data" / "traces" / "cpu_torch213" / "tiny_mlp.pt.trace.json.gz"
TABLES = ("steps", "breakdown", "ops", "kernels", "memory_peaks", "rank_skew", "overlap")


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(trace_cache.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def _no_compute(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(traces: object) -> None:
        raise AssertionError("computed although cached")

    monkeypatch.setattr(ws_traces, "compute_analysis_tables", fail)


def _same(a: trace_summary.TraceAnalysis, b: trace_summary.TraceAnalysis) -> None:
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)
    assert analysis_to_json(a) == analysis_to_json(b)


def _analysis_dirs(cache: Path) -> list[Path]:
    return [p for p in cache.rglob(f"{tac.PREFIX}*") if p.is_dir()]


def test_hit_returns_identical_tables_without_reading_events(monkeypatch: pytest.MonkeyPatch, _cache: Path) -> None:
    first = analyze_traces(load_traces(TINY))
    assert not first.from_cache and len(_analysis_dirs(_cache)) == 1
    assert len(first.memory_peaks) == 1 and len(first.steps) == 3  # non-trivial tables are compared
    traces = load_traces(TINY)
    _no_compute(monkeypatch)
    again = analyze_traces(traces)
    assert again.from_cache
    _same(first, again)
    assert traces[0]._tables["events"] is None  # the events table was never read
    assert traces[0].events.equals(load_trace(TINY, use_cache=False).events)  # and still loads on use


def test_changed_trace_is_recomputed(tmp_path: Path, _cache: Path) -> None:
    doc = json.loads(gzip.decompress(TINY.read_bytes()))
    f = tmp_path / "t.json"
    f.write_text(json.dumps(doc))
    before = analyze_traces(load_traces(f))
    assert analyze_traces(load_traces(f)).from_cache
    # Drop the last profiler step: fewer steps, and the file's size and mtime change.
    last = max((e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")),
               key=lambda e: e["ts"])
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("ts", 0) < last["ts"]]
    f.write_text(json.dumps(doc))
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    after = analyze_traces(load_traces(f))
    assert not after.from_cache
    _same(after, analyze_traces(load_traces(f, use_cache=False)))
    assert len(after.steps) < len(before.steps)
    assert len(_analysis_dirs(_cache)) == 1  # the old analysis went with the old trace entry


def test_analysis_version_change_is_recomputed(monkeypatch: pytest.MonkeyPatch, _cache: Path) -> None:
    first = analyze_traces(load_traces(TINY))
    old = _analysis_dirs(_cache)
    monkeypatch.setattr(ws_traces, "ANALYSIS_VERSION", trace_summary.ANALYSIS_VERSION + 1)
    bumped = analyze_traces(load_traces(TINY))
    assert not bumped.from_cache
    _same(first, bumped)
    new = _analysis_dirs(_cache)
    assert len(new) == 1 and new != old  # the other version's tables were removed
    assert analyze_traces(load_traces(TINY)).from_cache


def test_analysis_code_change_is_recomputed(monkeypatch: pytest.MonkeyPatch) -> None:
    analyze_traces(load_traces(TINY))
    monkeypatch.setattr(ws_traces, "_source_digest", lambda: "edited")
    assert not analyze_traces(load_traces(TINY)).from_cache


def test_no_cache_reads_and_writes_nothing(_cache: Path) -> None:
    a = analyze_traces(load_traces(TINY, use_cache=False))
    assert not a.from_cache and not _analysis_dirs(_cache)
    analyze_traces(load_traces(TINY))
    b = analyze_traces(load_traces(TINY), use_cache=False)
    assert not b.from_cache
    _same(a, b)


@pytest.mark.skipif(not (SHARED / "two_ranks").is_dir(), reason="../shared/data not present")
def test_each_set_of_ranks_has_its_own_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "two"
    shutil.copytree(SHARED / "two_ranks", folder)
    both = analyze_traces(load_traces(folder))
    one = analyze_traces([t for t in load_traces(folder) if t.rank == 1])
    assert not trace_summary.analyze_traces(load_traces(folder)).from_cache  # the pure analysis never caches
    assert not both.from_cache and not one.from_cache
    assert set(both.steps["rank"]) == {0, 1} and set(one.steps["rank"]) == {1}
    assert len(both.rank_skew) and one.rank_skew.empty
    _no_compute(monkeypatch)
    _same(both, analyze_traces(load_traces(folder)))
    _same(one, analyze_traces([t for t in load_traces(folder) if t.rank == 1]))


def test_damaged_analysis_entry_is_a_miss(_cache: Path) -> None:
    first = analyze_traces(load_traces(TINY))
    (folder,) = _analysis_dirs(_cache)
    (folder / "ops.arrow").write_bytes(b"not arrow")
    again = analyze_traces(load_traces(TINY))
    assert not again.from_cache
    _same(first, again)
    assert analyze_traces(load_traces(TINY)).from_cache  # rewritten


def test_lazy_tables_survive_a_removed_cache_entry(_cache: Path) -> None:
    load_trace(TINY)
    cached = load_trace(TINY)
    assert cached.from_cache
    shutil.rmtree(cached.cache_entry)
    fresh = load_trace(TINY, use_cache=False)
    for name in ("events", "memory", "flows", "counters", "threads"):
        assert getattr(cached, name).equals(getattr(fresh, name)), name
    assert not cached.cache_entry.exists()  # reading again did not bring the removed entry back
    assert not analyze_traces([cached]).from_cache and not cached.cache_entry.exists()


def test_lazy_trace_pickles_with_its_tables() -> None:
    import pickle

    load_trace(TINY)
    cached = load_trace(TINY)
    back = pickle.loads(pickle.dumps(cached))
    assert back.rank == cached.rank and back.n_events == cached.n_events
    for name in ("events", "memory", "flows", "counters", "threads"):
        assert getattr(back, name).equals(getattr(cached, name)), name


def test_pure_analysis_writes_no_cache(_cache: Path) -> None:
    """app.analysis.trace.summary.analyze_traces computes only: the workspace owns the cache."""
    a = trace_summary.analyze_traces(load_traces(TINY))
    assert not a.from_cache and not _analysis_dirs(_cache)
    _same(a, analyze_traces(load_traces(TINY)))



def _comes_back_identical(df: pd.DataFrame) -> bool:
    """The reference: pandas' own exact comparison of ``df`` with its Arrow round trip."""
    import pyarrow as pa

    try:
        pd.testing.assert_frame_equal(df, pa.Table.from_pandas(df).to_pandas(), check_exact=True)
    except (AssertionError, pa.ArrowException, ValueError, TypeError):
        return False
    return True


@pytest.mark.parametrize("table", [
    pd.DataFrame({"a": pd.Series([1, 2], dtype=object)}),  # comes back int64
    pd.DataFrame({"a": pd.Series([1, "x"], dtype=object)}),  # Arrow refuses the mixed column
    pd.DataFrame({"a": [1.0, 2.0]}, index=pd.Index([3, 4], dtype="int32")),
    pd.DataFrame({"a": [1, 2]}, index=pd.Index([0.0, 1.0])),  # a float index whose values equal a range's
    pd.DataFrame({"a": [1, 2]}, index=pd.RangeIndex(2)),
    pd.DataFrame({"a": ["x", None], "b": [float("nan"), -0.0], "c": pd.array([1, None], "Int64")}),
    pd.DataFrame({"a": pd.Categorical(["x", "y", "x"])}),
    pd.DataFrame(columns=["name", "calls"]),  # empty, object columns
], ids=["object-ints", "mixed", "int32-index", "float-index", "range-index", "nulls", "category", "empty"])
def test_a_table_is_cached_only_when_it_comes_back_identical(tmp_path: Path, table: pd.DataFrame) -> None:
    """The cache's promise (a hit returns exactly what was computed) is checked on each table, and
    agrees with pandas' exact comparison: when Arrow would give back another dtype, index or value,
    nothing is written."""
    folder = tmp_path / "entry" / f"{tac.PREFIX}v1-set"
    folder.parent.mkdir()
    identical = _comes_back_identical(table)
    written = tac.write_analysis(folder, {"t": table, "ok": pd.DataFrame({"b": [1.5, float("nan")]})})
    assert written == identical == folder.is_dir()
    if written:
        pd.testing.assert_frame_equal(tac.read_analysis(folder, ["t"])["t"], table, check_exact=True)
