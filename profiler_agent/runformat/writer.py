"""Writing runs: atomic files, append-only JSONL, manifest updates (run-format layer, stdlib only).

Every file except the ``.jsonl`` ones is written atomically: a temporary file in the same
folder, fsync, then ``os.replace``, so a reader never sees half a file. Manifest updates take
an advisory lock (``fcntl.flock``) so the launcher and the processes it starts can all update
run.json without losing each other's changes.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from . import layout
from .errors import CorruptFileError, NotARunError
from .liveness import PID_START_FIELD, process_start_ticks
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
]


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see either the old file or the whole new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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
    (ranks) can append to the same file without interleaving partial lines.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._f: IO[bytes] | None = open(self.path, "ab", buffering=0)  # noqa: SIM115

    def write(self, record: Mapping[str, Any]) -> None:
        if self._f is None:
            raise ValueError(f"{self.path}: writer is closed")
        line = json.dumps(record, default=_json_default, allow_nan=True, separators=(",", ":")) + "\n"
        self._f.write(line.encode("utf-8"))
        if self._fsync:
            os.fsync(self._f.fileno())

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _slug(name: str) -> str:
    keep = "".join(c if c.isalnum() or c in "-_." else "-" for c in name.strip())
    return "-".join(part for part in keep.split("-") if part)[:60] or "run"


def new_run_id(name: str, *, now: float | None = None) -> str:
    """Return a folder name that sorts by start time and reads well: 20261130-084012-baseline-3f9a."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now if now is not None else time.time()))
    return f"{stamp}-{_slug(name)}-{secrets.token_hex(2)}"


def create_run(
    root: str | os.PathLike[str],
    name: str,
    *,
    command: list[str] | tuple[str, ...] = (),
    config: Mapping[str, Any] | None = None,
    tags: list[str] | tuple[str, ...] = (),
    **fields: Any,
) -> tuple[Path, Manifest]:
    """Create a new run folder under ``root`` with a ``running`` manifest.

    Returns the run folder and its manifest. Raises OSError when the folder cannot be made.
    """
    now = time.time()
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for _ in range(10):
        run_id = new_run_id(name, now=now)
        run_dir = root / run_id
        try:
            run_dir.mkdir()
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - 10 collisions of 16 random bits in one second
        raise FileExistsError(f"{root}: could not find a free run folder name for {name!r}")
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
        host=socket.gethostname(),
        pid=os.getpid(),
        config=dict(config or {}),
        tags=tuple(tags),
        **fields,
    )
    write_manifest(run_dir, manifest)
    return run_dir, manifest


def write_manifest(run_dir: str | os.PathLike[str], manifest: Manifest) -> None:
    """Atomically write ``manifest`` as the run's run.json."""
    atomic_write_json(Path(run_dir) / layout.MANIFEST, manifest_to_dict(manifest))


@contextlib.contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    if fcntl is None:  # pragma: no cover
        yield
        return
    with open(run_dir / layout.MANIFEST_LOCK, "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


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
