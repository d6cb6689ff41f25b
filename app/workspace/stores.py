"""A store named by a folder or a URL, as the local folder the rest of the workspace reads (workspace layer).

Front ends call :func:`local_store` (or :func:`local_ref` for a run or trace named by URL) once,
before anything else of the workspace: a URL (``s3://bucket/prefix``, ``gs://``, ``az://``,
``file://``) is mirrored into the local read cache by app.data.store_fs, and the catalog, the
resolvers and the loaders then see a plain local store.
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from app.data.store_fs import MirrorResult, StoreError, local_store_root, open_store, store_of_mirror
from profiler_agent import runformat as rf
from profiler_agent.runformat.store_url import is_store_url, normalize_url

__all__ = ["MirrorResult", "is_store_url", "local_ref", "local_store", "remote_url", "save_tags_and_notes"]


def local_store(root: str | os.PathLike[str] | None, *, max_age_s: float = 0.0) -> MirrorResult:
    """The local folder of the store ``root`` (default $TORCHSCOPE_RUNS, else ./runs); a URL is
    mirrored first (not again within ``max_age_s`` seconds in this process). Raises
    UnsupportedStoreError (scheme or backend) and StoreError (cannot be listed, no mirror yet)."""
    return local_store_root(root, max_age_s=max_age_s)


def local_ref(ref: str) -> tuple[str, MirrorResult | None]:
    """``ref`` as a local path when it is a URL (``s3://bucket/prefix/RUN`` or a trace object in
    it): the parent store is mirrored and the same path inside the mirror returned; other
    references unchanged. Raises as :func:`local_store`."""
    if not is_store_url(ref):
        return ref, None
    norm = normalize_url(ref)
    store, _, leaf = norm.rpartition("/")
    if not leaf or "://" not in store or not store.split("://", 1)[1]:
        mirror = open_store(norm).mirror()
        return str(mirror.root), mirror
    mirror = open_store(store).mirror()
    return str(mirror.root / leaf), mirror


def remote_url(path: str | os.PathLike[str]) -> str | None:
    """The URL of the remote store whose local mirror holds ``path`` (a store or run folder), or None."""
    store = store_of_mirror(path)
    return store.url if store is not None else None


def save_tags_and_notes(run_dir: str | os.PathLike[str], tags: Iterable[str], notes: str) -> rf.Manifest:
    """Set the run's tags and notes and return its new manifest. A run of a remote store is changed in
    the store itself (its run.json, conditionally on the ETag where the backend allows: docs/stores.md),
    then in the local mirror; a local run in its folder. Raises StoreError and the run format's errors."""
    wanted = tuple(dict.fromkeys(t.strip() for t in tags if t.strip()))
    run_dir = Path(run_dir)
    store = store_of_mirror(run_dir)
    if store is None:
        return rf.update_manifest(run_dir, tags=wanted, notes=notes)
    if run_dir.parent.resolve() != store.mirror_dir.resolve():
        raise StoreError(f"{run_dir}: not a run folder of the store {store.url}")
    return rf.read_manifest(store.edit_manifest(run_dir.name, lambda m: m.replace(tags=wanted, notes=notes)))
