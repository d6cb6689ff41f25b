"""Replicate groups in the catalog: `torchscope ls` (GROUP column, ``group`` key) and the Runs page's
Group column, shown only when some run has a group."""
from __future__ import annotations

import json

from app.cli import main
from app.data.store_rows import run_group
from app.ui.store import clear_store_caches
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout
from tests.app.helpers import assert_clean, open_app


def _set_group(run_dir, group) -> None:  # noqa: ANN001
    path = run_dir / layout.MANIFEST
    doc = json.loads(path.read_text())
    doc["group"] = group
    path.write_text(json.dumps(doc))


def test_ls_and_runs_page_show_groups_only_when_there_are_some(monkeypatch, make_run, capsys):  # noqa: ANN001
    plain = make_run("plain")
    root = plain.parent
    assert main(["ls", "--root", str(root)]) == 0
    assert "GROUP" not in capsys.readouterr().out
    assert main(["ls", "--root", str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["group"] is None
    clear_store_caches()
    at = open_app(monkeypatch, root)
    assert_clean(at)
    assert "group" not in at.dataframe[0].value.columns

    grouped = make_run("rep")
    _set_group(grouped, "baseline")
    assert run_group(rf.read_manifest(grouped)) == "baseline"
    assert main(["ls", "--root", str(root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["NAME", "GROUP"]
    assert next(line for line in lines if line.startswith("rep")).split()[1] == "baseline"
    assert main(["ls", "--root", str(root), "--json"]) == 0
    by_name = {r["name"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert by_name["rep"]["group"] == "baseline" and by_name["plain"]["group"] is None
    clear_store_caches()
    at = open_app(monkeypatch, root)
    assert_clean(at)
    grid = at.dataframe[0].value.set_index("name")
    assert grid.loc["rep", "group"] == "baseline"


def test_group_field_typed_or_extra() -> None:
    m = rf.Manifest(id="x", name="x", extra={"group": " base "})
    assert run_group(m) == "base"
    assert run_group(rf.Manifest(id="x", name="x", extra={"group": ""})) is None
    assert run_group(rf.Manifest(id="x", name="x")) is None
