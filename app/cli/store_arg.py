"""``--root`` and run references given as store URLs, mapped to the local mirror before a command runs (CLI layer, thin).

``torchscope ls|analyze|advise|diff|report --root s3://bucket/prefix`` (or $TORCHSCOPE_RUNS set to
a URL) read the store through its local read cache (app.workspace.stores); a positional run or
trace given as a URL is mapped the same way. What the mirroring skipped (hostile object keys)
or could not do (offline) is printed as warnings on stderr; the command then runs unchanged.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from profiler_agent.runformat import layout
from profiler_agent.runformat.store_url import is_store_url

if TYPE_CHECKING:
    from app.workspace.stores import MirrorResult

__all__ = ["localize_args"]

_REF_ARGS = ("path", "run", "baseline", "candidate")


def _warn(mirror: MirrorResult | None) -> None:
    from app.presentation.terminal import terminal_text

    for w in (mirror.warnings if mirror else ()):
        print(f"warning: {terminal_text(w, 1000)}", file=sys.stderr)


def localize_args(args: argparse.Namespace) -> None:
    """Replace a URL in ``args.root`` ($TORCHSCOPE_RUNS when unset) and in the reference
    arguments by the local mirror's path; ``args.store_url`` keeps the URL (None for a folder).
    The mirroring code (fsspec's side, dataclasses, threads) is imported only when a URL is given:
    ``ls --json`` of a local store pays nothing for it."""
    root = getattr(args, "root", None) or os.environ.get(layout.ROOT_ENV) or None
    args.store_url = None
    if root and is_store_url(root):
        from app.workspace.stores import local_store

        mirror = local_store(root)
        _warn(mirror)
        args.root = str(mirror.root)
        args.store_url = mirror.url
    for name in _REF_ARGS:
        value = getattr(args, name, None)
        if isinstance(value, str) and is_store_url(value):
            from app.workspace.stores import local_ref

            local, ref_mirror = local_ref(value)
            _warn(ref_mirror)
            setattr(args, name, local)
