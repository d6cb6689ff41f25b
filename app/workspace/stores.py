"""A store named by a folder or a URL, as the local folder the rest of the workspace reads (workspace layer).

Front ends call :func:`local_store` (or :func:`local_ref` for a run or trace named by URL) once,
before anything else of the workspace: a URL (``s3://bucket/prefix``, ``gs://``, ``az://``,
``file://``) is mirrored into the local read cache by app.data.store_fs, and the catalog, the
resolvers and the loaders then see a plain local store.
"""
from __future__ import annotations

import os

from app.data.store_fs import MirrorResult, local_store_root, open_store
from profiler_agent.runformat.store_url import is_store_url, normalize_url

__all__ = ["MirrorResult", "is_store_url", "local_ref", "local_store"]


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
