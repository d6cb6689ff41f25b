"""A real 4-rank torchrun job (gloo on CPU) with one rank slowed: `analyze` names it the straggler."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main
from tests.conftest import SLOW_DDP_RANK

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("module_trace_cache")]


def test_analyze_json_gives_the_slowed_rank_the_top_score(ddp_store: tuple[Path, Path],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    _, run_dir = ddp_store
    assert main(["analyze", str(run_dir), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = doc["rank_summary"]
    assert [r["rank"] for r in rows] == [0, 1, 2, 3]
    assert len(doc["ranks"]) >= 1  # the per-step rows are still there
    top = max(rows, key=lambda r: r["straggler_score"])
    assert top["rank"] == SLOW_DDP_RANK and top["straggler_score"] >= 0.5
    assert top["basis"] == "collective" and top["sync_points"] >= 2  # gloo:all_reduce on every rank
    assert top["cause"] == "compute"
    # The others wait for it inside the collectives.
    assert all(r["communication_s"] > top["communication_s"] for r in rows if r["rank"] != SLOW_DDP_RANK)


def test_analyze_text_has_the_rank_table(ddp_store: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _, run_dir = ddp_store
    assert main(["analyze", str(run_dir)]) == 0
    out = capsys.readouterr().out
    table = out.split("Ranks (per step;", 1)[1]
    assert table.splitlines()[3].split()[0] == str(SLOW_DDP_RANK)  # highest score first
    assert f"Rank {SLOW_DDP_RANK} is the straggler" in table and "compute than the other ranks" in table
