"""Where a piece of the events array is cut (app/data/trace_parse._cut): the tail looked at first
gives the same cut as the whole window, with many or few event boundaries in the tail."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.data import trace, trace_parse, trace_spill
from app.data.trace import load_trace
from tests.data.test_trace_spill import _assert_same, _crafted, _whole


def _window_cut(buf: bytearray, path: Path) -> int | None:
    """The cut as it was made before the tail was looked at first: the last decodable one of the
    last _MAX_BACKOFF boundaries of the window."""
    window = max(1, len(buf) - trace_parse._CUT_WINDOW)
    cands = [m.start() + 1 for m in trace_parse._BOUNDARY.finditer(buf, window)]
    if not cands:
        cands = [m.start() + 1 for m in trace_parse._BOUNDARY.finditer(buf, 1)]
    for end in reversed(cands[-trace_parse._MAX_BACKOFF:]):
        if trace_parse._try(buf, end, [], path) is not None:
            return end
    return None


@pytest.mark.parametrize("tail", [64, 400, 1 << 16])
def test_the_tail_first_cut_is_the_window_cut(tail: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # short events (many boundaries in the tail), then events of ~3 KB (fewer than _MAX_BACKOFF in it)
    evs = [{"ph": "X", "name": "a},{b", "ts": i, "dur": 1, "pid": 1, "tid": 1} for i in range(300)]
    evs += [{"ph": "X", "name": "x" * 3000, "ts": i, "dur": 1, "pid": 1, "tid": 1} for i in range(40)]
    text = json.dumps(evs, indent=1).encode()
    monkeypatch.setattr(trace_parse, "_CUT_TAIL", tail)
    monkeypatch.setattr(trace_parse, "_CUT_WINDOW", 20_000)
    path = Path("t.json")
    for n in range(200, len(text), 997):  # pieces ending anywhere: inside strings, between events
        buf = bytearray(text[:n])
        end, _ = trace_parse._cut(buf, [], path)
        assert end == _window_cut(buf, path), n


@pytest.mark.parametrize("backoff", [2, 64])
def test_streamed_tables_are_the_same_with_a_small_tail(backoff: int, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(json.dumps(_crafted(300, seed=5), indent=1, ensure_ascii=False).encode())
    whole = _whole(path, monkeypatch)
    monkeypatch.setattr(trace, "IN_MEMORY_BYTES", -1)  # the streamed path (trace_spill), whatever the size
    monkeypatch.setattr(trace_parse, "PIECE_BYTES", 3000)
    monkeypatch.setattr(trace_parse, "_CUT_TAIL", 500)
    monkeypatch.setattr(trace_parse, "_MAX_BACKOFF", backoff)
    monkeypatch.setattr(trace_spill, "BATCH_ROWS", 50)
    _assert_same(whole, load_trace(path, cache_dir=tmp_path / "cache"))
