"""`torchscope import` of a source imported before updates its run (``--new`` for another), and
imported runs carry their steps and step time from the start (issue 16)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main
from app.workspace.imports import SUMMARY_KEY
from profiler_agent import runformat as rf
from tests.data.issue16 import traces as T


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return T.write(tmp_path / "src" / "worker0.pt.trace.json", T.dropped_trailing_step())


def _runs(store: Path) -> list[rf.Manifest]:
    return [m for _, m in rf.list_runs(store).runs]


def test_importing_again_updates_the_run_and_new_makes_another(source: Path, tmp_path: Path, capsys) -> None:
    store = tmp_path / "store"
    assert main(["import", str(source.parent), "--root", str(store), "--json"]) == 0
    (first,) = json.loads(capsys.readouterr().out)["runs"]
    assert main(["import", str(source.parent), "--root", str(store)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"updated {first['path']}") and "--new" in out
    (only,) = _runs(store)
    assert only.id == first["id"] and only.name == first["name"]
    assert main(["import", str(source.parent), "--root", str(store), "--new", "--json"]) == 0
    (second,) = json.loads(capsys.readouterr().out)["runs"]
    assert second["id"] != first["id"] and not second["updated"]
    assert len(_runs(store)) == 2
    assert not any(p.name.endswith(".replaced") for p in store.iterdir())


def test_imported_runs_list_their_steps_at_once(source: Path, tmp_path: Path, capsys) -> None:
    store = tmp_path / "store"
    assert main(["import", str(source.parent), "--root", str(store), "--json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    summary = rf.read_manifest(run["path"]).extra[SUMMARY_KEY]
    assert summary["steps"] == 2 and summary["step_time_s"] == pytest.approx(999e-6, rel=0.2)
    assert main(["ls", "--root", str(store), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["runs"]
    assert row["steps"] == 2  # from the analysis made at import, not "in trace"
    assert row["step_time_s"] is not None
