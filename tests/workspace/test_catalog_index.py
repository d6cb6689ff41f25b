"""The catalog index: reused while manifests are unchanged, rebuilt when stale, corrupt or missing, safe with two writers."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from app.cli import ls_cmd, main
from app.data import change_journal
from app.data import runs as runs_data
from app.data.catalog_index import INDEX_DIR, INDEX_FILE, LS_SNAPSHOT_FILE, catalog_index_path
from app.workspace import catalog_listing
from app.workspace.catalog import load_catalog, load_catalog_row
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout
from tests.conftest import write_run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TORCHSCOPE_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "runs"
    for i, (bs, tags) in enumerate([(16, ("main",)), (32, ("main",)), (32, ("dev",)), (64, ())]):
        write_run(root, f"r{i}", steps=12, config={"batch_size": bs, "lr": 0.01}, tags=tags, logs=False,
                  step_time_s=0.01 * (1 + i))
    (root / "notes").mkdir()  # not a run: its problem message must survive the index
    return root


@contextmanager
def _db(root: Path) -> Iterator[sqlite3.Connection]:
    """The index, opened by hand (committed and closed after: an open connection would hold the WAL)."""
    with closing(sqlite3.connect(catalog_index_path(root))) as con, con:
        yield con


def _unindexed(root: Path) -> dict[str, object]:
    """What `ls --json` printed before the index: every run read, through pandas."""
    table = load_catalog(root, load_row=load_catalog_row)
    return {"root": str(table.root), "runs": json.loads(json.dumps(runs_data.store_records(table), default=str)),
            "problems": table.problems}


def _ls(root: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    assert main(["ls", "--root", str(root), "--json", *extra]) == 0
    return capsys.readouterr().out


def test_listing_through_the_index_equals_reading_every_run(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = _ls(store, capsys)
    assert (store / INDEX_DIR / INDEX_FILE).is_file() and catalog_index_path(store) == store / INDEX_DIR / INDEX_FILE
    expected = _unindexed(store)
    assert json.loads(first) == expected
    # byte for byte what json.dumps(doc, indent=2) prints, though the records are joined, not encoded
    assert first == json.dumps(expected, indent=2, allow_nan=False, default=str) + "\n"
    done = catalog_listing.refresh(store)
    done.close()
    assert not done.computed and len(done.reused) == 4  # nothing read again
    assert _ls(store, capsys) == first  # printed from the last listing's snapshot
    (store / INDEX_DIR / LS_SNAPSHOT_FILE).unlink(missing_ok=True)
    assert _ls(store, capsys) == first  # joined from the rows
    assert ls_cmd.STATUS_MARKERS == runs_data.STATUS_MARKERS


def test_a_manifest_edited_behind_its_back_is_read_again(store: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(change_journal, "GRACE_NS", 0)  # the writers' journal lines all settled
    _ls(store, capsys)
    run = next(p for p in store.iterdir() if "-r2-" in p.name)
    doc = json.loads((run / layout.MANIFEST).read_text())
    doc["name"], doc["tags"] = "renamed-in-place", ["edited"]
    (run / layout.MANIFEST).write_text(json.dumps(doc))  # in place, not through the atomic writer
    out = json.loads(_ls(store, capsys, "--refresh"))  # no journal line: only the full check sees it
    assert "renamed-in-place" in [r["name"] for r in out["runs"]]
    assert out == _unindexed(store)


def test_deleted_rows_a_removed_run_and_a_new_one(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _ls(store, capsys)
    with _db(store) as con:
        con.execute("DELETE FROM runs WHERE name IN ('r0', 'r1')")
    victim = next(p for p in store.iterdir() if "-r3-" in p.name)
    runs_data.delete_run(victim)
    write_run(store, "late", steps=5, logs=False)
    out = json.loads(_ls(store, capsys))
    assert sorted(r["name"] for r in out["runs"]) == ["late", "r0", "r1", "r2"]
    with _db(store) as con:
        names = sorted(n for (n,) in con.execute("SELECT name FROM runs"))
    assert names == ["late", "r0", "r1", "r2"]  # the removed run's entry is gone


@pytest.mark.parametrize("damage", ["garbage", "truncated", "wrong rules", "empty file"])
def test_a_corrupt_or_stale_index_is_rebuilt(store: Path, capsys: pytest.CaptureFixture[str], damage: str) -> None:
    good = _ls(store, capsys)
    index = catalog_index_path(store)
    with _db(store) as con:  # fold the WAL in, so the damage hits the whole file
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    if damage == "garbage":
        index.write_bytes(b"this is not a database" * 100)
    elif damage == "truncated":
        index.write_bytes(index.read_bytes()[:1500])
    elif damage == "empty file":
        index.write_bytes(b"")
    else:  # made by other row rules: its rows must not be trusted
        with _db(store) as con:
            con.execute("UPDATE meta SET value = 'old' WHERE key = 'rules'")
            con.execute("UPDATE runs SET record_text = replace(record_text, '\"r1\"', '\"stale\"')")
            con.execute("UPDATE printed SET out = CAST(replace(CAST(out AS TEXT), '\"r1\"', '\"stale\"') AS BLOB)")
    assert _ls(store, capsys) == good
    done = catalog_listing.refresh(store)
    done.close()
    assert not done.computed  # the rebuilt index is used again


def test_a_live_run_is_read_again_only_when_its_files_change(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    live = write_run(store, "live", status=rf.RunStatus.RUNNING, steps=5, logs=False)
    rf.update_manifest(live, pid=os.getpid())  # alive: running, whatever the clock says
    _ls(store, capsys)
    done = catalog_listing.refresh(store)
    done.close()
    assert not done.computed and live.name in done.reused and done.rechecked == [live.name]
    assert not (store / INDEX_DIR / LS_SNAPSHOT_FILE).exists()  # a listing with a live run is never kept whole
    with rf.JsonlWriter(live / layout.METRICS) as w:  # it goes on: appended, the manifest untouched
        w.write({"step": 5, "time": 1.0, "rank": 0, "loss": 0.1, "step_time_s": 0.01})
    out = json.loads(_ls(store, capsys))
    assert next(r for r in out["runs"] if r["name"] == "live")["steps"] == 6
    assert out == _unindexed(store)


def test_a_run_whose_heartbeat_went_stale_turns_crashed_with_no_file_changed(store: Path) -> None:
    catalog_listing.refresh(store).close()  # the finished runs indexed
    live = write_run(store, "stalled", status=rf.RunStatus.RUNNING, steps=5, logs=False)
    # Recorded on another host: no process to ask, the heartbeat alone decides (runformat.liveness).
    beat = rf.update_manifest(live, host="another-host").heartbeat or time.time()

    def shown(now: float) -> tuple[str, list[str]]:
        done = catalog_listing.refresh(store, now=now)
        computed = list(done.computed)
        try:
            rows, _, _ = catalog_listing.rows_of(done)
        finally:
            done.close()
        return next(r["status"] for r in rows if r["name"] == "stalled"), computed

    assert shown(beat + 1) == ("running", [live.name])  # first listing: computed
    assert shown(beat + 2) == ("running", [])  # nothing changed: reused, its status checked again
    late = beat + rf.HEARTBEAT_STALE_S + 60
    assert shown(late) == ("crashed", [live.name])  # the clock moved on: crashed, though no file changed
    assert shown(late + 1) == ("crashed", [])


def test_finished_metrics_changed_without_the_manifest_are_read_again(store: Path,
                                                                       capsys: pytest.CaptureFixture[str],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(change_journal, "GRACE_NS", 0)
    _ls(store, capsys)
    run = next(p for p in store.iterdir() if "-r1-" in p.name)
    manifest = (run / layout.MANIFEST).stat()
    with (run / layout.METRICS).open("a") as f:  # a finished run's metrics edited by hand
        for step in range(12, 40):
            f.write(json.dumps({"step": step, "time": 1.0, "rank": 0, "loss": 0.001, "step_time_s": 0.5}) + "\n")
    (run / layout.SYSTEM).unlink()  # and its system samples removed: no peak memory any more
    assert (run / layout.MANIFEST).stat().st_mtime_ns == manifest.st_mtime_ns
    out = json.loads(_ls(store, capsys, "--refresh"))
    row = next(r for r in out["runs"] if r["name"] == "r1")
    assert row["steps"] == 40 and row["peak_memory_bytes"] is None
    assert out == _unindexed(store)


def test_ls_of_an_indexed_store_imports_no_pandas(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _ls(store, capsys)
    code = ("import sys, io, contextlib; from app.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()): rc = main(['ls', '--root', sys.argv[1], '--json'])\n"
            "heavy = [m for m in ('pandas', 'numpy', 'pyarrow', 'app.analysis.run.step_time') if m in sys.modules]\n"
            "print(rc, heavy)")
    out = subprocess.run([sys.executable, "-c", code, str(store)], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert out.stdout.strip() == "0 []", out.stderr[-2000:]


_WRITER = """
import sys
from app.workspace import catalog_listing
for _ in range(int(sys.argv[2])):
    done = catalog_listing.refresh(sys.argv[1], reindex=True)
    done.close()
print("ok")
"""


@pytest.mark.slow
def test_two_processes_writing_the_index_at_once(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for i in range(6):
        write_run(store, f"more{i}", steps=5, logs=False)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(store), "2"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in results]
    assert all(out.strip() == "ok" for out, _ in results)
    with _db(store) as con:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (10,)
    assert json.loads(_ls(store, capsys)) == _unindexed(store)


def test_an_unwritable_index_still_lists(store: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.rmtree(store / INDEX_DIR)  # the writers' change journal lives there too
    (store / INDEX_DIR).write_text("a file where the index folder should be")
    assert json.loads(_ls(store, capsys)) == _unindexed(store)
