"""A real 4-rank torchrun job (gloo on CPU) with one rank slowed: `analyze` names it the straggler."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main
from tests.conftest import SLOW_DDP_RANK, record_torchrun

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


def test_a_rank_slow_to_load_data_is_found_with_its_cause(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Another style of job: a hand-written loop, a functional loss, and rank 1's DataLoader reading
    slowly (it sleeps: waiting, not computing); the other ranks wait for it in DDP's all-reduce."""
    record_torchrun(tmp_path, "data", "ddp_data_job.py", "--steps", "8", "--slow-rank", "1")
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert main(["analyze", str(run_dir), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rank_summary"]
    top = max(rows, key=lambda r: r["straggler_score"])
    assert top["rank"] == 1 and top["basis"] == "collective" and top["cause"] == "dataloader"
    assert top["straggler_p"] <= 0.05  # named: about 32 ms late in each of 5 steps
    assert all(r["communication_s"] > top["communication_s"] for r in rows if r["rank"] != 1)
