"""Store URLs: which ``--root`` values name a remote store, which are supported, how to show them (run-format layer, stdlib only).

A run store is a local folder or an fsspec URL (``s3://bucket/prefix``, ``gs://``, ``az://``,
``file://``). Both the agent (spool and upload) and the app (read cache) decide here what a root
is, so that ``torchscope run`` and ``torchscope ls`` never disagree, and so that no code path
turns ``s3://b/p`` into a local folder named ``s3:``. Credentials never come from the URL's
text into a message: :func:`scrub_url` drops ``user:password@``.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from .errors import TorchscopeError

__all__ = [
    "BACKENDS",
    "CACHE_ENV",
    "CHANGES_DIR",
    "STORE_META_DIR",
    "SPOOL_ENV",
    "UnsupportedStoreError",
    "cache_home",
    "check_store_url",
    "is_store_url",
    "normalize_url",
    "scrub_url",
    "spool_root",
    "url_digest",
]

# scheme → the module that gives fsspec that backend ("" = built into fsspec). Other fsspec
# schemes (hdfs://, http://, memory://) are refused until someone tests them.
BACKENDS: dict[str, str] = {
    "s3": "s3fs", "s3a": "s3fs",
    "gs": "gcsfs", "gcs": "gcsfs",
    "az": "adlfs", "abfs": "adlfs", "abfss": "adlfs",
    "file": "",
}
# Where the read cache of remote stores and the agent's spool live (default ~/.cache/torchscope).
CACHE_ENV = "TORCHSCOPE_CACHE"
# A remote store's own metadata, never mirrored (the mirror's local .torchscope/ holds its catalog index).
STORE_META_DIR = ".torchscope"
# One small object per run, <store>/.torchscope/changes/<run id>, put by every Torchscope writer after the
# run's files: one listing of this folder tells a reader which runs changed (app/data/store_fs.py).
CHANGES_DIR = f"{STORE_META_DIR}/changes"
# Where `torchscope run --root URL` writes before uploading (default <cache>/spool/<digest of URL>).
SPOOL_ENV = "TORCHSCOPE_SPOOL"

_URL_RE = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)$", re.DOTALL)
_USERINFO_RE = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@")


class UnsupportedStoreError(TorchscopeError, ValueError):
    """A store URL whose scheme is not supported, or whose backend library is not installed."""


def is_store_url(root: str | os.PathLike[str] | None) -> bool:
    """True when ``root`` is written as a URL (``scheme://...``), supported or not."""
    return root is not None and not isinstance(root, Path) and bool(_URL_RE.match(str(root)))


def scrub_url(text: str) -> str:
    """``text`` with any ``user:password@`` after the scheme removed (for messages and cache names)."""
    return _USERINFO_RE.sub(lambda m: m.group("scheme"), str(text))


def normalize_url(url: str) -> str:
    """The scrubbed URL with its scheme lower-cased and no trailing slash: the store's one spelling."""
    m = _URL_RE.match(scrub_url(url).strip())
    if not m:
        raise UnsupportedStoreError(f"{scrub_url(url)!r}: not a store URL (scheme://bucket/prefix)")
    return f"{m.group('scheme').lower()}://{m.group('rest').rstrip('/')}"


def check_store_url(url: str) -> str:
    """The normalized URL, after checking its scheme is supported and its backend is installed.

    Raises UnsupportedStoreError naming the URL (scrubbed), the supported schemes or the package
    to install.
    """
    norm = normalize_url(url)
    scheme = norm.split("://", 1)[0]
    if scheme not in BACKENDS:
        supported = ", ".join(f"{s}://" for s in BACKENDS)
        raise UnsupportedStoreError(
            f"{norm}: the scheme {scheme}:// is not supported as a run store (supported: {supported}, "
            "or a local folder)")
    if not norm.split("://", 1)[1].strip("/"):
        raise UnsupportedStoreError(f"{norm}: needs a bucket or folder after {scheme}://")
    import importlib.util  # here, not at the top: every run-format reader imports this module

    module = BACKENDS[scheme]
    for needed in ("fsspec", module):
        if needed and importlib.util.find_spec(needed) is None:
            raise UnsupportedStoreError(
                f"{norm}: the {scheme}:// backend needs the Python package {needed!r}, which is not "
                f"installed (pip install {needed})")
    return norm


def url_digest(url: str) -> str:
    """A short stable name for the store ``url`` (credentials scrubbed before hashing)."""
    import hashlib  # ~6 ms (OpenSSL): only a store URL pays it, not every job's launcher

    return hashlib.sha256(normalize_url(url).encode("utf-8")).hexdigest()[:20]


def cache_home() -> Path:
    """$TORCHSCOPE_CACHE, else $XDG_CACHE_HOME/torchscope, else ~/.cache/torchscope."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "torchscope"


def spool_root(url: str) -> Path:
    """The local folder where runs for the store ``url`` are written before upload:
    $TORCHSCOPE_SPOOL/<digest>, else <cache home>/spool/<digest>."""
    env = os.environ.get(SPOOL_ENV)
    base = Path(env).expanduser() if env else cache_home() / "spool"
    return base / url_digest(url)
