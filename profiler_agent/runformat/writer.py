"""Writing runs: atomic files, append-only JSONL, manifest updates (run-format layer, stdlib only).

Every file except the ``.jsonl`` ones is written atomically: a temporary file in the same
folder, fsync, then ``os.replace``, so a reader never sees half a file. Manifest updates take
an advisory lock (``fcntl.flock``) so the launcher and the processes it starts can all update
run.json without losing each other's changes.

Every change of a run's run.json, metrics.jsonl or system.jsonl made here is announced in the
store's change journal (:func:`note_run_changed`, ``layout.JOURNAL``): a line before the change and
one after it, so that a catalog listing reads the journal instead of ``stat``-ing every run
(docs/catalog.md, "The change journal").
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import platform
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from . import layout
from .errors import CorruptFileError, NotARunError
from .layout import (
    new_run_id,  # here before; in layout so that the launcher can name a run before loading this module
)
from .liveness import PID_START_FIELD, pid_alive, process_start_ticks, recorded_process_gone
from .schema import Artifact, Manifest, RunStatus, manifest_from_dict, manifest_to_dict

try:  # POSIX only; on other systems updates are atomic but unlocked.
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_json",
    "JsonlWriter",
    "new_run_id",
    "create_run",
    "write_manifest",
    "update_manifest",
    "add_artifact",
    "reserve_status_space",
    "release_status_space",
    "update_manifest_final",
    "remove_temp_files",
    "remove_orphaned_temp_files",
    "ORPHAN_TEMP_AGE_S",
    "note_run_changed",
]


def _create_temp(path: Path) -> tuple[int, str]:
    """A new hidden temp file beside ``path`` (``.NAME.<pid>.<random>.tmp``, layout.is_temp_file).

    os.open with O_EXCL, as tempfile.mkstemp does, without importing tempfile (and its random
    module): the launcher imports this module, and those imports cost ~6 ms of every job's start.
    """
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        try:
            return os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_BINARY", 0), 0o644), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{path.parent}: no free temporary file name for {path.name}")


def note_run_changed(run_dir: str | os.PathLike[str]) -> None:
    """Append ``"<time_ns> <folder>\\n"`` to the change journal of the store that holds ``run_dir``
    (``<store>/.torchscope/journal``, made with its header line when missing); never raises.

    One ``write`` of a short line on an O_APPEND file, so several writers never interleave; then the
    file written is checked to still be the journal (a listing compacting it replaces the file) and
    the line written again when it is not. A folder name the line cannot hold (a newline in it) gives
    a line without a name, which makes the next listing check every run. Costs ~10 us: no fsync."""
    try:
        text = os.fspath(run_dir).rstrip(os.sep)
        store, folder = os.path.split(text)
        if folder in ("", os.curdir, os.pardir):
            return
        name = folder if "\n" not in folder and "\r" not in folder else ""
        data = f"{time.time_ns()} {name}\n".encode("utf-8", "surrogateescape") if name else \
            f"{time.time_ns()}\n".encode()
        path = os.path.join(store or os.curdir, layout.JOURNAL)
        for _ in range(3):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:
                _create_journal(path)
                continue
            try:
                os.write(fd, data)
                mine, now = os.fstat(fd), os.stat(path)
                if (mine.st_ino, mine.st_dev) == (now.st_ino, now.st_dev):
                    return
            except FileNotFoundError:
                continue
            finally:
                os.close(fd)
    except (OSError, ValueError, UnicodeError):
        pass  # a store whose .torchscope/ cannot be written: listings see the change with ls --refresh


def _create_journal(path: str) -> None:
    """A new journal: its header (layout.JOURNAL_MAGIC and a random token) written to a temp file,
    hard-linked into place (never over a journal another writer made first)."""
    folder = os.path.dirname(path)
    made = not os.path.isdir(folder)
    os.makedirs(folder, exist_ok=True)
    header = f"{layout.JOURNAL_MAGIC}{os.urandom(8).hex()}\n".encode()
    try:
        fd, tmp = _create_temp(Path(path))
    except OSError:  # a full disk: leave no empty .torchscope/ behind
        if made:
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        raise
    try:
        os.write(fd, header)
    except OSError:
        os.close(fd)
        os.unlink(tmp)
        if made:
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        raise
    os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    except OSError:  # no hard links here: create it in place (a line landing before the header: a full check)
        with contextlib.suppress(FileExistsError):
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_APPEND, 0o644)
            try:
                os.write(fd, header)
            finally:
                os.close(fd)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see either the old file or the whole new one (a run's
    run.json, metrics.jsonl or system.jsonl announced in the store's journal, before and after)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    journaled = path.name in layout.JOURNALED_FILES
    if journaled:
        note_run_changed(path.parent)
    fd, tmp = _create_temp(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if journaled:
        note_run_changed(path.parent)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Atomically write UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


def _json_default(obj: Any) -> Any:
    # Hyperparameters can be Paths, enums, tuples, numpy scalars...: keep a readable form.
    if hasattr(obj, "item") and callable(obj.item):
        with contextlib.suppress(Exception):
            return obj.item()
    return str(obj)


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Atomically write ``obj`` as indented JSON (non-JSON values are written as strings)."""
    text = json.dumps(obj, indent=2, sort_keys=False, default=_json_default, allow_nan=True)
    atomic_write_text(path, text + "\n")


class JsonlWriter:
    """Append-only JSON-lines file: one object a line, flushed after each write.

    Lines are written with a single ``write`` call on an O_APPEND file, so several processes
    (ranks) can append to the same file without interleaving partial lines. A run's metrics.jsonl
    or system.jsonl is announced in the store's journal when opened and when closed, not per line
    (a listing re-checks a run recorded as running on every listing anyway).
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._journaled = self.path.name in layout.JOURNALED_FILES
        if self._journaled:
            note_run_changed(self.path.parent)
        # Readable too: after a short write the tail is read back to cut a torn fragment off.
        self._f: IO[bytes] | None = open(self.path, "a+b", buffering=0)  # noqa: SIM115

    def write(self, record: Mapping[str, Any]) -> None:
        """Append one line, whole or not at all; raises OSError (e.g. a full disk) when it does not fit."""
        if self._f is None:
            raise ValueError(f"{self.path}: writer is closed")
        line = json.dumps(record, default=_json_default, allow_nan=True, separators=(",", ":")) + "\n"
        data = line.encode("utf-8")
        written = self._f.write(data)
        if written is not None and written < len(data):
            self._untear(written)
        if self._fsync:
            os.fsync(self._f.fileno())

    def _untear(self, written: int) -> None:
        """A short write (full disk): cut the fragment off again, so that no torn line stays in the file."""
        assert self._f is not None
        fd = self._f.fileno()
        if written > 0:
            with contextlib.suppress(OSError):
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    # Our fragment is the file's end unless another rank appended after it: only
                    # cut when the tail is ours (it does not end with a newline).
                    size = os.fstat(fd).st_size
                    if size >= written and os.pread(fd, 1, size - 1) != b"\n":
                        os.ftruncate(fd, size - written)
                finally:
                    if fcntl is not None:
                        fcntl.flock(fd, fcntl.LOCK_UN)
        raise OSError(errno.ENOSPC, f"{self.path}: only {written} of the line's bytes fitted; line dropped")

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None
            if self._journaled:
                note_run_changed(self.path.parent)

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def create_run(
    root: str | os.PathLike[str],
    name: str,
    *,
    command: list[str] | tuple[str, ...] = (),
    config: Mapping[str, Any] | None = None,
    tags: list[str] | tuple[str, ...] = (),
    run_id: str | None = None,
    now: float | None = None,
    **fields: Any,
) -> tuple[Path, Manifest]:
    """Create a new run folder under ``root`` with a ``running`` manifest.

    Returns the run folder and its manifest. Raises OSError when the folder cannot be made.
    ``run_id``: the folder ``root/run_id`` that the caller already made, empty, with
    ``layout.make_run_folder`` at time ``now`` (the launcher names the run before the job starts,
    and writes its manifest while the job's interpreter starts).
    """
    root = Path(root)
    if run_id is not None:
        run_dir = root / run_id
        now = time.time() if now is None else now
    else:
        now = time.time()
        run_dir = Path(layout.make_run_folder(root, name, now=now))
        run_id = run_dir.name
    ticks = process_start_ticks(os.getpid())
    if ticks is not None:  # lets readers tell this process from a later one given the same pid
        fields["extra"] = {PID_START_FIELD: ticks, **fields.get("extra", {})}
    manifest = Manifest(
        id=run_id,
        name=name,
        status=RunStatus.RUNNING,
        started_at=now,
        heartbeat=now,
        command=tuple(command),
        cwd=os.getcwd(),
        host=platform.node(),
        pid=os.getpid(),
        config=dict(config or {}),
        tags=tuple(tags),
        **fields,
    )
    try:
        write_manifest(run_dir, manifest)
    except BaseException as e:
        # Never leave a run folder without its manifest (a full disk): remove the new, empty folder.
        shutil.rmtree(run_dir, ignore_errors=True)
        if isinstance(e, OSError):
            raise OSError(e.errno, f"{run_dir}: cannot write {layout.MANIFEST} ({e.strerror or e}); "
                          "the folder was removed") from None
        raise
    return run_dir, manifest


def reserve_status_space(run_dir: str | os.PathLike[str], nbytes: int = 256 * 1024) -> bool:
    """Set ``nbytes`` of disk aside in the run folder, for the final status on a full disk.

    Returns False when it could not (the disk is already full); the caller goes on regardless.
    """
    path = Path(run_dir) / layout.STATUS_RESERVE
    try:
        with open(path, "wb") as f:
            f.write(b"\0" * nbytes)  # real blocks: tmpfs and ext4 both allocate written zeros
            f.flush()
            os.fsync(f.fileno())
        return True
    except OSError:
        with contextlib.suppress(OSError):
            path.unlink()
        return False


def release_status_space(run_dir: str | os.PathLike[str]) -> None:
    """Give the space that reserve_status_space set aside back (no error when there is none)."""
    with contextlib.suppress(OSError):
        (Path(run_dir) / layout.STATUS_RESERVE).unlink()


def update_manifest_final(
    run_dir: str | os.PathLike[str],
    change: Callable[[Manifest], Manifest] | None = None,
    **fields: Any,
) -> Manifest:
    """``update_manifest`` for the final status, which must not be lost to a full disk.

    The first try uses what space is left; on an OSError the space reserve_status_space set
    aside is given back and the update tried again, twice, a moment apart. The reserve is
    released in any case. Raises what the last try raised.
    """
    try:
        for attempt in range(2):
            try:
                return update_manifest(run_dir, change, **fields)
            except OSError:
                release_status_space(run_dir)
                time.sleep(0.2 * (attempt + 1))
        return update_manifest(run_dir, change, **fields)
    finally:
        release_status_space(run_dir)


def remove_temp_files(run_dir: str | os.PathLike[str], *, older_than: float | None = None) -> list[Path]:
    """Remove writers' temporary files (``layout.is_temp_file``) from the run folder and its artifact
    folders, not from the readers' cache; returns what was removed. Call it only when no writer of
    the run is left (the job has ended). ``older_than``: only files last modified before that time."""
    run_dir = Path(run_dir)
    removed: list[Path] = []
    folders = [run_dir, *(run_dir / d for d in (layout.TRACES_DIR, layout.MEMORY_DIR, layout.GRAPH_DIR,
                                                 layout.LOGS_DIR))]
    for folder in folders:
        try:
            entries = list(folder.iterdir())
        except OSError:
            continue
        for entry in entries:
            if layout.is_temp_file(entry.name) and not entry.is_symlink() and entry.is_file():
                with contextlib.suppress(OSError):
                    if older_than is not None and entry.stat().st_mtime >= older_than:
                        continue
                    entry.unlink()
                    removed.append(entry)
    return removed


# A temporary file of a dead run is left this long before a reader removes it (a job told to stop
# by its launcher's death still flushes for a few seconds).
ORPHAN_TEMP_AGE_S = 120.0


def remove_orphaned_temp_files(run_dir: str | os.PathLike[str], manifest: Manifest, *,
                               now: float | None = None) -> list[Path]:
    """Remove the temporary files a SIGKILLed launcher left behind, once nothing can write them.

    Only for a run still recorded as running whose launcher is known gone on this host
    (``liveness.recorded_process_gone``), whose job process (run.json ``job_pid``) is gone too,
    and only files older than ``ORPHAN_TEMP_AGE_S``. Readers ignore such files anyway; this keeps
    them from piling up (the catalog calls it when it lists a run). Returns what was removed.
    """
    if manifest.status is not RunStatus.RUNNING or recorded_process_gone(manifest) is not True:
        return []
    job = manifest.extra.get("job_pid")
    if isinstance(job, int) and not isinstance(job, bool) and job > 0 and pid_alive(job):
        return []
    return remove_temp_files(run_dir, older_than=(time.time() if now is None else now) - ORPHAN_TEMP_AGE_S)


def write_manifest(run_dir: str | os.PathLike[str], manifest: Manifest) -> None:
    """Atomically write ``manifest`` as the run's run.json."""
    atomic_write_json(Path(run_dir) / layout.MANIFEST, manifest_to_dict(manifest))


# (thread, lock file) pairs this process holds. A signal handler runs in the thread it interrupts:
# the agent's SIGTERM flush, arriving while that thread rewrites run.json under the lock, would
# otherwise wait forever for a lock it holds itself through another file (flock is per open file).
_held: set[tuple[int, str]] = set()


@contextlib.contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    if fcntl is None:  # pragma: no cover
        yield
        return
    import _thread  # built in: no import cost

    path = os.path.abspath(run_dir / layout.MANIFEST_LOCK)
    key = (_thread.get_ident(), path)
    if key in _held:  # this thread holds it already (a handler interrupted the holder): go on
        yield
        return
    _held.add(key)  # before flock: a handler arriving in between skips the lock rather than deadlock
    try:
        with open(path, "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    finally:
        _held.discard(key)


def update_manifest(
    run_dir: str | os.PathLike[str],
    change: Callable[[Manifest], Manifest] | None = None,
    **fields: Any,
) -> Manifest:
    """Read, change and atomically rewrite run.json under a lock; return the new manifest.

    ``change`` receives the current manifest and returns the new one; ``fields`` are applied
    after it with ``Manifest.replace``. ``config`` given in ``fields`` is merged into the
    existing config rather than replacing it.
    """
    run_dir = Path(run_dir)
    path = run_dir / layout.MANIFEST
    with _locked(run_dir):
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise NotARunError(f"{run_dir}: no {layout.MANIFEST}; not a run folder") from None
        except (ValueError, UnicodeDecodeError) as e:
            raise CorruptFileError(f"{path}: not valid JSON ({e})") from None
        manifest = manifest_from_dict(raw, source=str(path))
        if change is not None:
            manifest = change(manifest)
        if "config" in fields:
            fields["config"] = {**manifest.config, **fields["config"]}
        if fields:
            manifest = manifest.replace(**fields)
        write_manifest(run_dir, manifest)
        return manifest


def add_artifact(run_dir: str | os.PathLike[str], artifact: Artifact) -> Manifest:
    """Record ``artifact`` in the manifest (replacing an entry with the same path)."""

    def change(m: Manifest) -> Manifest:
        kept = tuple(a for a in m.artifacts if a.path != artifact.path)
        return m.replace(artifacts=(*kept, artifact))

    return update_manifest(run_dir, change)
