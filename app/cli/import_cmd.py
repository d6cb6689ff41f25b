"""`torchscope import`: turn a trace file, a torch-tb-profiler log folder or a TensorBoard log folder into runs (CLI layer)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime

from app.workspace.imports import import_into_store
from profiler_agent.runformat import layout

HELP = "import a trace file, a folder of traces, a torch-tb-profiler or a TensorBoard log folder as runs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        help="a *.json[.gz] trace, a folder of traces (one run), a tb-profiler log folder (one run per "
        "sub-folder), or a TensorBoard log folder (one run per folder of events.out.tfevents.* files, their "
        "scalars as metrics; a folder with traces and event files makes one run with both)",
    )
    parser.add_argument(
        "--root", help=f"run store to import into (default ${layout.ROOT_ENV} or ./{layout.DEFAULT_ROOT})"
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


def run(args: argparse.Namespace) -> int:
    result = import_into_store(args.path, args.name, args.root, new=getattr(args, "new", False),
                              summarize=not getattr(args, "no_summary", False))
    root = result.root
    # What was left out goes to stderr in both modes, so that it is seen and --json stays parseable.
    for s in result.skipped:
        print(f"skipped {s.path}: {s.reason}", file=sys.stderr)
    if args.json:
        rows = [{"id": p.name, "name": m.name, "path": str(p), "started_at": m.started_at,
                 "updated": p in result.updated} for p, m in result.created]
        skipped = [{"path": str(s.path), "reason": s.reason} for s in result.skipped]
        print(json.dumps({"runs": rows, "skipped": skipped}, indent=2))
    else:
        for p, m in result.created:
            verb = "updated" if p in result.updated else "imported"
            again = " (imported before from the same source; --new makes another run)" if p in result.updated else ""
            print(f"{verb} {p} ({_when(m.started_at)}){again}")
        left = f"; {len(result.skipped)} file(s) or folder(s) skipped, reasons on stderr" if result.skipped else ""
        print(f"{len(result.created)} run(s) imported into {root}{left}; browse them with: torchscope ui --root {root}")
    return 0
