"""The store's change journal: a listing stats only the runs the writers named, and stays right when
the journal is torn, deleted, written by several processes at once or compacted (docs/catalog.md).

Each staleness test changes a run in a way the listing can learn of only through the journal (the
lines are "settled": older than the grace time, GRACE_NS = 0 here) or only through the store's
directory listing, so it fails if either were ignored."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import main
from app.data import change_journal
from app.data import runs as runs_data
from app.workspace import catalog_listing
from app.workspace.catalog import load_catalog, load_catalog_row
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout
from tests.conftest import write_run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TORCHSCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(change_journal, "GRACE_NS", 0)  # every line settled: consumed by the next listing
    root = tmp_path / "runs"
    for i in range(4):
        write_run(root, f"r{i}", steps=6, logs=False, step_time_s=0.01 * (1 + i))
    return root


def _ls(root: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, object]:
    assert main(["ls", "--root", str(root), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def _unindexed(root: Path) -> dict[str, object]:
    table = load_catalog(root, load_row=load_catalog_row)
    return {"root": str(table.root), "runs": json.loads(json.dumps(runs_data.store_records(table), default=str)),
            "problems": table.problems}


def _run(root: Path, name: str) -> Path:
    return next(p for p in root.iterdir() if f"-{name}-" in p.name)


def _names(doc: dict[str, object]) -> list[str]:
    return sorted(str(r["name"]) for r in doc["runs"])  # type: ignore[attr-defined]


def _edit_in_place(run: Path, **fields: object) -> None:
    """An edit by another tool: run.json rewritten in place, no journal line."""
    doc = json.loads((run / layout.MANIFEST).read_text())
    doc.update(fields)
    (run / layout.MANIFEST).write_text(json.dumps(doc))


def _stats_of_manifests(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The run folders whose run.json the listing stats from now on."""
    seen: list[str] = []
    real = os.stat

    def counting(path, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202 - os.stat's own signature
        if str(path).endswith(os.sep + layout.MANIFEST):
            seen.append(Path(path).parent.name)
        return real(path, *a, **k)

    monkeypatch.setattr(os, "stat", counting)
    return seen


def test_a_change_through_the_writers_is_seen_and_only_that_run_is_stat_ed(
        store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    _ls(store, capsys)
    run = _run(store, "r2")
    rf.update_manifest(run, tags=("edited",), notes="through the writer")
    stats = _stats_of_manifests(monkeypatch)
    done = catalog_listing.refresh(store)
    done.close()
    assert set(done.computed) == {run.name}
    assert stats == [run.name]  # the other three runs kept their entries' signatures, unstat-ed
    stats.clear()
    out = _ls(store, capsys)
    assert stats == []  # nothing named since: printed from the snapshot
    assert next(r for r in out["runs"] if r["name"] == "r2")["tags"] == ["edited"]  # type: ignore[index]
    assert out == _unindexed(store)


def test_metrics_appended_to_a_finished_run_through_the_writer_are_seen(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _ls(store, capsys)
    run = _run(store, "r1")
    with rf.JsonlWriter(run / layout.METRICS) as w:  # e.g. an import adding a finished run's metrics
        for step in range(6, 30):
            w.write({"step": step, "time": 1.0, "rank": 0, "loss": 0.001, "step_time_s": 0.5})
    out = _ls(store, capsys)
    assert next(r for r in out["runs"] if r["name"] == "r1")["steps"] == 30  # type: ignore[index]
    assert out == _unindexed(store)


def test_an_outside_edit_is_seen_with_refresh_only(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _ls(store, capsys)
    _edit_in_place(_run(store, "r3"), name="renamed-by-hand")
    assert _ls(store, capsys) == before  # no journal line, folder unchanged: the documented blind spot
    out = _ls(store, capsys, "--refresh")
    assert "renamed-by-hand" in _names(out) and out == _unindexed(store)
    assert _ls(store, capsys) == out  # and remembered


def test_runs_copied_in_deleted_or_replaced_by_hand(store: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    _ls(store, capsys)
    other = tmp_path / "other"
    src = write_run(other, "copied", steps=4, logs=False)
    shutil.copytree(src, store / src.name)  # copied in by hand
    shutil.rmtree(_run(store, "r0"))  # deleted by hand
    # r1's folder replaced by another run under the same name (made beside it first: another inode)
    victim = _run(store, "r1")
    stand_in = write_run(other, "stand-in", steps=3, logs=False)
    shutil.copytree(stand_in, store / ".incoming")
    shutil.rmtree(victim)
    os.rename(store / ".incoming", victim)
    out = _ls(store, capsys)
    assert _names(out) == ["copied", "r2", "r3", "stand-in"]
    assert out == _unindexed(store)


def test_a_line_written_before_a_change_keeps_its_run_checked_until_it_settles(
        store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    _ls(store, capsys)
    run = _run(store, "r2")
    monkeypatch.setattr(change_journal, "GRACE_NS", 3600 * 10**9)
    rf.note_run_changed(run)  # a writer's first line; its change lands after the next listing
    _ls(store, capsys)
    _edit_in_place(run, name="landed-late")  # e.g. the writer was slow, or died before its second line
    assert "landed-late" in _names(_ls(store, capsys))  # the young line was not consumed
    monkeypatch.setattr(change_journal, "GRACE_NS", 0)
    _ls(store, capsys)  # settled now: consumed
    _edit_in_place(run, name="unseen")
    assert "unseen" not in _names(_ls(store, capsys))


@pytest.mark.parametrize("damage", ["torn last line", "garbage line", "unknown folder", "journal deleted",
                                    "journal replaced"])
def test_a_damaged_journal_makes_the_listing_check_every_run(
        store: Path, capsys: pytest.CaptureFixture[str], damage: str) -> None:
    _ls(store, capsys)
    _edit_in_place(_run(store, "r3"), name="seen-by-the-full-check")
    journal = store / layout.JOURNAL
    if damage == "journal deleted":
        journal.unlink()
    elif damage == "journal replaced":  # deleted, then made again by a writer: another token
        journal.unlink()
        rf.note_run_changed(_run(store, "r0"))
    else:
        tail = {"torn last line": b"1796219148918132107 202612", "garbage line": b"\x00\xffnot a line\n",
                "unknown folder": b"1796219148918132107 no-such-run\n"}[damage]
        with open(journal, "ab") as f:
            f.write(tail)
    out = _ls(store, capsys)
    assert "seen-by-the-full-check" in _names(out) and out == _unindexed(store)
    if damage == "torn last line":  # not consumed: the next writer's line completes it and is not lost
        rf.note_run_changed(_run(store, "r1"))
        _edit_in_place(_run(store, "r1"), name="after-the-tear")
        assert "after-the-tear" in _names(_ls(store, capsys))


_APPENDER = """
import sys
from profiler_agent.runformat import note_run_changed
for i in range(int(sys.argv[2])):
    note_run_changed(sys.argv[1] + "/w" + sys.argv[3] + "-" + str(i))
"""


def test_several_writers_at_once_append_whole_lines(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    root.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", _APPENDER, str(root), "300", str(k)], cwd=ROOT, env=env)
             for k in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    lines = (root / layout.JOURNAL).read_bytes().splitlines()
    assert len(lines) == 1 + 1200 and lines[0].startswith(layout.JOURNAL_MAGIC.encode())  # one header
    token = lines[0][len(layout.JOURNAL_MAGIC):].decode()
    tail = change_journal.read_tail(root, change_journal.JournalState(token, len(lines[0]) + 1), now_ns=4 * 10**18)
    assert tail.folders == {f"w{k}-{i}" for k in range(4) for i in range(300)} and not tail.full


def test_the_journal_is_compacted_when_the_index_is_written(
        store: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog_listing, "COMPACT_BYTES", 100)
    journal = store / layout.JOURNAL
    before = journal.read_bytes()
    assert len(before) > 100
    first = _ls(store, capsys)
    after = journal.read_bytes()
    assert after.count(b"\n") == 1 and after.split(b"\n")[0] != before.split(b"\n")[0]  # empty, new token
    rf.update_manifest(_run(store, "r0"), tags=("after-compaction",))  # the new journal is followed
    out = _ls(store, capsys)
    assert out != first and out == _unindexed(store)


def test_compaction_keeps_the_lines_appended_meanwhile(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    rf.note_run_changed(root / "a")
    done = change_journal.read_tail(root, None, now_ns=4 * 10**18)
    rf.note_run_changed(root / "late")  # appended after the listing read the journal
    new = change_journal.compact(root, done.state)
    assert new is not None and new.token != done.state.token
    again = change_journal.read_tail(root, new, now_ns=4 * 10**18)
    assert again.folders == {"late"} and not again.full


def test_ls_json_of_an_unchanged_store_is_printed_before_any_import(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    listed = _ls(store, capsys)
    code = ("import sys\nfrom app.cli import main\nrc = main(['ls', '--json', '--root', sys.argv[1]])\n"
            "print([m for m in ('sqlite3', 'argparse', 'json') if m in sys.modules], file=sys.stderr)\n"
            "sys.exit(rc)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code, str(store)], cwd=ROOT, env=env, capture_output=True,
                         timeout=120)
    assert out.returncode == 0 and json.loads(out.stdout) == listed
    assert out.stderr.decode().strip().splitlines()[-1] == "[]", out.stderr[-2000:]
    by_module = subprocess.run([sys.executable, "-m", "app", "ls", "--root", str(store), "--json"], cwd=ROOT,
                               env=env, capture_output=True, timeout=120)  # app/__main__.py's own check
    assert by_module.returncode == 0 and by_module.stdout == out.stdout
    rf.update_manifest(_run(store, "r1"), tags=("moved-on",))  # a journal line: the snapshot is no longer current
    out = subprocess.run([sys.executable, "-c", code, str(store)], cwd=ROOT, env=env, capture_output=True,
                         timeout=120)
    assert out.returncode == 0 and "sqlite3" in out.stderr.decode().splitlines()[-1]
    assert next(r for r in json.loads(out.stdout)["runs"] if r["name"] == "r1")["tags"] == ["moved-on"]


def test_the_snapshot_check_spells_the_run_format_names_as_layout_does() -> None:
    # app.workspace.ls_snapshot repeats these names so that it imports nothing of the run format
    from app.data.catalog_index import INDEX_DIR, LS_SNAPSHOT_FILE
    from app.workspace import ls_snapshot

    assert ls_snapshot._JOURNAL == layout.JOURNAL and layout.JOURNAL_MAGIC.encode() == ls_snapshot._JOURNAL_MAGIC
    assert (ls_snapshot._ROOT_ENV, ls_snapshot._DEFAULT_ROOT) == (layout.ROOT_ENV, layout.DEFAULT_ROOT)
    assert os.path.join(INDEX_DIR, LS_SNAPSHOT_FILE) == ls_snapshot.SNAPSHOT_FILE
    assert INDEX_DIR == layout.STORE_META_DIR
