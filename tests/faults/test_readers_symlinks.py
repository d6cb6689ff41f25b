"""Symlinks out of a run: app.data's readers never follow a link from inside a run folder to a file
outside it (a clear error naming the file, or the file skipped with a problem message in listings).
The one exception is the tb-profiler mirror the app builds itself: its links may point into the
tb log folder it mirrors, and nowhere else."""
from __future__ import annotations

import gzip
import json
import pickle
from collections.abc import Callable
from pathlib import Path

import pytest

from app.data import tbprofiler, trace_cache
from app.data.safe_io import UnsafePath
from app.data.snapshot import load_memory_timeline_raw, load_snapshot
from app.data.trace import load_traces
from app.data.trace_files import scan_trace_folder
from app.errors import TraceError
from app.workspace.memory import try_load_category_peaks
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout

FAULT = pytest.mark.fault("symlink out of a run")


def _trace(path: Path, name: str = "op") -> Path:
    doc = {"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1,
                                                "ts": 1.0, "dur": 5.0}]}
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """Files someone else wants read: a trace, a timeline, a snapshot, outside every run."""
    out = tmp_path / "elsewhere"
    out.mkdir()
    _trace(out / "secret.pt.trace.json.gz", "SECRET")
    (out / "secret.raw.json").write_text(json.dumps([[1, 2, 100, 0]]))
    (out / "secret.pickle").write_bytes(pickle.dumps({"segments": [], "device_traces": []}))
    return out


@pytest.fixture
def run(make_run: Callable[..., Path]) -> Path:
    return make_run("planted", logs=False)


@FAULT
def test_a_trace_linked_out_of_a_run_is_not_read(run: Path, outside: Path, tmp_path: Path) -> None:
    traces = run / layout.TRACES_DIR
    traces.mkdir(exist_ok=True)
    link = traces / layout.trace_file_name("rank0", 1)
    link.symlink_to(outside / "secret.pt.trace.json.gz")
    with pytest.raises(TraceError) as e:
        load_traces(run, cache_dir=tmp_path / "cache")
    assert link.name in str(e.value) and "outside" in str(e.value)
    _trace(traces / layout.trace_file_name("rank1", 2), "mine")  # with a real trace beside it: skipped, said
    (t,) = load_traces(run, cache_dir=tmp_path / "cache")
    assert list(t.events["name"].astype(str)) == ["mine"]
    assert any(link.name in w and "skipped" in w for w in t.warnings)


@FAULT
def test_a_traces_folder_linked_out_of_a_run_is_not_read(run: Path, outside: Path, tmp_path: Path) -> None:
    (run / layout.TRACES_DIR).symlink_to(outside)
    (outside / layout.trace_file_name("rank0", 1)).symlink_to(outside / "secret.pt.trace.json.gz")
    with pytest.raises(TraceError, match="outside"):
        load_traces(run, cache_dir=tmp_path / "cache")


@FAULT
def test_a_folder_listing_skips_links_out_with_the_reason(outside: Path, tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    _trace(folder / "mine.pt.trace.json.gz")
    (folder / "theirs.pt.trace.json.gz").symlink_to(outside / "secret.pt.trace.json.gz")
    (folder / "alias.pt.trace.json.gz").symlink_to(folder / "mine.pt.trace.json.gz")  # inside: fine
    scan = scan_trace_folder(folder)
    assert [p.name for p in scan.traces] == ["alias.pt.trace.json.gz", "mine.pt.trace.json.gz"]
    assert [(s.path.name, "outside" in s.reason) for s in scan.skipped] == [("theirs.pt.trace.json.gz", True)]


@FAULT
def test_a_folder_named_by_a_relative_path_up_is_read_and_still_guarded(outside: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # `torchscope analyze ../traces` read nothing: `../traces/x.json.gz` was taken under the folder
    # a second time and resolved outside it.
    folder = tmp_path / "logs" / "folder"
    folder.mkdir(parents=True)
    _trace(folder / "mine.pt.trace.json.gz", "mine")
    (folder / "theirs.pt.trace.json.gz").symlink_to(outside / "secret.pt.trace.json.gz")
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    scan = scan_trace_folder(Path("../logs/folder"))
    assert [p.name for p in scan.traces] == ["mine.pt.trace.json.gz"]
    assert [s.path.name for s in scan.skipped] == ["theirs.pt.trace.json.gz"]
    (t,) = load_traces(Path("../logs/folder"), cache_dir=tmp_path / "cache")
    assert list(t.events["name"].astype(str)) == ["mine"]
    assert any("theirs" in w and "skipped" in w for w in t.warnings)


@FAULT
def test_memory_timelines_and_snapshots_linked_out_are_refused(run: Path, outside: Path) -> None:
    memory = run / layout.MEMORY_DIR
    memory.mkdir(exist_ok=True)
    link = memory / layout.memory_timeline_file_name("rank0", 1)
    link.symlink_to(outside / "secret.raw.json")
    with pytest.raises(UnsafePath, match=link.name):
        load_memory_timeline_raw(link, folder=run)
    peaks, why = try_load_category_peaks(run)
    assert peaks is None and why is not None and link.name in why and "outside" in why
    snap = memory / "snapshot.pickle"
    snap.symlink_to(outside / "secret.pickle")
    with pytest.raises(UnsafePath, match=r"snapshot\.pickle"):
        load_snapshot(snap, folder=run)
    assert load_snapshot(outside / "secret.pickle") == {"segments": [], "device_traces": []}  # named directly: read


@FAULT
def test_a_cache_folder_linked_out_of_a_run_is_not_written(run: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "victim"
    target.mkdir()
    (run / layout.CACHE_DIR).symlink_to(target)
    monkeypatch.setenv(trace_cache.CACHE_ENV, str(tmp_path / "user-cache"))
    traces = run / layout.TRACES_DIR
    traces.mkdir(exist_ok=True)
    _trace(traces / layout.trace_file_name("rank0", 1))
    (t,) = load_traces(run)
    assert t.n_events == 1 and list(target.iterdir()) == []
    assert t.cache_entry is not None and (tmp_path / "user-cache") in t.cache_entry.parents


@FAULT
def test_the_tb_mirror_may_link_only_into_the_folder_it_mirrors(tmp_path: Path, outside: Path) -> None:
    tb = tmp_path / "tb"
    (tb / "job").mkdir(parents=True)
    _trace(tb / "job" / "worker0.1.pt.trace.json.gz", "tb-op")
    store = tbprofiler.mirror_tb_folder(tb, tmp_path / "mirror")
    assert store is not None
    ((mirror_run, _),) = rf.list_runs(store).runs
    (t,) = load_traces(mirror_run, cache_dir=tmp_path / "cache")
    assert list(t.events["name"].astype(str)) == ["tb-op"]
    # A link added to the mirror run that leaves the tb folder is refused.
    (mirror_run / layout.TRACES_DIR / layout.trace_file_name("rank9", 9)).symlink_to(outside / "secret.pt.trace.json.gz")
    (t,) = load_traces(mirror_run, cache_dir=tmp_path / "cache")
    assert list(t.events["name"].astype(str)) == ["tb-op"] and any("rank9" in w for w in t.warnings)
    # A run that only claims to be a mirror (its manifest says imported_from) is not trusted.
    fake_store = tmp_path / "fake-store"
    fake, _ = rf.create_run(fake_store, "fake", command=("x",), extra={"imported_from": str(outside / "x")})
    (fake / layout.TRACES_DIR).mkdir()
    (fake / layout.TRACES_DIR / layout.trace_file_name("rank0", 1)).symlink_to(outside / "secret.pt.trace.json.gz")
    assert tbprofiler.mirrored_folder(fake) is None
    with pytest.raises(TraceError, match="outside"):
        load_traces(fake, cache_dir=tmp_path / "cache")


@FAULT
def test_a_mirror_at_its_default_place_is_recognised_in_a_fresh_process(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHSCOPE_CACHE", str(tmp_path / "user-cache"))
    tb = tmp_path / "tb"
    (tb / "job").mkdir(parents=True)
    _trace(tb / "job" / "worker0.1.pt.trace.json.gz")
    store = tbprofiler.mirror_tb_folder(tb)
    assert store is not None
    monkeypatch.setattr(tbprofiler, "_BUILT", {})  # as a later process (e.g. `torchscope analyze`) sees it
    ((mirror_run, _),) = rf.list_runs(store).runs
    assert tbprofiler.mirrored_folder(mirror_run) == tb.resolve()
    (t,) = load_traces(mirror_run, cache_dir=tmp_path / "cache")
    assert t.n_events == 1
