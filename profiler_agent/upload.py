"""Upload of a spooled run to a remote store: the launcher's background uploader and ``torchscope sync`` (agent layer).

``torchscope run --root s3://bucket/prefix`` records the run in a local spool folder
(``runformat.store_url.spool_root``) exactly as it would record it in a local store; an
:class:`Uploader` thread of the launcher -- never the job's process -- copies it to
``<url>/<run id>/`` as it grows: every few seconds (``TORCHSCOPE_UPLOAD_INTERVAL_S``, default
2) it puts each file whose size or mtime changed since its last upload, finished files and
append-only ``.jsonl`` and logs alike, and ``run.json`` last, so the remote manifest never lists a
file that is not there yet. A live run therefore shows up remotely within one interval. After
every pass that put something, the run's change marker ``<url>/.torchscope/changes/<run id>`` is
put (runformat ``store_url.CHANGES_DIR``): readers list the markers and re-list only the runs whose
marker changed (app/data/store_listing.py).

Each put is retried with exponential backoff; a put that still fails is logged into the run
(a line in ``logs/upload.log`` and ``run.json`` ``"upload"``: state, errors, last_error) and tried
again on the next pass. Whatever is left when the job ends and the last pass fails, or when the
launcher is killed, is completed by :func:`sync_run` (``torchscope sync``) from the spool:
afterwards every file of the spooled run is in the store with the same bytes. What was uploaded
is remembered in ``<spool>/.upload-state/<run id>.json`` (outside the run folder). Spooled runs
whose upload is complete are deleted after a retention (profiler_agent.spool), at the uploader's
start and by ``sync``.

fsspec and its backend are imported in the uploader's thread, never before the job starts.
Credentials come only from the backend's own environment and configuration.
"""
from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .runformat import Manifest, atomic_write_json, layout, update_manifest
from .runformat.store_url import CHANGES_DIR, check_store_url, scrub_url

__all__ = ["INTERVAL_ENV", "UPLOAD_FIELD", "SyncResult", "Uploader", "connect", "run_files", "state_path", "sync_run",
           "upload_field", "uploaded_unchanged"]

INTERVAL_ENV = "TORCHSCOPE_UPLOAD_INTERVAL_S"
UPLOAD_FIELD = "upload"  # run.json: {"url", "state", "errors", "last_error"}
UPLOAD_LOG = f"{layout.LOGS_DIR}/upload.log"
_STATE_DIR = ".upload-state"
_MARKER_KEY = "/change-marker"  # in the upload state: the last marker put (never a file's relative path)
_DEFAULT_INTERVAL_S = 2.0
_LIVE_BACKOFF_S = (0.5, 1.0)  # retries of one put during the run (then the next pass tries again)
_FINAL_BACKOFF_S = (0.5, 1.0, 2.0, 4.0)  # retries of one put in the last pass and in sync


def connect(url: str) -> tuple[Any, str]:
    """The store's fsspec file system (an instance of its own: fsspec's shared ones keep settings from
    before, such as an endpoint) and the store's path in it. One serves every run of a ``sync``: a
    client costs about half a second to make. Raises UnsupportedStoreError for a bad URL."""
    import fsspec  # here, in the uploader's thread or sync: never on the job's path

    url = check_store_url(url)
    kwargs = {"auto_mkdir": True} if url.startswith("file://") else {"skip_instance_cache": True}
    fs, base = fsspec.core.url_to_fs(url, **kwargs)
    return fs, str(base).rstrip("/")


class _Remote:
    """The store's fsspec file system and the run's prefix in it."""

    def __init__(self, url: str, run_id: str, connection: tuple[Any, str] | None = None) -> None:
        self.url = check_store_url(url)
        self.fs, base = connection if connection is not None else connect(self.url)
        self.prefix = f"{base}/{run_id}"
        self.marker = f"{base}/{CHANGES_DIR}/{run_id}"

    def put(self, local: Path, rel: str) -> None:
        self.fs.put_file(str(local), f"{self.prefix}/{rel}")

    def put_marker(self, text: str) -> None:
        """The run's change marker: readers list the markers, not every run (app/data/store_listing.py)."""
        self.fs.pipe_file(self.marker, text.encode("utf-8"))

    def sizes(self) -> dict[str, int]:
        """Remote objects of the run: key relative to the run → size."""
        with contextlib.suppress(Exception):
            self.fs.invalidate_cache(self.prefix)
        try:
            found = self.fs.find(self.prefix, detail=True, withdirs=False)
        except FileNotFoundError:
            return {}
        cut = len(self.prefix) + 1
        return {str(k)[cut:]: int(v.get("size") or 0) for k, v in found.items()
                if str(k).startswith(self.prefix + "/")}


def run_files(run_dir: Path) -> dict[str, tuple[int, int]]:
    """The run's files to upload, relative path → (size, mtime_ns); run.json is last in order.

    Derived ``.cache/`` folders, writers' temporary files, the manifest lock and the status reserve
    are left out."""
    found: dict[str, tuple[int, int]] = {}
    for folder, dirs, files in os.walk(run_dir):
        dirs[:] = sorted(d for d in dirs if d != layout.CACHE_DIR)
        for name in sorted(files):
            if layout.is_temp_file(name) or name in (layout.STATUS_RESERVE, layout.MANIFEST_LOCK):
                continue
            path = Path(folder, name)
            with contextlib.suppress(OSError):
                st = path.lstat()
                if path.is_file() and not path.is_symlink():
                    found[path.relative_to(run_dir).as_posix()] = (st.st_size, st.st_mtime_ns)
    manifest = found.pop(layout.MANIFEST, None)
    if manifest is not None:
        found[layout.MANIFEST] = manifest
    return found


def state_path(run_dir: Path) -> Path:
    """Where what was uploaded of the spooled run is remembered (beside the run, outside its folder)."""
    return run_dir.parent / _STATE_DIR / f"{run_dir.name}.json"


def _read_state(run_dir: Path) -> dict[str, list[int]]:
    try:
        doc = json.loads(state_path(run_dir).read_text(encoding="utf-8"))
        return {str(k): [int(x) for x in v] for k, v in doc.items()} if isinstance(doc, dict) else {}
    except (OSError, ValueError, TypeError):
        return {}


def _write_state(run_dir: Path, state: dict[str, list[int]]) -> None:
    with contextlib.suppress(OSError):
        atomic_write_json(state_path(run_dir), state)


def _retried(put: Callable[[], None], backoff: tuple[float, ...], sleep: Callable[[float], Any]) -> None:
    for delay in backoff:
        try:
            put()
            return
        except Exception:  # noqa: BLE001, S112 - retried; the last attempt's error is raised
            sleep(delay)
    put()


def upload_field(run_dir: Path) -> dict[str, Any]:
    """The spooled run.json's ``"upload"`` field ({} when absent or unreadable)."""
    try:
        m = json.loads((run_dir / layout.MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    upload = m.get(UPLOAD_FIELD) if isinstance(m, dict) else None
    return upload if isinstance(upload, dict) else {}


def uploaded_unchanged(run_dir: Path) -> bool:
    """True when every file of the spooled run is as it was when last uploaded (the upload state)."""
    state = _read_state(run_dir)
    return bool(state) and not _stale_files(run_dir, state, None)


def _log(run_dir: Path, line: str) -> None:
    with contextlib.suppress(OSError):
        (run_dir / layout.LOGS_DIR).mkdir(parents=True, exist_ok=True)
        with open(run_dir / UPLOAD_LOG, "a", encoding="utf-8") as f:
            f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {scrub_url(line)}\n")


def _mark(run_dir: Path, url: str, state: str, *, errors: int = 0, last_error: str | None = None) -> None:
    """Record the upload's state in the spooled run.json (its "upload" field)."""
    doc: dict[str, Any] = {"url": scrub_url(url), "state": state, "errors": errors}
    if last_error:
        doc["last_error"] = scrub_url(last_error)[:500]

    def change(m: Manifest) -> Manifest:
        return m.replace(extra={**m.extra, UPLOAD_FIELD: doc})

    with contextlib.suppress(Exception):
        update_manifest(run_dir, change)


@dataclass
class _Pass:
    """One pass over the run's files: what it put and the errors it met."""

    put: int = 0
    failed: list[str] = field(default_factory=list)
    marked: bool = False  # the run's change marker was put


def _stale_files(run_dir: Path, state: dict[str, list[int]],
                 remote_sizes: dict[str, int] | None) -> dict[str, tuple[int, int]]:
    """The run's files changed since ``state`` (or missing or of another size in ``remote_sizes``), run.json last."""
    return {rel: sig for rel, sig in run_files(run_dir).items()
            if state.get(rel) != list(sig) or (remote_sizes is not None and remote_sizes.get(rel) != sig[0])}


def _upload_pass(run_dir: Path, remote: _Remote, state: dict[str, list[int]], *, backoff: tuple[float, ...],
                 sleep: Callable[[float], Any], remote_sizes: dict[str, int] | None = None) -> _Pass:
    """Put every file changed since ``state`` (or missing or of another size in ``remote_sizes``),
    in order, stopping at the first that fails: run.json, last, only when every other file went up."""
    result = _Pass()
    for rel, sig in _stale_files(run_dir, state, remote_sizes).items():
        try:
            _retried(lambda rel=rel: remote.put(run_dir / rel, rel), backoff, sleep)  # type: ignore[misc]
        except Exception as e:  # noqa: BLE001 - any backend error: logged into the run, tried again later
            # After its retries the store is likely out of reach: the next pass (or sync) goes on,
            # rather than each remaining file paying its backoff now.
            result.failed.append(f"{rel}: {type(e).__name__}: {e}")
            break
        state[rel] = list(sig)
        result.put += 1
    if result.put:
        state.pop(_MARKER_KEY, None)  # owed until a marker is put after these files
    if not result.failed and _MARKER_KEY not in state:
        # After every file the pass put (run.json included): a reader that sees a new marker lists
        # the run and finds them all. Its text (so its ETag) changes with every pass that put something.
        marker = json.dumps({"id": run_dir.name, "files": len(state) - (_MARKER_KEY in state), "at_ns": time.time_ns()})
        try:
            _retried(lambda: remote.put_marker(marker), backoff, sleep)
            state[_MARKER_KEY] = [1]
            result.marked = True
        except Exception as e:  # noqa: BLE001 - as a failed put: the next pass tries again
            result.failed.append(f"{CHANGES_DIR}/{run_dir.name}: {type(e).__name__}: {e}")
    return result


class Uploader:
    """The launcher's background upload of one spooled run (a daemon thread; see the module doc)."""

    def __init__(self, run_dir: Path, url: str, *, interval_s: float | None = None,
                 sleep: Callable[[float], Any] = time.sleep) -> None:
        self.run_dir = run_dir
        self.url = url
        self.interval_s = interval_s if interval_s is not None else _interval_from_env()
        self.errors = 0
        self.last_error: str | None = None
        self._sleep = sleep
        self._stop = threading.Event()
        self._remote: _Remote | None = None
        self._state = _read_state(run_dir)
        self._lock = threading.Lock()  # one pass at a time (the thread's and the final one)
        self._thread = threading.Thread(target=self._loop, name="torchscope-upload", daemon=True)

    def start(self) -> Uploader:
        self._thread.start()
        return self

    def _loop(self) -> None:
        self._clean_spool()
        while not self._stop.is_set():
            self._pass(_LIVE_BACKOFF_S)
            self._stop.wait(self.interval_s)

    def _clean_spool(self) -> None:
        """Spooled runs of earlier jobs whose upload is complete and older than the retention go
        (profiler_agent.spool); here, in the uploader's thread, so the job never waits on it."""
        from .spool import clean_spool, retention_days

        days = retention_days()
        if days > 0:
            with contextlib.suppress(Exception):
                clean_spool(self.run_dir.parent, older_than_days=days, keep=frozenset({self.run_dir.name}))

    def _pass(self, backoff: tuple[float, ...]) -> bool:
        with self._lock:
            try:
                if self._remote is None:
                    self._remote = _Remote(self.url, self.run_dir.name)
                done = _upload_pass(self.run_dir, self._remote, self._state, backoff=backoff, sleep=self._sleep)
            except Exception as e:  # noqa: BLE001 - e.g. the backend cannot even be set up
                done = _Pass(failed=[f"{type(e).__name__}: {e}"])
            if done.put or done.marked:
                _write_state(self.run_dir, self._state)
            for problem in done.failed:
                self.errors += 1
                self.last_error = problem
                _log(self.run_dir, f"upload to {self.url} failed, will retry: {problem}")
            if done.failed:
                _mark(self.run_dir, self.url, "retrying", errors=self.errors, last_error=self.last_error)
            return not done.failed

    def finish(self) -> bool:
        """Stop the thread and upload what is left (run.json last). Returns whether the remote run
        is complete; when it is not, run.json says so and ``torchscope sync`` completes it."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)
        _mark(self.run_dir, self.url, "complete", errors=self.errors, last_error=self.last_error)
        if self._pass(_FINAL_BACKOFF_S):
            return True
        _mark(self.run_dir, self.url, "incomplete", errors=self.errors, last_error=self.last_error)
        _log(self.run_dir, f"upload to {self.url} incomplete; finish it with: torchscope sync --root {self.url}")
        return False


def _interval_from_env() -> float:
    try:
        value = float(os.environ.get(INTERVAL_ENV, ""))
    except ValueError:
        return _DEFAULT_INTERVAL_S
    return value if value > 0 else _DEFAULT_INTERVAL_S


@dataclass(frozen=True)
class SyncResult:
    """What ``sync_run`` did for one spooled run."""

    run_dir: Path
    put: int
    failed: tuple[str, ...]
    pending: tuple[str, ...] = ()  # with dry_run: the files a sync would put, run.json last

    @property
    def complete(self) -> bool:
        return not self.failed and not self.pending


def sync_run(run_dir: Path, url: str, *, sleep: Callable[[float], Any] = time.sleep,
             dry_run: bool = False, connection: tuple[Any, str] | None = None) -> SyncResult:
    """Complete the upload of the spooled run ``run_dir`` to the store ``url``: every file that is
    missing remotely, has another size there, or changed since its last upload is put, run.json
    last (marked ``"upload": {"state": "complete"}``); with ``dry_run`` only list them
    (``pending``), changing nothing. ``connection``: :func:`connect`'s, shared by the runs of one
    sync. Raises UnsupportedStoreError for a bad URL."""
    remote = _Remote(url, run_dir.name, connection)
    state = _read_state(run_dir)
    upload = upload_field(run_dir)
    if dry_run:
        stale = list(_stale_files(run_dir, state, remote.sizes()))
        if upload.get("state") != "complete" and layout.MANIFEST not in stale:
            stale.append(layout.MANIFEST)  # marked complete, then put
        return SyncResult(run_dir, 0, (), tuple(stale))
    if upload.get("state") != "complete":
        _mark(run_dir, url, "complete", errors=int(upload.get("errors") or 0))
    done = _upload_pass(run_dir, remote, state, backoff=_FINAL_BACKOFF_S, sleep=sleep, remote_sizes=remote.sizes())
    if done.put or done.marked:  # its time says when the run was last uploaded (the spool retention)
        _write_state(run_dir, state)
    for problem in done.failed:
        _log(run_dir, f"sync to {url} failed: {problem}")
    if done.failed:
        _mark(run_dir, url, "incomplete", errors=len(done.failed), last_error=done.failed[-1])
    return SyncResult(run_dir, done.put, tuple(scrub_url(p) for p in done.failed))
