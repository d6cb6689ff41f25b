"""Tests of app.data.snapshot: the restricted snapshot unpickler and the raw memory timeline reader.

(Not named test_snapshot.py: tests/analysis/test_snapshot.py has that basename and these test
folders are not packages.)
"""
from __future__ import annotations

import gzip
import json
import os
import pickle
from pathlib import Path

import pytest

from app.data.snapshot import (
    MEMORY_CATEGORIES,
    SnapshotRefusedError,
    load_memory_timeline_raw,
    load_snapshot,
)
from profiler_agent.runformat.errors import CorruptFileError, TorchscopeError

FIXTURE = Path(__file__).parent / "snapshots" / "small.snapshot.pickle"


class _Boom:
    """Pickles to a call of os.system: what a hostile snapshot would contain."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def test_fixture_loads_as_plain_data() -> None:
    snap = load_snapshot(FIXTURE)
    assert set(snap) >= {"segments", "device_traces"}
    assert len(snap["segments"]) == 3
    assert snap["device_traces"][0][0]["action"] == "segment_alloc"
    assert snap["segments"][0]["segment_pool_id"] == (0, 0)  # tuples are plain data


def test_hostile_pickle_is_refused_and_not_executed(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "rank0.1.snapshot.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [[_Boom(marker)]]}))
    with pytest.raises(SnapshotRefusedError) as info:
        load_snapshot(path)
    assert str(path) in str(info.value) and "refused" in str(info.value)
    assert "os.system" in str(info.value) or "posix.system" in str(info.value)
    assert not marker.exists()
    assert isinstance(info.value, CorruptFileError) and isinstance(info.value, TorchscopeError)


@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_any_class_is_refused_whatever_the_protocol(tmp_path: Path, protocol: int) -> None:
    path = tmp_path / "s.snapshot.pickle"
    path.write_bytes(pickle.dumps({"segments": [Path("/x")]}, protocol=protocol))
    with pytest.raises(SnapshotRefusedError, match="refused"):
        load_snapshot(path)


@pytest.mark.parametrize(
    "payload, message",
    [
        (b"", "not a readable snapshot"),
        (b"not a pickle at all", "not a readable snapshot"),
        (pickle.dumps([1, 2, 3]), "expected a snapshot dict"),
        (pickle.dumps({"device_traces": []}), "'segments'"),
        (pickle.dumps({"segments": [], "device_traces": {"a": 1}}), "'device_traces'"),
    ],
)
def test_bad_files_name_the_file_and_problem(tmp_path: Path, payload: bytes, message: str) -> None:
    path = tmp_path / "bad.snapshot.pickle"
    path.write_bytes(payload)
    with pytest.raises(CorruptFileError, match=message) as info:
        load_snapshot(path)
    assert str(path) in str(info.value)


def test_truncated_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "cut.snapshot.pickle"
    path.write_bytes(FIXTURE.read_bytes()[:-40])
    with pytest.raises(CorruptFileError, match="not a readable snapshot"):
        load_snapshot(path)
    with pytest.raises(CorruptFileError, match="cannot read"):
        load_snapshot(tmp_path / "missing.snapshot.pickle")


def test_memory_timeline_raw_real_file(shared_data: Path) -> None:
    raw = load_memory_timeline_raw(shared_data / "memory" / "memory_timeline.raw.gz")
    assert list(raw.columns) == ["ts_ns", "action", "bytes", "category"]
    assert len(raw) == 16845
    assert set(raw["category"].cat.categories) == set(MEMORY_CATEGORIES)
    assert raw["ts_ns"].is_monotonic_increasing
    assert raw["ts_ns"].iloc[-1] == 1696966048083248105  # nanoseconds kept exactly
    assert (raw.loc[raw["action"] == "destroy", "bytes"] <= 0).all()


def test_memory_timeline_raw_plain_json_and_errors(tmp_path: Path) -> None:
    ok = tmp_path / "t.json"
    ok.write_text(json.dumps([[-1, 1, 100, 0], [5, 2, 50, 4], [9, 4, -50, 4]]))
    raw = load_memory_timeline_raw(ok)
    assert raw["category"].tolist() == ["parameter", "activation", "activation"]
    assert raw["action"].tolist() == ["preexisting", "create", "destroy"]
    cases = {
        "dict.json": ({"a": 1}, "JSON list"),
        "ragged.json": ([[1, 2, 3]], "4 integers"),
        "action.json": ([[1, 9, 3, 0]], "action must be 1-4"),
        "cat.json": ([[1, 2, 3, 8]], "category must be 0-7"),
    }
    for name, (content, message) in cases.items():
        p = tmp_path / name
        p.write_text(json.dumps(content))
        with pytest.raises(CorruptFileError, match=message):
            load_memory_timeline_raw(p)
    bad_gz = tmp_path / "t.json.gz"
    bad_gz.write_bytes(gzip.compress(b"[[1,2,3,4]]")[:-6])
    with pytest.raises(CorruptFileError, match="gzip"):
        load_memory_timeline_raw(bad_gz)
