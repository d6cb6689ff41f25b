"""`torchscope import`: turn a trace file, a torch-tb-profiler log folder or a TensorBoard log folder into runs (CLI layer)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from app.errors import UsageError
from app.workspace.imports import import_into_store
from profiler_agent.runformat import Manifest, layout
from profiler_agent.runformat.store_url import check_store_url, is_store_url, spool_root
from profiler_agent.upload import sync_run

HELP = "import a trace file, a folder of traces, a torch-tb-profiler or a TensorBoard log folder as runs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        help="a *.json[.gz] trace, a folder of traces (one run), a tb-profiler log folder (one run per "
        "sub-folder), or a TensorBoard log folder (one run per folder of events.out.tfevents.* files, their "
        "scalars as metrics; a folder with traces and event files makes one run with both)",
    )
    parser.add_argument(
        "--root", help=f"run store folder or URL (s3://bucket/prefix) to import into (default "
        f"${layout.ROOT_ENV} or ./{layout.DEFAULT_ROOT})"
    )
    parser.add_argument(
        "--name", help="run name (default: the file or folder name; with several runs, a prefix)"
    )
    parser.add_argument("--new", action="store_true",
                        help="make a new run even when this source was imported before (default: update that run)")
    parser.add_argument("--no-summary", action="store_true",
                        help="do not analyse the traces at import (faster for a large folder; the Runs list then "
                             "shows 'in trace' until a run is opened or analysed)")
    parser.add_argument("--json", action="store_true",
                        help='print {"runs": [{"id", "name", "path", "started_at"}], "skipped": [{"path", '
                        '"reason"}]} (started_at: epoch seconds)')


def _when(started_at: float | None) -> str:
    if started_at is None:
        return "start unknown"
    return datetime.fromtimestamp(started_at, UTC).strftime("started %Y-%m-%d %H:%M:%S UTC")


def _upload(created: tuple[tuple[Path, Manifest], ...], url: str) -> None:
    """Upload runs imported into the spool of the store ``url`` (raises UsageError when one fails)."""
    for run_dir, _ in created:
        done = sync_run(run_dir, url)
        if not done.complete:
            raise UsageError(f"{url}/{run_dir.name}: upload incomplete ({done.failed[0]}); the run is kept in "
                             f"{run_dir}; finish it with: torchscope sync --root {url}")


def run(args: argparse.Namespace) -> int:
    target = args.root or os.environ.get(layout.ROOT_ENV) or None
    url = check_store_url(target) if target and is_store_url(target) else None
    # A store URL: import into its local spool, then upload (as `torchscope run --root URL` does).
    result = import_into_store(args.path, args.name, spool_root(url) if url else args.root,
                               new=getattr(args, "new", False), summarize=not getattr(args, "no_summary", False))
    if url:
        _upload(result.created, url)
    root = url or result.root
    # What was left out goes to stderr in both modes, so that it is seen and --json stays parseable.
    for s in result.skipped:
        print(f"skipped {s.path}: {s.reason}", file=sys.stderr)
    if args.json:
        rows = [{"id": p.name, "name": m.name, "path": f"{url}/{p.name}" if url else str(p), "started_at": m.started_at,
                 "updated": p in result.updated} for p, m in result.created]
        skipped = [{"path": str(s.path), "reason": s.reason} for s in result.skipped]
        print(json.dumps({"runs": rows, "skipped": skipped}, indent=2))
    else:
        for p, m in result.created:
            verb = "updated" if p in result.updated else "imported"
            again = " (imported before from the same source; --new makes another run)" if p in result.updated else ""
            print(f"{verb} {f'{url}/{p.name}' if url else p} ({_when(m.started_at)}){again}")
        left = f"; {len(result.skipped)} file(s) or folder(s) skipped, reasons on stderr" if result.skipped else ""
        print(f"{len(result.created)} run(s) imported into {root}{left}; browse them with: torchscope ui --root {root}")
    return 0
