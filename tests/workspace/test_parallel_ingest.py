"""Parallel ingest (app.workspace.ingest): the 64-rank synthetic set through a Dask LocalCluster and
through the local process pool gives identical per-rank summaries and an identical ``analyze --json``
document; when a pool is used; errors for a missing or unreachable scheduler; progress on stderr only."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.analysis.trace.ranks import find_straggler, rank_summary
from app.cli import main
from app.cli.ingest_options import FilesProgress
from app.data import trace_cache
from app.errors import TraceError, UsageError
from app.workspace import ingest
from app.workspace import traces as ws_traces
from app.workspace.ingest import IngestMode, RankIngest, plan_ingest, rank_step_summaries
from app.workspace.traces import uncached_trace_files
from benchmarks.gen_ranks import write_rank_set

PROJECT_ROOT = Path(__file__).resolve().parents[2]
N_RANKS, SLOW_RANK = 64, 37


@pytest.fixture(scope="module")
def rank_set(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_rank_set(tmp_path_factory.mktemp("ranks64"), N_RANKS, slow_rank=SLOW_RANK)


@pytest.fixture(scope="module")
def dask_scheduler() -> Iterator[str]:
    """An in-process LocalCluster (two single-threaded workers, no dashboard), closed at the end."""
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None)
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


@pytest.fixture(scope="module", autouse=True)
def _no_resource_tracker() -> Iterator[None]:
    """A spawned pool starts multiprocessing's resource tracker, which lives as long as this
    process: stop it after the module (it is started again if anything needs it)."""
    yield
    from multiprocessing import resource_tracker

    stop = getattr(resource_tracker._resource_tracker, "_stop", None)
    if stop is not None:
        stop()


def _analyze_collecting(folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                        *extra: str) -> tuple[dict[str, Any], list[RankIngest]]:
    """``analyze FOLDER --json`` in this process, and the summaries its parallel ingest returned."""
    got: list[RankIngest] = []

    def spy(paths: list[Path], **kwargs: Any) -> list[RankIngest]:
        got.extend(ingest.prefetch_traces(paths, **kwargs))
        return got

    monkeypatch.setattr(ws_traces, "prefetch_traces", spy)
    capsys.readouterr()
    code = main(["analyze", str(folder), "--json", *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out), sorted(got, key=lambda r: r.rank)


@pytest.mark.slow
def test_dask_and_local_paths_give_identical_results(rank_set: list[Path], dask_scheduler: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The acceptance test: both paths ingest the 64-rank set cold, through ``analyze --json``; the
    same summaries, the same cache tables for every rank, the same document.

    The documents are those of the slowed rank (``--rank``): the set analysis of 64 ranks in this
    process costs ~6 s per document, beyond the suite's budget, and it reads only the cache tables
    compared here, so its document could differ only if those did."""
    folder = rank_set[0].parent
    flags = ("--rank", str(SLOW_RANK))
    monkeypatch.setenv(trace_cache.CACHE_ENV, str(tmp_path / "dask-cache"))
    doc_dask, via_dask = _analyze_collecting(folder, capsys, monkeypatch, *flags, "--scheduler", dask_scheduler)

    monkeypatch.setenv(trace_cache.CACHE_ENV, str(tmp_path / "local-cache"))
    monkeypatch.setenv(ingest.WORKERS_ENV, "2")  # tiny files: the automatic plan would stay in this process
    doc_local, via_local = _analyze_collecting(folder, capsys, monkeypatch, *flags)
    assert not uncached_trace_files(rank_set)  # the pool's workers wrote every rank's cache entry

    assert [r.rank for r in via_dask] == list(range(N_RANKS))
    assert len({r.worker for r in via_local}) == 2 and not any(r.from_cache for r in via_dask + via_local)
    assert via_dask == via_local  # rank, events, warnings and the RankStepSummary (steps, collectives)
    for f in rank_set:  # what the two paths' workers wrote: the same tables, metadata and warnings
        a = trace_cache.read_cached(trace_cache.cache_entry_dir(f, tmp_path / "dask-cache"))
        b = trace_cache.read_cached(trace_cache.cache_entry_dir(f, tmp_path / "local-cache"))
        assert a is not None and b is not None and (a.meta, a.warnings, a.n_events) == (b.meta, b.warnings, b.n_events)
        assert all(a.tables[name].equals(b.tables[name]) for name in trace_cache.TABLES), f
    assert doc_dask == doc_local and [t["rank"] for t in doc_local["traces"]] == [SLOW_RANK]
    # cross-rank analysis from the summaries alone finds the slowed rank ...
    rows = rank_summary(rank_step_summaries(via_dask))
    straggler = find_straggler(rows)
    assert straggler is not None and straggler["rank"] == SLOW_RANK
    # ... and the summaries' steps are those the analysis computed from the events
    summary = via_local[SLOW_RANK].summary
    steps = [s["duration_us"] for s in doc_local["steps"]]
    assert summary is not None and steps == [s.duration_us for s in summary.steps]


def test_a_bad_file_is_named_through_dask(tmp_path: Path, dask_scheduler: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(trace_cache.CACHE_ENV, str(tmp_path / "cache"))
    good = write_rank_set(tmp_path / "set", 2, slow_rank=None)
    bad = tmp_path / "set" / "rank2.pt.trace.json"
    bad.write_text("{}", encoding="utf-8")
    with pytest.raises(TraceError, match=r"rank2\.pt\.trace\.json"):
        ingest.ingest_files([*good, bad], scheduler=dask_scheduler)


def test_plan_keeps_small_inputs_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ingest.WORKERS_ENV, raising=False)
    monkeypatch.delenv(ingest.SCHEDULER_ENV, raising=False)
    big = ingest.MIN_PARALLEL_BYTES
    assert plan_ingest(2, 10 * big).mode is IngestMode.SERIAL  # 1–2 files: no pool start-up
    assert plan_ingest(64, big - 1).mode is IngestMode.SERIAL  # many tiny files: neither
    auto = plan_ingest(64, big)
    assert auto.mode is (IngestMode.LOCAL if ingest.local_workers() > 1 else IngestMode.SERIAL)
    assert plan_ingest(5, 0, workers=8).workers == 5  # an explicit number: any 2+ files, at most one per file
    assert plan_ingest(5, 10 * big, workers=1).mode is IngestMode.SERIAL
    monkeypatch.setenv(ingest.WORKERS_ENV, "3")
    assert plan_ingest(4, 0) == ingest.IngestPlan(IngestMode.LOCAL, 3)
    monkeypatch.setenv(ingest.WORKERS_ENV, "many")
    with pytest.raises(UsageError, match="TORCHSCOPE_INGEST_WORKERS='many'"):
        plan_ingest(4, 0)
    monkeypatch.setenv(ingest.SCHEDULER_ENV, "tcp://sched:8786")
    assert plan_ingest(1, 0) == ingest.IngestPlan(IngestMode.DASK, 0, "tcp://sched:8786")


def test_scheduler_errors_name_the_address(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(trace_cache.CACHE_ENV, str(tmp_path / "cache"))
    files = write_rank_set(tmp_path / "set", 1, slow_rank=None)
    monkeypatch.setattr(ingest, "CONNECT_TIMEOUT_S", 0.5)
    address = "tcp://127.0.0.1:9"  # discard port: nothing listens there
    assert main(["analyze", str(files[0]), "--json", "--scheduler", address]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"Dask scheduler {address}: cannot be reached" in err
    for argv in (["diff", str(files[0]), str(files[0])], ["advise", str(files[0])]):  # they ingest through it too
        assert main([*argv, "--json", "--scheduler", address]) == 2
        assert f"Dask scheduler {address}: cannot be reached" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if dask were not installed
    with pytest.raises(UsageError, match=r"not installed \(pip install 'dask\[distributed\]'\)"):
        ingest.ingest_files(files, scheduler=address)


def test_progress_line() -> None:
    out = io.StringIO()
    bar = FilesProgress(out, force=True)
    bar(1, 4, 10 << 20, 40 << 20)
    bar(4, 4, 40 << 20, 40 << 20)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("ingesting traces: 1/4 files, 10.0 MiB of 40.0 MiB") and "ETA" in lines[0]
    assert lines[-1].startswith("ingesting traces: 4/4 files") and len(lines) == 2
    quiet = io.StringIO()
    FilesProgress(quiet)(1, 4, 1, 4)  # not a terminal, no --progress: nothing
    assert quiet.getvalue() == ""


def test_cli_pool_in_a_whole_process(tmp_path: Path) -> None:
    """`analyze --json --progress` over a local pool: JSON alone on stdout, progress on stderr, and
    Dask never imported without a scheduler."""
    files = write_rank_set(tmp_path / "set", 4, slow_rank=1)
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), trace_cache.CACHE_ENV: str(tmp_path / "cache"),
           ingest.WORKERS_ENV: "2"}
    env.pop(ingest.SCHEDULER_ENV, None)
    code = ("import sys\nfrom app.cli import main\nrc = main(sys.argv[1:])\n"
            "print('dask loaded' if 'distributed' in sys.modules or 'dask' in sys.modules else 'no dask', file=sys.stderr)\n"
            "sys.exit(rc)\n")
    proc = subprocess.run([sys.executable, "-c", code, "analyze", str(files[0].parent), "--json", "--progress"],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert sorted(t["rank"] for t in doc["traces"]) == [0, 1, 2, 3]
    assert "ingesting traces: 4/4 files" in proc.stderr and proc.stderr.rstrip().endswith("no dask")
    assert all(trace_cache.read_cached_meta(trace_cache.cache_entry_dir(f, tmp_path / "cache")) for f in files)


def test_a_pool_that_cannot_start_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Worker processes that cannot start (here: the current folder was deleted, which a spawned
    worker needs) make one line naming the files and the way out, not a traceback."""
    files = write_rank_set(tmp_path / "set", 3, slow_rank=None)
    monkeypatch.setenv(trace_cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(ingest.WORKERS_ENV, "2")
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    assert main(["analyze", str(files[0].parent), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot start the ingest worker processes" in err, err
    assert f"{ingest.WORKERS_ENV}=1" in err and "rank0.pt.trace.json" in err
