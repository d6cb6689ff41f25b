"""A run store named by a local path or an fsspec URL, read through a local mirror (data layer).

``open_store(url)`` gives a :class:`StoreFS`; :meth:`StoreFS.mirror` copies the remote store's
objects into a local read cache and returns the local folder, which every other reader of the
app (app/data, app/workspace) then reads as a plain store. The cache lives in
``<cache home>/stores/<digest of the URL>/mirror`` (cache home: ``$TORCHSCOPE_CACHE``, else
``~/.cache/torchscope``); ``objects.json`` beside it records each mirrored object's ETag (or
mtime and size where a backend has no ETag), so a second open reads no object again unless it
changed; it lists only the store's top level, the runs' change markers and the runs whose marker
changed (app/data/store_listing.py). When the listing fails (offline, expired credentials) the last
mirror is shown, with a warning. :meth:`StoreFS.edit_manifest` writes a Runs page edit (tags,
notes) into the store's run.json itself, conditionally on its ETag where the backend allows.

Object keys come from whoever can write to the bucket: a key with ``..``, an absolute path,
a NUL, a backslash or an empty segment is never written (it would leave, or alias inside, the
cache folder); it is skipped with a warning naming the key, and every written path is checked
once more with :func:`app.data.safe_io.resolve_inside`. Readers' derived ``.cache/`` folders and
writers' temporary files are neither downloaded nor deleted.

Credentials come only from each backend's own environment and configuration (AWS_* variables
and ~/.aws for s3://, GOOGLE_APPLICATION_CREDENTIALS for gs://, AZURE_* for az://); URLs are
scrubbed of ``user:password@`` before they are shown, hashed or stored.

Errors: :class:`StoreError` (a TorchscopeError) when a store cannot be listed and has no mirror
yet; ``UnsupportedStoreError`` (runformat) for an unknown scheme or a missing backend package.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.data.safe_io import UnsafePath, resolve_inside
from app.data.store_listing import list_store
from profiler_agent.runformat import (
    Manifest,
    RunStatus,
    atomic_write_json,
    atomic_write_text,
    effective_status,
    layout,
    manifest_from_dict,
    manifest_to_dict,
    note_run_changed,
)
from profiler_agent.runformat.errors import TorchscopeError
from profiler_agent.runformat.store_url import (
    CHANGES_DIR,
    STORE_META_DIR,
    cache_home,
    check_store_url,
    is_store_url,
    scrub_url,
    url_digest,
)

__all__ = [
    "MirrorResult",
    "StoreError",
    "StoreFS",
    "key_problem",
    "local_store_root",
    "object_token",
    "open_store",
    "store_of_mirror",
]

_INDEX_NAME = "objects.json"
_MIRROR_DIR = "mirror"
_INDEX_VERSION = 2
_EDIT_TRIES = 3  # reads and conditional puts of a manifest edit before giving up
_CONDITIONAL_PUT = ("s3", "s3a")  # backends whose put honours If-Match (the ETag read)
_BATCH = 256  # objects fetched in one call (concurrently by s3fs, gcsfs, adlfs)


class StoreError(TorchscopeError):
    """A remote store that cannot be listed or read (names the URL, scrubbed, and the cause)."""


@dataclass(frozen=True)
class MirrorResult:
    """The local folder that mirrors a store, and what the last mirroring did."""

    root: Path  # read this as a plain run store
    url: str | None  # the store's URL (scrubbed), None for a local folder
    fetched: int = 0  # objects downloaded now
    reused: int = 0  # objects already in the cache, unchanged remotely
    removed: int = 0  # local copies of objects gone remotely
    offline: bool = False  # the listing failed: the last mirror is shown as it was
    warnings: tuple[str, ...] = ()


def key_problem(rel: str) -> str | None:
    """Why the object key ``rel`` (relative to the store) cannot be a local path, or None."""
    if "\x00" in rel:
        return "it holds a NUL character"
    if "\\" in rel:
        return "it holds a backslash"
    if rel.startswith("/") or (len(rel) > 1 and rel[1] == ":"):
        return "it is an absolute path"
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "it has an empty, '.' or '..' segment"
    return None


def object_token(info: dict[str, Any]) -> str:
    """What says an object changed: its ETag, else its mtime and size."""
    for key in ("ETag", "etag", "md5Hash", "content_md5"):
        value = info.get(key)
        if value:
            return f"etag:{str(value).strip(chr(34))}"
    mtime = info.get("mtime") or info.get("LastModified") or info.get("last_modified") or info.get("updated")
    return f"mtime:{mtime}:{info.get('size')}"


def _skipped_locally(rel: str) -> bool:
    """Derived caches, writers' temp files and the store's own metadata (change markers): never
    mirrored (readers make their own caches; the mirror's .torchscope/ holds its catalog index)."""
    parts = rel.split("/")
    return parts[0] == STORE_META_DIR or layout.CACHE_DIR in parts[:-1] or layout.is_temp_file(parts[-1])


def _precondition_failed(e: BaseException) -> bool:
    """Whether a conditional put failed because the object changed (S3: 412 PreconditionFailed)."""
    response = getattr(e.__cause__, "response", None)
    if isinstance(response, dict):
        error = response.get("Error") or {}
        status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        if error.get("Code") == "PreconditionFailed" or status == 412:
            return True
    text = str(e).lower()
    return "precondition" in text or "pre-condition" in text


def _scrub(e: BaseException) -> str:
    return scrub_url(f"{type(e).__name__}: {e}")[:300]


class StoreFS:
    """One store URL: its fsspec file system, its base path there and its local read cache."""

    def __init__(self, url: str) -> None:
        self.url = check_store_url(url)
        self.cache_dir = cache_home() / "stores" / url_digest(self.url)
        self.mirror_dir = self.cache_dir / _MIRROR_DIR
        self._fs: Any = None  # fsspec.AbstractFileSystem (untyped library)
        self._base = ""
        self._lock = threading.Lock()
        self._last: tuple[float, MirrorResult] | None = None

    @property
    def fs(self) -> Any:
        """The fsspec file system (created on first use; credentials from the backend's environment)."""
        if self._fs is None:
            import fsspec

            # its own instance: fsspec's shared ones keep the settings (endpoint, credentials) they were made with
            self._fs, base = fsspec.core.url_to_fs(self.url, skip_instance_cache=True)
            self._base = str(base).rstrip("/")
        return self._fs

    @property
    def base(self) -> str:
        """The store's path inside its file system (``bucket/prefix`` for s3://)."""
        _ = self.fs
        return self._base

    def list_objects(self) -> dict[str, dict[str, Any]]:
        """Every object under the store, listed whole: key relative to the store → its fsspec info."""
        fs = self.fs
        with contextlib.suppress(Exception):
            fs.invalidate_cache(self.base)  # fsspec keeps listings: this must see new runs
        found = fs.find(self.base, detail=True, withdirs=False)
        prefix = self.base + "/"
        return {str(k)[len(prefix):]: dict(v) for k, v in found.items()
                if str(k).startswith(prefix) and v.get("type", "file") != "directory"}

    def mirror(self, *, max_age_s: float = 0.0) -> MirrorResult:
        """Bring the local mirror up to date and return it; a mirror younger than ``max_age_s``
        (seconds, this process) is returned as it is. Raises StoreError when the store cannot
        be listed and no mirror exists yet."""
        with self._lock:
            if self._last is not None and time.monotonic() - self._last[0] < max_age_s:
                return self._last[1]
            result = self._mirror()
            self._last = (time.monotonic(), result)
            return result

    def _mirror(self) -> MirrorResult:
        known, known_runs = self._read_index()
        try:
            # the top level, the change markers, and only the runs that changed (app/data/store_listing.py)
            listing = list_store(self.fs, self.base, known, known_runs, object_token)
        except Exception as e:  # noqa: BLE001 - any backend error: offline, auth, missing bucket
            if not self.mirror_dir.is_dir():
                raise StoreError(f"{self.url}: cannot list the store ({_scrub(e)})") from None
            return MirrorResult(self.mirror_dir, self.url, offline=True, warnings=(
                f"{self.url}: cannot list the store ({_scrub(e)}); showing the local copy in {self.mirror_dir}",))
        self.mirror_dir.mkdir(parents=True, exist_ok=True)
        warnings: list[str] = []
        wanted: dict[str, str] = {}
        for rel, info in sorted(listing.objects.items()):
            # Lexical checks here; a symlink planted inside the cache is caught where an object is
            # written (_temp_for resolves its folder with resolve_inside).
            problem = key_problem(rel)
            if problem is not None:
                warnings.append(f"{self.url}: skipped the object {rel!r}: {problem}; it would leave the "
                                f"local cache folder {self.mirror_dir}")
            elif not _skipped_locally(rel):
                wanted[rel] = str(info["token"]) if "token" in info else object_token(info)
        fresh = {rel: tok for rel, tok in wanted.items()
                 if known.get(rel) != tok or not (self.mirror_dir / rel).is_file()}
        # The runs whose files change here, announced in the mirror's change journal before and after
        # (its catalog index stats only those: app.data.change_journal), as the run format's writers do.
        touched = sorted({rel.split("/", 1)[0] for rel in fresh} | {r.split("/", 1)[0] for r in known if r not in wanted})
        for top in touched:
            note_run_changed(self.mirror_dir / top)
        fetched = self._download(fresh, known, warnings)
        removed = self._remove_gone(known, wanted, set(listing.runs) if not listing.whole else None)
        for top in touched:
            note_run_changed(self.mirror_dir / top)
        if fetched or removed or listing.runs != known_runs or not (self.cache_dir / _INDEX_NAME).is_file():
            self._write_index(known, listing.runs)  # an unchanged store rewrites nothing
        return MirrorResult(self.mirror_dir, self.url, fetched=fetched, reused=len(wanted) - len(fresh),
                            removed=removed, warnings=tuple(warnings))

    def edit_manifest(self, run_id: str, change: Callable[[Manifest], Manifest]) -> Path:
        """Apply ``change`` to the run's run.json in the store itself, then to its mirrored copy;
        returns the mirrored run folder. The manifest is read again from the store first, so only
        what ``change`` sets is written over; on S3 the put is conditional on the ETag read
        (``If-Match``) and, when someone else wrote in between, read and applied again. Other
        backends: the last writer wins. Raises StoreError (cannot read or write it, a run still
        being recorded, a bad id)."""
        if key_problem(run_id) is not None or "/" in run_id:
            raise StoreError(f"{self.url}: {run_id!r} is not a run folder of the store")
        path = f"{self.base}/{run_id}/{layout.MANIFEST}"
        where = f"{self.url}/{run_id}/{layout.MANIFEST}"
        for _ in range(_EDIT_TRIES):
            data, etag = self._read_remote(path, where)
            try:
                current = manifest_from_dict(json.loads(data), source=where)
            except (ValueError, TorchscopeError) as e:
                raise StoreError(f"{where}: cannot be edited: {e}") from None
            if effective_status(current) is RunStatus.RUNNING:
                raise StoreError(f"{where}: the run is still being recorded, and its launcher's next upload "
                                 "would replace an edit; edit it when it has ended")
            text = json.dumps(manifest_to_dict(change(current)), indent=2, default=str, allow_nan=True) + "\n"
            match = {"IfMatch": etag} if etag and self.url.split("://", 1)[0] in _CONDITIONAL_PUT else {}
            try:
                self.fs.pipe_file(path, text.encode("utf-8"), **match)
            except OSError as e:
                if match and _precondition_failed(e):
                    continue  # written by someone else since it was read: read it again
                raise StoreError(f"{where}: cannot write it ({_scrub(e)})") from None
            except Exception as e:  # noqa: BLE001 - any backend error
                raise StoreError(f"{where}: cannot write it ({_scrub(e)})") from None
            break
        else:
            raise StoreError(f"{where}: changed by another writer {_EDIT_TRIES} times while saving; try again")
        with contextlib.suppress(Exception):  # readers re-list the run (app/data/store_listing.py)
            self.fs.pipe_file(f"{self.base}/{CHANGES_DIR}/{run_id}",
                              json.dumps({"id": run_id, "edited_at_ns": time.time_ns()}).encode("utf-8"))
        return self._mirror_edit(run_id, path, text)

    def _read_remote(self, path: str, where: str) -> tuple[bytes, str | None]:
        try:
            with contextlib.suppress(Exception):
                self.fs.invalidate_cache(path)
            info = self.fs.info(path)
            data = self.fs.cat_file(path)
        except FileNotFoundError:
            raise StoreError(f"{where}: not in the store (deleted remotely?)") from None
        except Exception as e:  # noqa: BLE001 - any backend error
            raise StoreError(f"{where}: cannot read it ({_scrub(e)})") from None
        # The ETag of the HEAD before the read: if the object changed in between, the
        # conditional put fails and the edit is read and applied again.
        etag = info.get("ETag") or info.get("etag")
        return bytes(data), (str(etag) if etag else None)

    def _mirror_edit(self, run_id: str, path: str, text: str) -> Path:
        """The edited manifest written into the mirror, with its new token: the next open reads nothing."""
        rel = f"{run_id}/{layout.MANIFEST}"
        with self._lock:
            known, runs = self._read_index()
            try:
                token = object_token(dict(self.fs.info(path)))
            except Exception:  # noqa: BLE001 - unknown: the next open reads it again
                token = ""
            with contextlib.suppress(OSError, UnsafePath):
                atomic_write_text(resolve_inside(self.mirror_dir, rel), text)
                known[rel] = token
            runs.pop(run_id, None)  # its marker changed: listed again on the next open
            self._write_index(known, runs)
            self._last = None
        return self.mirror_dir / run_id

    def _download(self, fresh: dict[str, str], known: dict[str, str], warnings: list[str]) -> int:
        """Fetch ``fresh`` objects into the mirror, many at once (fsspec's async backends fetch a
        batch concurrently); a batch that fails is fetched object by object, so that one
        unreadable object is one warning."""
        fetched = 0
        items = list(fresh.items())
        for start in range(0, len(items), _BATCH):
            batch = [(rel, tok, tmp) for rel, tok in items[start:start + _BATCH]
                     if (tmp := self._temp_for(rel, warnings)) is not None]
            try:
                self.fs.get([f"{self.base}/{rel}" for rel, _, _ in batch], [str(t) for _, _, t in batch])
                done = [(rel, tok, tmp) for rel, tok, tmp in batch if tmp.is_file()]
            except Exception:  # noqa: BLE001 - retried one by one below, each failure named
                done = []
                for rel, tok, tmp in batch:
                    try:
                        self.fs.get_file(f"{self.base}/{rel}", str(tmp))
                        done.append((rel, tok, tmp))
                    except Exception as e:  # noqa: BLE001 - any backend error
                        warnings.append(f"{self.url}: cannot read the object {rel!r} ({_scrub(e)}); skipped")
            for rel, tok, tmp in done:
                try:
                    os.replace(tmp, self.mirror_dir / rel)
                except OSError as e:
                    warnings.append(f"{self.url}: cannot write the object {rel!r} into the cache ({e}); skipped")
                    continue
                known[rel] = tok
                fetched += 1
            for _, _, tmp in batch:
                with contextlib.suppress(OSError):
                    tmp.unlink()
        return fetched

    def _temp_for(self, rel: str, warnings: list[str]) -> Path | None:
        """A temporary file beside the object's place in the mirror (its folder made and checked)."""
        target = self.mirror_dir / rel
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            resolve_inside(self.mirror_dir, target.parent)  # a symlinked folder planted in the cache
        except (OSError, UnsafePath) as e:
            warnings.append(f"{self.url}: cannot place the object {rel!r} in the cache ({e}); skipped")
            return None
        return target.parent / f".{target.name}.{os.getpid()}.download.tmp"

    def _remove_gone(self, known: dict[str, str], wanted: dict[str, str], folders: set[str] | None) -> int:
        """Delete the local copies of objects gone remotely; a run folder gone from the store's top
        level (``folders``; None: judge by the objects) goes whole, its readers' caches with it."""
        removed = 0
        emptied: set[str] = set()
        for rel in [r for r in known if r not in wanted]:
            del known[rel]
            if key_problem(rel) is not None:
                continue
            with contextlib.suppress(OSError, UnsafePath):
                resolve_inside(self.mirror_dir, rel).unlink()
                removed += 1
            emptied.add(rel.split("/", 1)[0])
        tops = {r.split("/", 1)[0] for r in wanted}
        for top in emptied - tops:
            if folders is not None and top in folders:
                continue  # still in the store (its objects are being written): keep the folder
            with contextlib.suppress(OSError, UnsafePath):
                path = resolve_inside(self.mirror_dir, top)
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
        return removed

    def _read_index(self) -> tuple[dict[str, str], dict[str, str]]:
        """(object key → token, run folder → its change marker's token at its last listing)."""
        try:
            doc = json.loads((self.cache_dir / _INDEX_NAME).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}, {}
        # version 1 had no "runs": every run is listed again once
        if not isinstance(doc, dict) or doc.get("version") not in (1, _INDEX_VERSION) or doc.get("url") != self.url:
            return {}, {}
        objects, runs = doc.get("objects"), doc.get("runs")
        return ({str(k): str(v) for k, v in objects.items()} if isinstance(objects, dict) else {},
                {str(k): str(v) for k, v in runs.items()} if isinstance(runs, dict) else {})

    def _write_index(self, known: dict[str, str], runs: dict[str, str]) -> None:
        with contextlib.suppress(OSError):
            atomic_write_json(self.cache_dir / _INDEX_NAME,
                              {"version": _INDEX_VERSION, "url": self.url, "objects": known, "runs": runs})


_STORES: dict[str, StoreFS] = {}
_STORES_LOCK = threading.Lock()


def open_store(url: str) -> StoreFS:
    """The StoreFS of ``url`` (one per URL and process, so its mirror throttle is shared).
    Raises UnsupportedStoreError for an unknown scheme or a missing backend."""
    norm = check_store_url(url)
    key = f"{cache_home()}|{norm}"
    with _STORES_LOCK:
        if key not in _STORES:
            _STORES[key] = StoreFS(norm)
        return _STORES[key]


def store_of_mirror(path: str | os.PathLike[str]) -> StoreFS | None:
    """The store (opened in this process) whose local mirror holds ``path``, or None (a local store)."""
    target = Path(path).resolve()
    with _STORES_LOCK:
        stores = list(_STORES.values())
    for store in stores:
        mirror = store.mirror_dir.resolve()
        if target == mirror or mirror in target.parents:
            return store
    return None


def local_store_root(root: str | os.PathLike[str] | None, *, max_age_s: float = 0.0) -> MirrorResult:
    """The local folder to read the store ``root`` from (default $TORCHSCOPE_RUNS, else ./runs):
    a local path as it is, a URL through its mirror (brought up to date unless younger than
    ``max_age_s``). Raises UnsupportedStoreError and StoreError."""
    value = str(root) if root is not None and str(root) != "" else os.environ.get(layout.ROOT_ENV, "")
    if value and is_store_url(value):
        return open_store(value).mirror(max_age_s=max_age_s)
    return MirrorResult(layout.resolve_root(Path(value) if value else None), None)
