"""Names of every file and folder of the run format (run-format layer, stdlib only).

This is the only module that spells the on-disk names. Writers (the agent) and readers (the
app, the CLI) both go through these constants and helpers.
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

from .store_url import UnsupportedStoreError, is_store_url, scrub_url

__all__ = [
    "MANIFEST",
    "MANIFEST_LOCK",
    "METRICS",
    "SYSTEM",
    "AGENT_ERRORS",
    "TRACES_DIR",
    "MEMORY_DIR",
    "GRAPH_DIR",
    "LOGS_DIR",
    "CACHE_DIR",
    "STDOUT_LOG",
    "STDERR_LOG",
    "TRACEBACK_LOG",
    "STATUS_RESERVE",
    "SWEEPS_DIR",
    "is_temp_file",
    "new_run_id",
    "make_run_folder",
    "GRAPH_DOT",
    "GRAPH_SVG",
    "MODULE_TREE",
    "TRACE_FILE_RE",
    "SNAPSHOT_FILE_RE",
    "MEMORY_TIMELINE_RE",
    "DEFAULT_ROOT",
    "ROOT_ENV",
    "trace_file_name",
    "worker_name",
    "rank_from_worker",
    "snapshot_file_name",
    "oom_snapshot_file_name",
    "is_oom_snapshot",
    "list_trace_files",
    "list_snapshot_files",
    "memory_timeline_file_name",
    "list_memory_timeline_files",
    "resolve_root",
    "STORE_META_DIR",
    "JOURNAL",
    "JOURNAL_MAGIC",
    "JOURNALED_FILES",
]

MANIFEST = "run.json"
MANIFEST_LOCK = ".run.json.lock"
METRICS = "metrics.jsonl"
SYSTEM = "system.jsonl"
AGENT_ERRORS = "agent_errors.jsonl"  # failures caught inside the agent, one JSON object a line

TRACES_DIR = "traces"
MEMORY_DIR = "memory"
GRAPH_DIR = "graph"
LOGS_DIR = "logs"
CACHE_DIR = ".cache"

STDOUT_LOG = f"{LOGS_DIR}/stdout.log"
STDERR_LOG = f"{LOGS_DIR}/stderr.log"
TRACEBACK_LOG = f"{LOGS_DIR}/traceback.txt"

GRAPH_DOT = f"{GRAPH_DIR}/backward.dot"
GRAPH_SVG = f"{GRAPH_DIR}/backward.svg"
MODULE_TREE = f"{GRAPH_DIR}/modules.json"
GRAPH_SVG_SKIPPED = "graph_svg_skipped"  # run.json key: why graph/backward.svg is missing

# Space the launcher sets aside at the start so that the final status fits on a full disk.
STATUS_RESERVE = ".status-reserve"
# The store's change journal, <store>/.torchscope/journal: one line "<time_ns> <run folder>\n" appended by
# every writer function that changes a run's run.json, metrics.jsonl or system.jsonl (writer.note_run_changed),
# read by the catalog listing instead of stat-ing every run (docs/catalog.md, "The change journal").
STORE_META_DIR = ".torchscope"
JOURNAL = f"{STORE_META_DIR}/journal"
JOURNAL_MAGIC = "torchscope-journal 1 "  # the first line: this text, a random token, a newline
# The files whose change a journal line announces (the catalog signature's files).
JOURNALED_FILES = frozenset((MANIFEST, METRICS, SYSTEM))

# Sweep state (torchscope sweep): one <sweep id>.json and the Optuna study's SQLite file per
# sweep, inside the store; list_runs skips dot-folders.
SWEEPS_DIR = ".torchscope/sweeps"

DEFAULT_ROOT = "runs"
ROOT_ENV = "TORCHSCOPE_RUNS"

# torch.profiler.tensorboard_trace_handler writes "<worker>.<time_ns>.pt.trace.json[.gz]";
# TensorBoard's plugin, HTA and Perfetto all recognise that suffix.
TRACE_FILE_RE = re.compile(r"^(?P<worker>.+)\.(?P<time_ns>\d+)\.pt\.trace\.json(?:\.gz)?$")
# A snapshot dumped at an out-of-memory error has "oom." before "snapshot.pickle" (group "oom").
SNAPSHOT_FILE_RE = re.compile(r"^(?P<worker>.+)\.(?P<time_ns>\d+)\.(?P<oom>oom\.)?snapshot\.pickle$")
# torch.profiler's export_memory_timeline raw records ([time_ns, action, bytes, category] each),
# gzipped: the ".raw.json.gz" suffix is the one that makes torch write the raw form.
MEMORY_TIMELINE_RE = re.compile(r"^(?P<worker>.+)\.(?P<time_ns>\d+)\.memory_timeline\.raw\.json\.gz$")


def trace_file_name(worker: str, time_ns: int, *, gzip: bool = True) -> str:
    """Return the trace file name tensorboard_trace_handler would use for ``worker``."""
    return f"{worker}.{time_ns}.pt.trace.json" + (".gz" if gzip else "")


_WORKER_RANK_RE = re.compile(r"_rank(?P<rank>\d+)$")


def worker_name(host: str, pid: int, rank: int) -> str:
    """Return the worker part of trace and snapshot names: ``<host>_<pid>_rank<rank>``.

    tensorboard_trace_handler uses ``<host>_<pid>``; the rank suffix lets readers tell the ranks
    of a multi-process job apart even when a trace lacks ``distributedInfo``.
    """
    return f"{host}_{pid}_rank{rank}"


def rank_from_worker(worker: str) -> int | None:
    """Return the rank encoded by :func:`worker_name`, or None for other worker names."""
    m = _WORKER_RANK_RE.search(worker)
    return int(m.group("rank")) if m else None


def snapshot_file_name(worker: str, time_ns: int) -> str:
    """Return the file name of a CUDA allocator snapshot under ``memory/``."""
    return f"{worker}.{time_ns}.snapshot.pickle"


def oom_snapshot_file_name(worker: str, time_ns: int) -> str:
    """Return the file name of the CUDA allocator snapshot dumped at an out-of-memory error (``memory/``)."""
    return f"{worker}.{time_ns}.oom.snapshot.pickle"


def is_oom_snapshot(name: str) -> bool:
    """Whether the snapshot file ``name`` was dumped at an out-of-memory error."""
    m = SNAPSHOT_FILE_RE.match(name)
    return bool(m and m.group("oom"))


def memory_timeline_file_name(worker: str, time_ns: int) -> str:
    """Return the file name of a profiler memory timeline (raw records, gzipped JSON) under ``memory/``."""
    return f"{worker}.{time_ns}.memory_timeline.raw.json.gz"


def is_temp_file(name: str) -> bool:
    """True for a writer's temporary file (hidden, ``.tmp`` in its name): never part of the run.

    Atomic writers name them ``.<final name>.<random>.tmp``; the trace and memory exporters
    ``.<name>.<pid>.json.tmp`` and ``.<pid>.tmp.<name>``. A killed writer can leave one behind.
    """
    return name.startswith(".") and ".tmp" in name


def list_trace_files(run_dir: str | os.PathLike[str]) -> list[Path]:
    """Return the run's trace files, sorted by name (worker, then time)."""
    folder = Path(run_dir) / TRACES_DIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and TRACE_FILE_RE.match(p.name))


def list_snapshot_files(run_dir: str | os.PathLike[str]) -> list[Path]:
    """Return the run's CUDA allocator snapshots, sorted by name."""
    folder = Path(run_dir) / MEMORY_DIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and SNAPSHOT_FILE_RE.match(p.name))


def list_memory_timeline_files(run_dir: str | os.PathLike[str]) -> list[Path]:
    """Return the run's profiler memory timelines, sorted by name (worker, then time)."""
    folder = Path(run_dir) / MEMORY_DIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and MEMORY_TIMELINE_RE.match(p.name))


def _slug(name: str) -> str:
    keep = "".join(c if c.isalnum() or c in "-_." else "-" for c in name.strip())
    return "-".join(part for part in keep.split("-") if part)[:60] or "run"


def new_run_id(name: str, *, now: float | None = None) -> str:
    """Return a folder name that sorts by start time and reads well: 20261130-084012-baseline-3f9a."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now if now is not None else time.time()))
    return f"{stamp}-{_slug(name)}-{os.urandom(2).hex()}"


def make_run_folder(root: str | os.PathLike[str], name: str, *, now: float | None = None) -> str:
    """Make ``root`` (and its parents) and a new, empty run folder in it named by ``new_run_id``;
    return its path. Raises OSError when either cannot be made. Only os calls: the launcher
    makes the folder before the job starts, the manifest after (writer.create_run's ``run_id``)."""
    os.makedirs(root, exist_ok=True)
    for _ in range(10):
        run_dir = os.path.join(root, new_run_id(name, now=now))
        try:
            os.mkdir(run_dir)
        except FileExistsError:
            continue
        return run_dir
    # pragma: no cover - 10 collisions of 16 random bits in one second
    raise FileExistsError(f"{root}: could not find a free run folder name for {name!r}")


def resolve_root(root: str | os.PathLike[str] | None = None) -> Path:
    """Return the run store folder: ``root`` if given, else $TORCHSCOPE_RUNS, else ./runs.

    Raises UnsupportedStoreError for a store URL (``s3://...``): a URL is never a local folder
    (it would become one named ``s3:``); front ends map it to a local mirror or spool first.
    """
    value = str(root) if root is not None and str(root) != "" else os.environ.get(ROOT_ENV)
    if value and is_store_url(value) and not isinstance(root, Path):
        raise UnsupportedStoreError(
            f"{scrub_url(value)}: a store URL, not a local folder; this command does not read or write "
            "remote stores (see docs/stores.md)")
    return Path(value).expanduser() if value else Path(DEFAULT_ROOT)
