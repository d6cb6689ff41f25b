"""One catalog for both front ends: ``torchscope ls`` and the Runs page list the same runs with the same messages."""
from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from app.cli import main
from app.data import runs as runs_data
from app.ui.store import cached_store_view, clear_store_caches
from app.workspace.catalog import load_catalog
from profiler_agent.runformat import layout

HERE = Path(__file__).resolve().parent
TINY = HERE.parent / "data" / "traces" / "cpu_torch213" / "tiny_mlp.pt.trace.json.gz"


@pytest.fixture
def mixed_store(make_run: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Runs, a broken run, a folder that is not a run, and a tb-profiler sub-folder (a mirrored run)."""
    monkeypatch.setenv("TORCHSCOPE_CACHE", str(tmp_path / "cache"))
    make_run("first")
    root = make_run("second", ranks=2).parent
    broken = make_run("broken")
    (broken / layout.MANIFEST).write_text("{not json", encoding="utf-8")
    (root / "notes").mkdir()
    (root / "notes" / "readme.txt").write_text("not a run", encoding="utf-8")
    (root / "tb_run").mkdir()
    shutil.copy(TINY, root / "tb_run" / TINY.name)
    return root


def _ls_json(root: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(["ls", "--root", str(root), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_and_ui_list_the_same_runs_with_the_same_messages(
    mixed_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _ls_json(mixed_store, capsys)
    clear_store_caches()
    view = cached_store_view(mixed_store, max_age_s=0)
    ui_records = json.loads(json.dumps(runs_data.store_records(view.store), default=str))
    assert doc["runs"] == ui_records
    assert doc["problems"] == view.store.problems
    assert [r["name"] for r in doc["runs"]][-1:] == ["tb_run"]  # the mirrored tb-profiler run is listed
    assert {r["name"] for r in doc["runs"]} >= {"first", "second"}
    problems = " | ".join(doc["problems"])
    assert "notes" in problems and "no trace files" in problems  # why the folder was skipped
    assert "broken" in problems
    assert "tb_run" not in problems  # listed as a run, not as a problem


def test_catalog_is_what_both_call(mixed_store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = load_catalog(mixed_store)
    assert store.mirror is not None
    assert _ls_json(mixed_store, capsys)["problems"] == store.problems
    clear_store_caches()
    assert list(cached_store_view(mixed_store, max_age_s=0).store.table["id"]) == list(store.table["id"])
