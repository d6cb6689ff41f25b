"""The trace-view helpers: first-open ingest with progress (UI layer, bare Streamlit mode)."""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path

from app.data import trace_cache
from app.ui.trace_view import ingest_with_progress

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"


def _a_trace() -> Path:
    found = sorted(DATA.rglob("*.json*"))
    assert found, f"no trace fixtures under {DATA}"
    return found[0]


def test_cold_traces_are_ingested_once_and_bad_ones_left_for_the_analysis(tmp_path: Path) -> None:
    good = tmp_path / "traces" / "w.1.pt.trace.json.gz"
    good.parent.mkdir()
    src = _a_trace()
    if src.suffix == ".gz":
        shutil.copy(src, good)
    else:
        good.write_bytes(gzip.compress(src.read_bytes()))
    bad = tmp_path / "traces" / "w.2.pt.trace.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "na')  # cut mid-event, nothing recoverable
    assert trace_cache.read_cached_meta(trace_cache.cache_entry_dir(good)) is None
    ingest_with_progress([good, bad])  # must not raise for the bad file
    assert trace_cache.read_cached_meta(trace_cache.cache_entry_dir(good)) is not None
