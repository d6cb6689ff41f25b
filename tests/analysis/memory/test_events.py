"""Memory timeline and peaks from [memory] events; torch's raw memory timeline export."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from app.analysis.memory.events import compute_memory_peaks, compute_memory_timeline, device_label
from app.data.trace import load_trace
from app.data.trace_memory import load_memory_timeline_raw
from app.errors import TraceError

HERE = Path(__file__).resolve().parent
TINY = HERE.parents[1] / "data" / "traces" / "cpu_torch213" / "tiny_mlp.pt.trace.json.gz"
RAW = HERE.parents[2] / ".." / "shared" / "data" / "memory" / "memory_timeline.raw.gz"


pytestmark = pytest.mark.usefixtures("module_trace_cache")  # one trace cache per module (conftest)


def test_peaks_equal_the_largest_total_in_the_file() -> None:
    raw = json.loads(gzip.decompress(TINY.read_bytes()))["traceEvents"]
    mem = [e["args"] for e in raw if e.get("name") == "[memory]"]
    trace = load_trace(TINY)
    tl = compute_memory_timeline(trace)
    assert len(tl) == len(mem) and set(tl["device"]) == {"cpu"}
    (peak,) = compute_memory_peaks([trace]).itertuples()
    assert peak.peak_allocated_bytes == max(a["Total Allocated"] for a in mem)
    assert peak.peak_reserved_bytes == max(a["Total Reserved"] for a in mem)
    assert peak.ops_at_peak  # some op was running at the peak


def test_device_labels() -> None:
    assert device_label(0, -1) == "cpu" and device_label(1, 3) == "cuda:3" and device_label(None, None) == "unknown"


@pytest.mark.skipif(not RAW.is_file(), reason="../shared/data not present")
def test_raw_memory_timeline() -> None:
    df = load_memory_timeline_raw(RAW)
    assert len(df) > 10000 and df["ts_us"].is_monotonic_increasing
    assert (df["allocated_bytes"] == df["bytes"].cumsum()).all()
    assert set(df["action"].unique()) <= {"preexisting", "create", "increment_version", "destroy"}


def test_raw_memory_timeline_bad_file(tmp_path: Path) -> None:
    f = tmp_path / "x.raw.json"
    f.write_text('{"not": "a list"}')
    with pytest.raises(TraceError, match="not a memory timeline"):
        load_memory_timeline_raw(f)
