"""Tests of app.data.snapshot: the restricted snapshot unpickler and the raw memory timeline reader.

(Not named test_snapshot.py: tests/analysis/memory/test_snapshot.py has that basename and these test
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


@pytest.mark.fault("hostile pickle")
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
@pytest.mark.fault("hostile pickle")
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


@pytest.fixture(scope="module")
def cpu_memory_exports(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Both JSON forms of torch's export_memory_timeline, recorded here on CPU from one profile."""
    import warnings

    import torch
    from torch.profiler import ProfilerActivity, profile

    folder = tmp_path_factory.mktemp("memory_timeline")
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters())
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        for _ in range(2):
            model(torch.randn(32, 64)).square().mean().backward()
            opt.step()
            opt.zero_grad()
    raw, coalesced = folder / "mem.raw.json.gz", folder / "mem.json"
    with warnings.catch_warnings():  # deprecated in favour of CUDA snapshots, which a CPU job has not
        warnings.simplefilter("ignore", FutureWarning)
        prof.export_memory_timeline(str(raw), device="cpu")
        prof.export_memory_timeline(str(coalesced), device="cpu")
    return raw, coalesced


def test_both_export_forms_of_a_real_profile_agree(cpu_memory_exports: tuple[Path, Path]) -> None:
    from app.analysis.memory.snapshot import compute_category_peak, compute_category_timeline

    raw, coalesced = (load_memory_timeline_raw(p) for p in cpu_memory_exports)
    assert len(raw) and len(coalesced)
    assert set(raw["category"]) >= {"parameter", "gradient", "optimizer_state", "activation"}
    peaks = [compute_category_peak(compute_category_timeline(t, max_points=10**9)) for t in (raw, coalesced)]
    by_cat = [p.set_index("category")["bytes"].to_dict() for p in peaks]
    assert by_cat[0] == by_cat[1]
    # At least the model's float32 weights (torch's categoriser may file more under "parameter").
    assert by_cat[0]["parameter"] >= (64 * 128 + 128 + 128 * 10 + 10) * 4


def test_coalesced_form_errors(tmp_path: Path) -> None:
    bad = tmp_path / "c.json"
    bad.write_text(json.dumps([[1, 2], [[0] * 9, [0, "x"] + [0] * 7]]))
    with pytest.raises(CorruptFileError, match="must hold integers"):
        load_memory_timeline_raw(bad)
