"""`torchscope analyze`: JSON contract, text tables, rank filter, errors as one line."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli import main
from app.data import trace_cache

HERE = Path(__file__).resolve().parent
TINY = HERE.parent / "data" / "traces" / "cpu_torch213" / "tiny_mlp.pt.trace.json.gz"
SHARED = HERE.parents[1] / ".." / "shared" / "data" / "traces"


@pytest.fixture(autouse=True, scope="module")
def _cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One cache per module: a trace read by several tests is parsed once."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(trace_cache.CACHE_ENV, str(tmp_path_factory.mktemp("cache")))
        yield


def test_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(TINY), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["steps"]) == 3 and doc["ops"] and doc["traces"][0]["warnings"] == []


def test_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(TINY)]) == 0
    out = capsys.readouterr().out
    assert "Top" in out and "aten::addmm" in out and "CPU EXEC" in out and "Memory peaks" in out


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present")
def test_rank_filter(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(SHARED / "two_ranks"), "--rank", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {s["rank"] for s in doc["steps"]} == {1}
    assert main(["analyze", str(SHARED / "two_ranks"), "--rank", "5"]) == 2
    assert "ranks [0, 1]" in capsys.readouterr().err


def test_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["analyze", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "traceEvents" in err and str(bad) in err
    assert main(["analyze", str(tmp_path / "missing.json"), "--root", str(tmp_path)]) == 2
    assert "no such file" in capsys.readouterr().err
