"""A remote store that changes: listed incrementally through change markers, its spool cleaned, its runs edited from the Runs page (real moto server)."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from app.cli import main
from app.data.store_fs import StoreError, StoreFS, open_store
from app.workspace.stores import remote_url, save_tags_and_notes
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout
from profiler_agent.runformat.store_url import CHANGES_DIR, spool_root
from profiler_agent.upload import connect, run_files, state_path, sync_run
from tests.conftest import write_run
from tests.stores.conftest import S3Store


def _listings(lines: list[str]) -> list[str]:
    return [r for r in lines if '"GET ' in r and "list-type=" in r]


def _reads(lines: list[str]) -> list[str]:
    return [r for r in lines if '"GET ' in r and "list-type=" not in r]


def _spool_runs(s3: S3Store, n: int, **kw: object) -> list[Path]:
    """``n`` small finished runs in the store's spool (its launcher's layout), not uploaded yet."""
    spool = spool_root(s3.url)
    return [write_run(spool, f"r{i}", steps=4, system=False, **kw) for i in range(n)]  # type: ignore[arg-type]


def test_an_unchanged_store_is_listed_in_two_requests(s3):
    connection = connect(s3.url)
    runs = _spool_runs(s3, 3)
    for run_dir in runs:
        assert sync_run(run_dir, s3.url, connection=connection).complete
    store = open_store(s3.url)
    per_run = len(run_files(runs[0]))
    assert store.mirror().fetched == 3 * per_run
    for n_runs in (3, 12):
        mark = s3.server.mark()
        again = StoreFS(s3.url).mirror()  # another process, the same cache folder
        lines = s3.server.since(mark)
        # the top level and the change markers: the same two requests for 3 runs as for 12
        assert len(lines) == 2 and len(_listings(lines)) == 2, lines
        assert again.fetched == 0 and again.reused == n_runs * per_run
        if n_runs == 3:
            more = _spool_runs(s3, 9)
            for run_dir in more:
                assert sync_run(run_dir, s3.url, connection=connection).complete
            assert store.mirror().fetched == 9 * per_run
            runs += more

    # a new file in a run its writer changed: that run alone is listed again, and the file read
    extra = runs[1] / layout.TRACES_DIR / "w.1.pt.trace.json"
    extra.parent.mkdir(exist_ok=True)
    extra.write_text('{"traceEvents": []}')
    assert sync_run(runs[1], s3.url, connection=connection).put == 1
    mark = s3.server.mark()
    changed = store.mirror()
    lines = s3.server.since(mark)
    assert changed.fetched == 1 and len(_listings(lines)) == 3 and len(_reads(lines)) == 1, lines
    assert (store.mirror_dir / runs[1].name / layout.TRACES_DIR / extra.name).read_text() == extra.read_text()

    # a run deleted remotely (by another tool: its marker stays) leaves the listing; a run put by
    # another tool (no marker) appears, and is listed on every open, since nothing says when it changes
    s3.fs().rm(f"{s3.bucket}/runs/{runs[2].name}", recursive=True)
    foreign = write_run(s3.cache / "elsewhere", "foreign", steps=4, system=False)
    s3.fs().put(str(foreign), f"{s3.bucket}/runs/{foreign.name}", recursive=True)
    result = store.mirror()
    assert result.removed == len(run_files(runs[2])) and not (store.mirror_dir / runs[2].name).exists()
    listing = rf.list_runs(store.mirror_dir)
    assert listing.problems == []
    names = sorted(p.name for p, _ in listing.runs)
    assert names == sorted([r.name for i, r in enumerate(runs) if i != 2] + [foreign.name])
    mark = s3.server.mark()
    assert store.mirror().fetched == 0
    assert len(_listings(s3.server.since(mark))) == 3  # top level, markers, the marker-less run
    assert not (store.mirror_dir / CHANGES_DIR).exists()  # the markers are the store's, never mirrored


def _age(run_dir: Path, days: float) -> None:
    old = time.time() - days * 86400  # the upload state's time: the run's own files must keep theirs
    os.utime(state_path(run_dir), (old, old))


def test_sync_cleans_complete_runs_from_the_spool(s3, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch):
    old, recent = _spool_runs(s3, 2)
    live = write_run(spool_root(s3.url), "live", steps=4, system=False, status=rf.RunStatus.RUNNING,
                     heartbeat=time.time())  # this process's: alive
    connection = connect(s3.url)
    for run_dir in (old, recent):
        assert sync_run(run_dir, s3.url, connection=connection).complete
    _age(old, 8)
    changed = write_run(spool_root(s3.url), "changed", steps=4, system=False)
    assert sync_run(changed, s3.url, connection=connection).complete
    _age(changed, 30)
    (changed / layout.STDOUT_LOG).write_text("written after its upload\n")  # newer than the store's copy

    capsys.readouterr()
    assert main(["sync", "--root", s3.url, "--clean", "--dry-run", "--json"]) == 1  # `changed` would be put
    doc = json.loads(capsys.readouterr().out)
    verdicts = {c["id"]: c for c in doc["cleaning"]}
    assert doc["dry_run"] and verdicts[old.name]["removed"] and verdicts[recent.name]["removed"]
    assert not verdicts[changed.name]["removed"] and verdicts[changed.name]["kept"] == "changed since its upload"
    assert "upload" in verdicts[live.name]["kept"]
    assert {r["id"]: r["pending"] for r in doc["runs"] if not r["skipped"]}[changed.name] == [layout.STDOUT_LOG]
    assert all(p.is_dir() for p in (old, recent, changed, live))  # a dry run changes nothing

    assert main(["sync", "--root", s3.url]) == 0  # the default retention (7 days): only the old one goes
    out = capsys.readouterr().out
    assert f"deleted the spooled copy of {old.name}" in out and not old.exists() and not state_path(old).exists()
    assert recent.is_dir() and changed.is_dir() and live.is_dir()
    assert changed.name in {k.split("/")[0] for k in s3.objects()}  # synced: now 30 days old and complete

    monkeypatch.setenv("TORCHSCOPE_SPOOL_RETENTION_DAYS", "0")  # 0 keeps every spooled run
    _age(changed, 30)
    assert main(["sync", "--root", s3.url]) == 0 and changed.is_dir()
    assert main(["sync", "--root", s3.url, "--clean"]) == 0  # now, whatever the age
    out = capsys.readouterr().out
    assert not recent.exists() and not changed.exists() and live.is_dir()  # never a run still recorded
    assert f"kept the spooled copy of {live.name}" in out
    # the store kept every uploaded run
    assert {old.name, recent.name, changed.name} <= {k.split("/")[0] for k in s3.objects()}


def test_runs_page_edits_are_written_into_the_store(s3, monkeypatch: pytest.MonkeyPatch):
    run_dir, running = _spool_runs(s3, 2)
    rf.update_manifest(running, status=rf.RunStatus.RUNNING, heartbeat=time.time(), host="another-host")
    connection = connect(s3.url)
    for r in (run_dir, running):
        assert sync_run(r, s3.url, connection=connection).complete
    store = open_store(s3.url)
    mirror = store.mirror().root
    assert remote_url(mirror / run_dir.name) == s3.url and remote_url(s3.cache / "elsewhere") is None

    # another writer changes run.json between this edit's read and its put: the put (If-Match) fails,
    # and the edit is read and applied again, so neither change is lost
    key = f"{s3.bucket}/runs/{run_dir.name}/{layout.MANIFEST}"
    real_cat, reads = store.fs.cat_file, []

    def cat_then_race(path, *a, **kw):  # noqa: ANN001, ANN202 - the real read, then a real concurrent write
        data = real_cat(path, *a, **kw)
        reads.append(path)
        if len(reads) == 1:
            doc = json.loads(data)
            s3.fs().pipe_file(key, json.dumps({**doc, "notes": "other writer", "reviewed": True}).encode())
        return data

    store.fs.cat_file = cat_then_race
    try:
        saved = save_tags_and_notes(mirror / run_dir.name, ["main", " fast ", "main"], "edited in the UI")
    finally:
        del store.fs.cat_file  # the class's method again
    assert len(reads) == 2
    remote = json.loads(s3.objects()[f"{run_dir.name}/{layout.MANIFEST}"])
    assert remote["tags"] == ["main", "fast"] and remote["notes"] == "edited in the UI"
    assert remote["reviewed"] is True and remote["upload"]["state"] == "complete"  # the rest kept
    assert saved.tags == ("main", "fast") and rf.read_manifest(mirror / run_dir.name).tags == ("main", "fast")
    assert store.mirror().fetched == 0  # the mirror has the edit already
    assert json.loads(s3.objects()[f"{CHANGES_DIR}/{run_dir.name}"])["id"] == run_dir.name
    monkeypatch.setenv("TORCHSCOPE_CACHE", str(s3.cache / "another-reader"))
    other = StoreFS(s3.url)  # another reader, its own cache
    assert other.mirror().fetched > 0 and rf.read_manifest(other.mirror_dir / run_dir.name).notes == "edited in the UI"

    with pytest.raises(StoreError, match="still being recorded"):
        save_tags_and_notes(mirror / running.name, ["x"], "")
    local = write_run(s3.cache / "local-store", "local")
    assert save_tags_and_notes(local, ["x"], "n").tags == ("x",)  # a local store: its own folder
