"""``ls --json`` printed from the index's per-run texts (app.workspace.printed_listing): the same bytes as
the normal listing, and never once something changed that the index cannot vouch for (docs/catalog.md).

The store folder's stamp is kept only when its last change is a second older than the listing
(STAMP_AGE_NS), so each store here is left alone for that second before the listing that keeps it."""
from __future__ import annotations

import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from contextlib import closing, redirect_stdout
from pathlib import Path, PurePosixPath

import pytest

from app.cli import main
from app.data import catalog_index, change_journal
from app.data.catalog_index import catalog_index_path
from app.workspace import catalog_records, ls_snapshot, printed_listing
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout
from tests.conftest import write_run

ROOT = Path(__file__).resolve().parents[2]


def _settle(root: Path) -> None:
    """Wait until the store folder's last change is old enough for its stamp to be kept."""
    st = os.stat(root)
    left = max(st.st_mtime_ns, st.st_ctime_ns) + printed_listing.STAMP_AGE_NS - time.time_ns()
    if left > 0:
        time.sleep(left / 1e9 + 0.01)


def _normal(root: Path) -> bytes:
    """The document of the normal listing (index and journal), the snapshot file left out."""
    found, runs_text, problems = catalog_records.list_store_json(str(root))
    ls_snapshot.remove_snapshot(str(root))
    return printed_listing.json_document(str(found), runs_text, problems)


def _from_index(root: Path) -> bytes | None:
    pieces = printed_listing._document(str(root), str(root))
    return None if pieces is None else b"".join(pieces)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TORCHSCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(change_journal, "GRACE_NS", 0)  # every journal line settled at once
    root = tmp_path / "runs"
    t0 = 1_764_000_000.0
    # equal starts (ties go by folder name, descending), an unknown start (last), a name that JSON escapes
    for name, start in [("a", t0), ("b", t0), ("c", t0 + 60), ("d", None), ("é\"q", t0 + 30)]:
        write_run(root, name, steps=6, logs=False, started_at=start)
    bad = write_run(root, "skipped-line", steps=6, logs=False, started_at=t0 + 90)
    with open(bad / layout.METRICS, "a") as f:
        f.write("{not json\n{\"step\": 99}\n")  # a line that does not parse: a row problem
    (root / "20250101-000000-broken-0000").mkdir()
    (root / "20250101-000000-broken-0000" / layout.MANIFEST).write_text("{")  # a listing problem
    return root


def _keep_stamp(root: Path) -> None:
    _normal(root)  # the index built
    _settle(root)
    _normal(root)  # stores the stamp


def test_the_document_from_the_index_is_the_normal_listing(store: Path) -> None:
    _keep_stamp(store)
    normal = _normal(store)
    doc = json.loads(normal)
    assert [r["name"] for r in doc["runs"]][-1] == "d" and len(doc["problems"]) == 2
    assert _from_index(store) == normal
    out = io.BytesIO()
    with redirect_stdout(io.TextIOWrapper(out, encoding="utf-8")) as text:
        assert printed_listing.print_from_index(["ls", "--json", "--root", str(store)])
        text.flush()
        assert out.getvalue() == normal


def test_other_spellings_of_the_root(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _keep_stamp(store)
    monkeypatch.chdir(store.parent)
    for value in ("runs", "./runs/", "runs//.", f"{store}/"):
        assert _from_index(Path(value)) == printed_listing.json_document(
            str(Path(value)), *catalog_records.list_store_json(value)[1:]), value
        ls_snapshot.remove_snapshot(str(store))


def test_path_text_is_pathlib_s(tmp_path: Path) -> None:
    for value in ("", ".", "./", "a", "a/", "a//b", "./a/./b/", "/", "//", "///", "//a//b", "/a/../b", "..",
                  "a/..", "...", ".a", "a/.b/", "/./", "é/x"):
        assert printed_listing.path_text(value) == str(PurePosixPath(value)), value


CHANGES = ["new run", "folder copied in", "deleted", "replaced", "not a run", "retagged", "started running",
           "rules", "journal replaced"]


def _change(store: Path, tmp_path: Path, change: str) -> None:
    """Make one of CHANGES to the store."""
    run = next(p for p in store.iterdir() if "-c-" in p.name)
    if change == "new run":
        write_run(store, "late", steps=6, logs=False)
    elif change == "folder copied in":
        shutil.copytree(run, store / (run.name + "-copy"))
    elif change == "deleted":
        shutil.rmtree(run)
    elif change == "replaced":  # another folder put in its place under its name, with other numbers
        # (made before the old one is deleted: a file system may give a folder made after the delete
        # the freed inode number, which the normal listing cannot tell apart: docs/catalog.md)
        shutil.copytree(run, tmp_path / "keep")
        doc = json.loads((tmp_path / "keep" / layout.MANIFEST).read_text())
        (tmp_path / "keep" / layout.MANIFEST).write_text(json.dumps({**doc, "name": "swapped"}))
        shutil.rmtree(run)
        (tmp_path / "keep").rename(run)
    elif change == "not a run":
        (store / "notes").mkdir()
    elif change == "retagged":  # through the writer: no folder changes: the journal names the run
        rf.update_manifest(run, tags=("moved-on",))
    elif change == "started running":
        rf.update_manifest(run, status=rf.RunStatus.RUNNING, heartbeat=time.time(), pid=os.getpid())
    elif change == "rules":
        with closing(sqlite3.connect(catalog_index_path(store))) as con, con:
            con.execute("UPDATE meta SET value = 'other' WHERE key = 'rules'")
    elif change == "journal replaced":
        journal = store / layout.JOURNAL
        journal.unlink(missing_ok=True)
        journal.write_text(f"{layout.JOURNAL_MAGIC}0123abcd\n")


@pytest.mark.parametrize("change", CHANGES)
def test_nothing_printed_from_the_index_once_something_changed(store: Path, tmp_path: Path, change: str) -> None:
    _keep_stamp(store)
    assert _from_index(store) is not None
    _change(store, tmp_path, change)
    assert _from_index(store) is None
    normal = _normal(store)
    if change == "replaced":
        assert b'"swapped"' in normal
    if change != "started running":  # a running run is never printed from the index: its status follows the clock
        _settle(store)
        normal = _normal(store)
        assert _from_index(store) == (None if change == "not a run" else normal)


def test_a_damaged_index_is_not_trusted(store: Path) -> None:
    _keep_stamp(store)
    path = catalog_index_path(store)
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    path.write_bytes(b"not a database" * 100)
    assert _from_index(store) is None
    assert json.loads(_normal(store))["runs"]  # rebuilt


def test_a_stamp_too_recent_is_not_kept(store: Path) -> None:
    _normal(store)
    _settle(store)
    assert printed_listing.store_stamp(str(store)) is not None
    os.utime(store)  # the folder just changed (no entry changed): its next change could share the tick
    assert printed_listing.store_stamp(str(store)) is None
    _normal(store)
    assert _from_index(store) is None


def test_a_listing_without_the_stamp_drops_the_stored_one(store: Path) -> None:
    _keep_stamp(store)
    with closing(sqlite3.connect(catalog_index_path(store))) as con:
        assert con.execute("SELECT value FROM meta WHERE key = 'folders_stamp'").fetchone()
    run = next(p for p in store.iterdir() if "-c-" in p.name)
    (run / layout.MANIFEST).unlink()  # a run folder that is a run no more: the store folder is unchanged
    catalog_records.list_store_json(str(store), full_check=True)  # ls --refresh finds it
    assert _from_index(store) is None
    with closing(sqlite3.connect(catalog_index_path(store))) as con:
        assert con.execute("SELECT value FROM meta WHERE key = 'folders_stamp'").fetchone() is None


def test_ls_json_from_the_index_imports_neither_json_nor_argparse(store: Path) -> None:
    _keep_stamp(store)
    listed = _normal(store)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = ("import runpy, sys\nsys.argv = ['app', 'ls', '--json', '--root', sys.argv[1]]\n"
            "import atexit\natexit.register(lambda: print([m for m in ('json', 'argparse', 'pathlib', 'app.cli') "
            "if m in sys.modules], file=sys.stderr))\nrunpy.run_module('app', run_name='__main__')")
    out = subprocess.run([sys.executable, "-c", code, str(store)], cwd=ROOT, env=env, capture_output=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout == listed
    assert out.stderr.decode().strip().splitlines()[-1] == "[]", out.stderr[-2000:]
    assert not (store / ls_snapshot.SNAPSHOT_FILE).exists()  # printed from the index, not the snapshot
    assert main(["ls", "--json", "--root", str(store)]) == 0  # and through app.cli.main


def test_the_index_check_spells_the_names_as_the_index_does() -> None:
    assert os.path.join(catalog_index.INDEX_DIR, catalog_index.INDEX_FILE) == printed_listing._INDEX
    assert str(catalog_index.INDEX_FORMAT) == printed_listing._INDEX_FORMAT
    assert printed_listing._COMPACT_BYTES == change_journal.COMPACT_BYTES


def test_the_snapshot_key_covers_every_source_the_rules_cover() -> None:
    # a change to the code that prints the records invalidates the snapshot file too
    assert set(printed_listing.RULES_SOURCES) <= set(ls_snapshot._CODE)
    assert "cli/ls_cmd.py" in ls_snapshot._CODE
    for rel in printed_listing.RULES_SOURCES:
        assert (ROOT / "app" / rel).is_file(), rel


def test_the_unchanged_token_holds_while_nothing_changes(store: Path) -> None:
    _normal(store)
    _settle(store)
    assert printed_listing.unchanged_token(str(store)) is None  # the stamp not stored yet
    _normal(store)  # stores it
    token = printed_listing.unchanged_token(str(store))
    assert token is not None
    _normal(store)  # a listing that finds nothing changed keeps what the token is made of
    assert printed_listing.unchanged_token(str(store)) == token
    assert printed_listing.unchanged_token(str(store.parent / "nowhere")) is None


@pytest.mark.parametrize("change", CHANGES)
def test_the_unchanged_token_moves_once_something_changed(store: Path, tmp_path: Path, change: str) -> None:
    _keep_stamp(store)
    before = printed_listing.unchanged_token(str(store))
    assert before is not None
    _change(store, tmp_path, change)
    assert printed_listing.unchanged_token(str(store)) != before
    _normal(store)  # the change listed
    _settle(store)
    _normal(store)
    after = printed_listing.unchanged_token(str(store))
    if change in ("not a run", "started running"):  # a folder that is not a run, a run whose status follows the clock
        assert after is None
    elif change == "rules":  # the index rebuilt by these rules; the store itself did not change
        assert after == before
    else:
        assert after is not None and after != before


def test_the_unchanged_token_comes_back_once_a_running_run_finished(store: Path) -> None:
    run = next(p for p in store.iterdir() if "-c-" in p.name)
    rf.update_manifest(run, status=rf.RunStatus.RUNNING, heartbeat=time.time(), pid=os.getpid())
    _keep_stamp(store)
    assert printed_listing.unchanged_token(str(store)) is None
    rf.update_manifest(run, status=rf.RunStatus.FINISHED, ended_at=time.time())
    assert printed_listing.unchanged_token(str(store)) is None
    _normal(store)
    assert printed_listing.unchanged_token(str(store)) is not None
