"""What a remote store holds, listed incrementally: the top level, the change markers, and only the runs that changed (data layer).

Listing a whole store costs one request per 1,000 objects (``ListObjectsV2``), and a store of
10,000 runs with traces per rank holds hundreds of thousands. :func:`list_store` lists instead:

1. the store's top level with a delimiter (run folders and top-level objects; one request per
   1,000 runs);
2. ``<store>/.torchscope/changes/``, where every Torchscope writer (the launcher's uploader,
   ``torchscope sync``, ``import``, the Runs page's edits) puts one small object per run after
   the run's files (runformat ``store_url.CHANGES_DIR``): its ETag changes whenever the run did;
3. only the run folders that are new, whose marker changed, or that have no marker (written by
   another tool), each with a listing of its own -- or the whole store at once when that is
   fewer requests.

Runs whose marker is unchanged keep the objects recorded at their last listing. A run folder gone
from the top level is gone from the result. A top level with a suspicious name (an empty, ``.``
or ``..`` segment, a backslash...) is listed whole, so that :func:`app.data.store_fs.key_problem`
sees and names every hostile key.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from profiler_agent.runformat.store_url import CHANGES_DIR, STORE_META_DIR

__all__ = ["Listing", "list_store"]

_PAGE = 1000  # objects per listing request (S3's ListObjectsV2, GCS and Azure alike)


@dataclass(frozen=True)
class Listing:
    """What :func:`list_store` found: ``objects`` (key relative to the store → fsspec info, or
    ``{"token": ...}`` for an object of an unchanged run), ``runs`` (top-level folder → its
    marker's token, "" without one), ``relisted`` (folders listed again now) and ``whole``
    (whether the store was listed whole)."""

    objects: dict[str, dict[str, Any]]
    runs: dict[str, str]
    relisted: tuple[str, ...]
    whole: bool


def _rel(name: str, base: str) -> str | None:
    prefix = base + "/"
    return name[len(prefix):] if name.startswith(prefix) else None


def _find(fs: Any, path: str) -> dict[str, dict[str, Any]]:  # fs: fsspec.AbstractFileSystem (untyped)
    with contextlib.suppress(Exception):
        fs.invalidate_cache(path)  # fsspec keeps listings: this must see new objects
    found = fs.find(path, detail=True, withdirs=False)
    return {str(k): dict(v) for k, v in found.items() if v.get("type", "file") != "directory"}


def _ls(fs: Any, path: str) -> list[dict[str, Any]]:
    with contextlib.suppress(Exception):
        fs.invalidate_cache(path)
    return [dict(i) for i in fs.ls(path, detail=True, refresh=True)]


def _suspicious(rel: str | None) -> bool:
    return not rel or "/" in rel or "\\" in rel or "\x00" in rel or rel in (".", "..") or rel[1:2] == ":"


def list_store(fs: Any, base: str, known_objects: Mapping[str, str], known_runs: Mapping[str, str],
               token: Callable[[dict[str, Any]], str]) -> Listing:
    """List the store at ``base`` in ``fs``, re-listing only the runs that changed since
    ``known_runs`` (folder → marker token of the last listing; ``known_objects``: key → token).
    Raises what the backend raises (offline, credentials, a missing bucket)."""
    try:
        top = _ls(fs, base)
    except FileNotFoundError:  # an empty prefix, or a missing bucket: the full listing tells which (it raises)
        everything = {r: v for k, v in _find(fs, base).items() if (r := _rel(k, base)) is not None}
        return Listing(everything, {}, (), True)
    folders: set[str] = set()
    objects: dict[str, dict[str, Any]] = {}
    suspicious = False
    for info in top:
        rel = _rel(str(info.get("name", "")), base)
        if _suspicious(rel):
            suspicious = True
        elif info.get("type") == "directory":
            folders.add(str(rel))
        else:
            objects[str(rel)] = info
    markers: dict[str, str] = {}
    if STORE_META_DIR in folders:
        with contextlib.suppress(FileNotFoundError):
            for info in _ls(fs, f"{base}/{CHANGES_DIR}"):
                if info.get("type") != "directory":
                    markers[str(info.get("name", "")).rsplit("/", 1)[-1]] = token(info)
    runs = {d: markers.get(d, "") for d in sorted(folders) if d != STORE_META_DIR}
    stale = [d for d in runs if not runs[d] or known_runs.get(d) != runs[d]]
    whole_cost = len(known_objects) // _PAGE + 1
    if suspicious or len(stale) > whole_cost:
        listed = {r: v for k, v in _find(fs, base).items() if (r := _rel(k, base)) is not None}
        return Listing(listed, runs, tuple(stale), True)
    for d in stale:
        for k, v in _find(fs, f"{base}/{d}").items():
            if (r := _rel(k, base)) is not None:
                objects[r] = v
    kept = {d for d in runs if d not in stale}
    for rel, tok in known_objects.items():
        if rel.split("/", 1)[0] in kept:
            objects[rel] = {"token": tok}
    return Listing(objects, runs, tuple(stale), False)
