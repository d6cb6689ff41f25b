"""app.workspace.sides: a side is loaded once (memory timelines included); the comparison and its
documents then read no file (the `diff` path never steps back up)."""
from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from app.analysis.compare.comparison import diff_sides
from app.analysis.compare.side import CompareSide, SideKind
from app.presentation.compare_json import comparison_to_json
from app.workspace import memory as ws_memory
from app.workspace.sides import load_side
from profiler_agent.runformat import layout

# [time_ns, action (1 preexisting, 2 create, 4 destroy), bytes, category index]
_TIMELINE = [[-1, 1, 4096, 0], [10, 2, 1024, 5], [20, 4, -1024, 5]]


def _add_timeline(run_dir: Path, records: list[list[int]]) -> Path:
    worker = layout.worker_name("host", 1, 0)
    dst = run_dir / layout.MEMORY_DIR / layout.memory_timeline_file_name(worker, 1)
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(gzip.compress(json.dumps(records).encode()))
    return dst


@pytest.fixture
def two_runs(make_run: Callable[..., Path]) -> tuple[Path, Path]:
    base = make_run("base")
    cand = make_run("cand")
    _add_timeline(base, _TIMELINE)
    return base, cand


def test_side_carries_the_category_peaks(two_runs: tuple[Path, Path]) -> None:
    base, cand = two_runs
    a, b = load_side(base), load_side(cand)
    assert isinstance(a, CompareSide) and a.kind is SideKind.RUN
    assert a.category_peaks is not None and a.category_peaks.files and a.category_peaks_error is None
    assert b.category_peaks is None and b.category_peaks_error is None


def test_the_json_document_reads_no_timeline_again(two_runs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = (load_side(p) for p in two_runs)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a memory timeline was read after the sides were loaded")

    monkeypatch.setattr(ws_memory, "load_memory_timeline_raw", refuse)
    doc = comparison_to_json(diff_sides(a, b))
    assert doc["memory_categories"] and doc["memory_categories"][0]["category"] == "total"
    assert any("the candidate has no memory timeline" in n for n in doc["notes"])


def test_an_unreadable_timeline_is_a_note_not_an_error(two_runs: tuple[Path, Path]) -> None:
    base, cand = two_runs
    _add_timeline(cand, [[0, 9, 1, 0]])  # action 9 does not exist
    side = load_side(cand)
    assert side.category_peaks is None and side.category_peaks_error and "action must be 1-4" in side.category_peaks_error
    doc = comparison_to_json(diff_sides(load_side(base), side))
    assert any("candidate timelines not used" in n for n in doc["notes"])
