"""Parallel ingest of many trace files (one per rank) into the columnar cache: local processes or a Dask cluster (workspace layer).

A run or folder with many rank traces is parsed one file per task: each task reads its file
with ``app.data.trace.load_trace`` (the streaming parser and the columnar cache that every other
path uses), which writes that rank's cache entry, and returns only a :class:`RankIngest`, a small
per-rank summary (rank, events, warnings, the rank's step rows and compute/communication
overlap). The tables themselves never travel: the calling process opens them from the cache
afterwards, so a parallel ingest gives exactly what a serial one gives.

Where the tasks run (``plan_ingest``):

- with a Dask scheduler (``scheduler=ADDRESS``, ``--scheduler`` on the CLI, or
  ``TORCHSCOPE_DASK_SCHEDULER``) on that cluster's workers. They must see the trace files and the
  cache folder at the same paths as this process (a shared filesystem) and import this project;
  ``distributed`` is imported only then;
- else in a pool of local processes, one per core (``TORCHSCOPE_INGEST_WORKERS`` or ``workers=``
  sets their number; 1 turns the pool off), when at least MIN_PARALLEL_FILES files totalling
  MIN_PARALLEL_BYTES still need parsing: a worker process starts in about half a second (its
  imports), which one or two files, or a few MB of traces, would not win back;
- else in this process, one file after the other.

Progress is reported per file: ``progress(files_done, files_total, bytes_done, bytes_total)``.
"""
from __future__ import annotations

import contextvars
import os
import platform
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.errors import TraceError, UsageError

# The readers and the analysis (pandas, pyarrow) are imported where a file is read: the CLI's
# argument parsing imports this module for its names, and must stay light.
if TYPE_CHECKING:
    from app.analysis.trace.ranks import RankStepSummary
    from app.data.trace_kinds import Progress

__all__ = ["SCHEDULER_ENV", "start_cold_parse", "parse_cold_head", "WORKERS_ENV", "MIN_PARALLEL_FILES", "MIN_PARALLEL_BYTES", "IngestProgress", "IngestMode",
           "IngestPlan", "RankIngest", "ingest_settings", "plan_ingest", "ingest_files", "prefetch_traces",
           "ingest_one", "local_workers", "rank_step_summaries"]

SCHEDULER_ENV = "TORCHSCOPE_DASK_SCHEDULER"
WORKERS_ENV = "TORCHSCOPE_INGEST_WORKERS"
# Below these (files still to parse, and their bytes) the automatic choice stays in this process.
# A spawned worker imports pandas/pyarrow/the analysis in ~0.5 s of one core; the parser reads
# ~70 MB/s per core (benchmarks/README.md "Trace ingest"), so a pool wins from a few tens of MB.
MIN_PARALLEL_FILES = 3
MIN_PARALLEL_BYTES = 48 << 20
CONNECT_TIMEOUT_S = 10.0  # reaching a Dask scheduler

IngestProgress = Callable[[int, int, int, int], None]  # (files_done, files_total, bytes_done, bytes_total)


class IngestMode(StrEnum):
    SERIAL = "serial"  # in this process
    LOCAL = "local"  # a pool of local processes
    DASK = "dask"  # a Dask distributed cluster


@dataclass(frozen=True)
class IngestPlan:
    mode: IngestMode
    workers: int  # processes of the local pool (1 when serial; 0 for Dask: the cluster's)
    scheduler: str | None = None


@dataclass(frozen=True)
class RankIngest:
    """What one ingest task returns for its file: the rank's summary, never its events.

    ``summary`` is the rank's ``RankStepSummary`` (app.analysis.trace.ranks.summarize_rank: per step
    its boundaries and breakdown, and every collective call it entered and left; None for a trace
    without steps), what cross-rank analysis (``rank_summary``) reads. ``seconds``, ``from_cache``,
    ``worker`` and ``cache_entry`` say how and where it was made and are left out of comparisons.
    """

    path: str
    rank: int
    size_bytes: int
    n_events: int
    warnings: tuple[str, ...]
    summary: RankStepSummary | None
    cache_entry: str | None = field(default=None, compare=False)
    from_cache: bool = field(default=False, compare=False)
    seconds: float = field(default=0.0, compare=False)
    worker: str = field(default="", compare=False)

    @property
    def step_time_s(self) -> float | None:
        """Median step duration of the rank (s); None without steps."""
        d = sorted(s.duration_us for s in self.summary.steps) if self.summary is not None else []
        if not d:
            return None
        mid = len(d) // 2
        return float(d[mid] if len(d) % 2 else (d[mid - 1] + d[mid]) / 2) / 1e6


def rank_step_summaries(results: Iterable[RankIngest]) -> dict[int, RankStepSummary]:
    """The input of ``app.analysis.trace.ranks.rank_summary``: each rank's summary (ranks without
    steps left out; of two files with one rank, the first by file name)."""
    out: dict[int, RankStepSummary] = {}
    for r in results:
        if r.summary is not None and r.rank not in out:
            out[r.rank] = r.summary
    return out


def ingest_one(path: str, cache_dir: str | None, use_cache: bool = True) -> RankIngest:
    """The task each worker runs: read ``path`` into the cache under ``cache_dir`` (or from it) and
    return its summary. Raises TraceError naming the file when it cannot be read."""
    from app.analysis.trace.ranks import summarize_rank
    from app.data.trace import load_trace

    started = time.perf_counter()
    t = load_trace(path, cache_dir=cache_dir, use_cache=use_cache)
    return RankIngest(
        path=str(t.path), rank=int(t.rank), size_bytes=t.path.stat().st_size, n_events=int(t.n_events),
        warnings=tuple(t.warnings), summary=summarize_rank(t),
        cache_entry=str(t.cache_entry) if t.cache_entry is not None else None, from_cache=t.from_cache,
        seconds=time.perf_counter() - started, worker=f"{platform.node()}:{os.getpid()}")


# --- settings a front end gives for everything its command ingests --------------------------------------------

@dataclass(frozen=True)
class _Settings:
    scheduler: str | None = None
    workers: int | None = None
    progress: IngestProgress | None = None


_SETTINGS: contextvars.ContextVar[_Settings | None] = contextvars.ContextVar("torchscope_ingest", default=None)


@contextmanager
def ingest_settings(*, scheduler: str | None = None, workers: int | None = None,
                    progress: IngestProgress | None = None) -> Iterator[None]:
    """Inside, every trace set the workspace loads (``load_trace_set``, ``load_trace_files``: analyze,
    diff, advise) is ingested with these: a Dask ``scheduler`` address, a number of local
    ``workers``, a per-file ``progress`` callback. None keeps the default (environment, cores)."""
    token = _SETTINGS.set(_Settings(scheduler, workers, progress))
    try:
        yield
    finally:
        _SETTINGS.reset(token)


def local_workers() -> int:
    """The cores this process may use (its CPU affinity where the system tells it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _env_workers() -> int | None:
    raw = os.environ.get(WORKERS_ENV, "").strip()
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        raise UsageError(f"{WORKERS_ENV}={raw!r}: expected a number of processes (1 = no pool)") from None
    if n < 1:
        raise UsageError(f"{WORKERS_ENV}={raw!r}: expected 1 or more processes")
    return n


def plan_ingest(n_files: int, total_bytes: int, *, scheduler: str | None = None,
                workers: int | None = None) -> IngestPlan:
    """Where ``n_files`` files of ``total_bytes`` are parsed (module docstring). An explicit number
    of workers (argument or TORCHSCOPE_INGEST_WORKERS) uses a pool for any two files or more; the
    automatic one only above MIN_PARALLEL_FILES and MIN_PARALLEL_BYTES."""
    address = (scheduler or os.environ.get(SCHEDULER_ENV, "")).strip()
    if address and n_files > 0:
        return IngestPlan(IngestMode.DASK, 0, address)
    if workers is not None and workers < 1:
        raise UsageError(f"workers={workers}: expected 1 or more processes")
    chosen = workers if workers is not None else _env_workers()
    if chosen is None:
        if n_files < MIN_PARALLEL_FILES or total_bytes < MIN_PARALLEL_BYTES:
            return IngestPlan(IngestMode.SERIAL, 1)
        chosen = local_workers()
    n = min(chosen, n_files)
    return IngestPlan(IngestMode.LOCAL, n) if n >= 2 else IngestPlan(IngestMode.SERIAL, 1)


# --- running the tasks -------------------------------------------------------------------------------------------

_Task = tuple[str, str | None, bool]


def _task(path: Path, use_cache: bool) -> _Task:
    from app.data import trace_cache

    # The entry is chosen here (run .cache or TORCHSCOPE_CACHE of *this* process) and handed to the
    # worker, so that a worker with another environment writes where this process will read.
    entry = trace_cache.cache_entry_dir(path)
    return (str(path), str(entry.parent.parent), use_cache)


def _sizes(paths: Sequence[Path]) -> list[int]:
    out = []
    for p in paths:
        try:
            out.append(p.stat().st_size)
        except OSError as e:
            raise TraceError(f"{p}: cannot be read: {e.strerror or e}") from None
    return out


class _Tally:
    def __init__(self, sizes: Sequence[int], progress: IngestProgress | None) -> None:
        self.total_files, self.total_bytes = len(sizes), sum(sizes)
        self.files = self.bytes = 0
        self.progress = progress

    def done(self, size: int) -> None:
        self.files += 1
        self.bytes += size
        if self.progress is not None:
            self.progress(self.files, self.total_files, self.bytes, self.total_bytes)


def _run_serial(tasks: Sequence[_Task], sizes: Sequence[int], tally: _Tally) -> list[RankIngest]:
    out = []
    for task, size in zip(tasks, sizes):
        out.append(ingest_one(*task))
        tally.done(size)
    return out


def _run_local(tasks: Sequence[_Task], sizes: Sequence[int], workers: int, tally: _Tally) -> list[RankIngest]:
    # Imported here: a command that reads one trace (a cold `analyze`) never starts a pool.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    # spawn, not fork: this process may already run Arrow's and pandas' threads, which fork does not copy.
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
    pending: dict[Future[RankIngest], int] = {}
    out: list[RankIngest] = []
    try:
        try:
            pending = {pool.submit(ingest_one, *task): i for i, task in enumerate(tasks)}
        except OSError as e:  # the worker processes cannot start (no current folder, no processes or files left)
            raise TraceError(f"{tasks[0][0]}: cannot start the ingest worker processes ({type(e).__name__}: "
                             f"{e.strerror or e}); set {WORKERS_ENV}=1 to read the files in this process") from None
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                i = pending.pop(fut)
                try:
                    out.append(fut.result())
                except BrokenProcessPool:
                    raise TraceError(f"{tasks[i][0]}: the ingest worker process died while reading it "
                                     f"(out of memory? set {WORKERS_ENV}=1 to read the files one at a time)") from None
                tally.done(sizes[i])
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return out


def _dask_client(address: str) -> tuple[Any, Any]:  # (Client, as_completed): Any keeps distributed optional
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise UsageError(f"Dask scheduler {address}: Dask's distributed package is not installed "
                         f"(pip install 'dask[distributed]'); or drop --scheduler / {SCHEDULER_ENV}") from None
    try:
        return Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False), as_completed  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError, ValueError, TypeError) as e:
        raise UsageError(f"Dask scheduler {address}: cannot be reached ({type(e).__name__}: {e}); "
                         f"check --scheduler / {SCHEDULER_ENV}") from None


def _run_dask(tasks: Sequence[_Task], sizes: Sequence[int], address: str, tally: _Tally) -> list[RankIngest]:
    client, as_completed = _dask_client(address)
    batch = uuid.uuid4().hex[:8]
    try:
        futures = [client.submit(ingest_one, *task, key=f"torchscope-ingest-{batch}-{i}", pure=False)
                   for i, task in enumerate(tasks)]
        index = {f.key: i for i, f in enumerate(futures)}
        out = []
        try:
            for fut in as_completed(futures, loop=client.loop):
                out.append(fut.result())  # a task's TraceError is raised here as it was in the worker
                tally.done(sizes[index[fut.key]])
        except BaseException:
            client.cancel(futures)
            raise
    finally:
        client.close()
    _check_shared(out, address)
    return out


def _check_shared(results: Iterable[RankIngest], address: str) -> None:
    """Only summaries came back: the caches the workers wrote must be readable here."""
    from app.data import trace_cache

    for r in results:
        if r.cache_entry and trace_cache.read_cached_meta(Path(r.cache_entry)) is None:
            raise TraceError(f"{r.path}: the Dask workers of {address} wrote its cache at {r.cache_entry}, which this "
                             "process cannot read: the workers and this process must share the filesystem")


def ingest_files(paths: Sequence[Path], *, scheduler: str | None = None, workers: int | None = None,
                 progress: IngestProgress | None = None, use_cache: bool = True,
                 plan: IngestPlan | None = None) -> list[RankIngest]:
    """Ingest every file of ``paths`` (cached files are only opened) and return one summary per
    file, sorted by (rank, file name). Raises TraceError naming a file that cannot be read, and
    UsageError when a Dask scheduler is asked for but not installed or not reachable."""
    paths = [Path(p) for p in paths]
    sizes = _sizes(paths)
    if plan is None:
        plan = plan_ingest(len(paths), sum(sizes), scheduler=scheduler, workers=workers)
    tasks = [_task(p, use_cache) for p in paths]
    tally = _Tally(sizes, progress)
    if plan.mode is IngestMode.DASK and plan.scheduler:
        out = _run_dask(tasks, sizes, plan.scheduler, tally)
    elif plan.mode is IngestMode.LOCAL:
        out = _run_local(tasks, sizes, plan.workers, tally)
    else:
        out = _run_serial(tasks, sizes, tally)
    return sorted(out, key=lambda r: (r.rank, Path(r.path).name))


def start_cold_parse(path: Path) -> Path | None:
    """Before a command imports the analysis: when ``path`` (a trace file, or a run or folder with
    one trace file) names one big uncompressed trace that the cache lacks, start parsing part of it
    in a second process (app.data.trace.start_split_parse), so that the parse overlaps the imports
    and uses two cores. The trace file when that was started (the next load of it takes its part;
    ``parse_cold_head`` may parse this process' part before), else None."""
    from app.data.trace import readable_trace_paths, start_split_parse

    try:
        paths = readable_trace_paths(path)
    except (TraceError, UsageError, OSError):
        return None  # the load reports it
    return paths[0] if len(paths) == 1 and start_split_parse(paths[0]) else None


def parse_cold_head(trace: Path, progress: Progress | None = None) -> None:
    """Parse this process' part of the trace ``start_cold_parse`` split, now (while another thread
    imports the analysis: the C accelerator reads without the GIL); its next load then only joins."""
    from app.data import trace_split
    from app.data.trace import system_memory_pool

    with system_memory_pool():
        trace_split.parse_head(trace, progress)


def prefetch_traces(paths: Sequence[Path], *, use_cache: bool = True) -> list[RankIngest]:
    """Before a trace set is opened: parse in parallel the files of ``paths`` the cache lacks, when
    the plan (the current ``ingest_settings``, the environment, their number and size) says a pool
    or a cluster pays; return their summaries ([] when nothing was done here, the caller's serial
    reading then parses them). ``use_cache=False`` (parse again, write nothing) is always serial."""
    if not use_cache or len(paths) == 0:
        return []
    from app.data import trace_cache

    cold = [Path(p) for p in paths if trace_cache.read_cached_meta(trace_cache.cache_entry_dir(Path(p))) is None]
    if not cold:
        return []
    s = _SETTINGS.get() or _Settings()
    plan = plan_ingest(len(cold), sum(_sizes(cold)), scheduler=s.scheduler, workers=s.workers)
    if plan.mode is IngestMode.SERIAL:
        return []
    return ingest_files(cold, progress=s.progress, plan=plan)

