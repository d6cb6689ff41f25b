"""The Compare page names the change in stragglers between two multi-rank runs."""
from __future__ import annotations

from pathlib import Path

import pytest

from app.data.tbprofiler import import_traces
from benchmarks.gen_ranks import write_rank_set
from tests.app.helpers import assert_clean, open_app, texts

pytestmark = pytest.mark.slow


def test_compare_says_the_straggler_moved(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    runs = []
    for name, slow in (("before", 0), ("after", 2)):
        folder = tmp_path / name
        write_rank_set(folder, 3, slow_rank=slow, steps=3, kernels_per_step=3, seed=slow)
        runs.append(import_traces(folder, root, name=name)[0])
    at = open_app(monkeypatch, root, page="app_pages/compare.py", run=None)
    at.query_params["runs"] = f"{runs[0].name},{runs[1].name}"
    at.run()
    assert_clean(at)
    said = texts(at.info)
    assert "the straggler moved from rank 0" in said and "rank 2" in said
