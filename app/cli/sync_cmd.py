"""`torchscope sync`: complete, from the local spool, the upload of runs recorded into a remote store (CLI layer, thin).

``torchscope run --root s3://bucket/prefix`` records into a spool folder and uploads as the job
runs (profiler_agent.upload); when the launcher was killed or the network failed, the spool
still holds every file. ``torchscope sync --root URL`` puts what is missing or changed, run.json
last, so that afterwards each remote run equals its spooled copy file by file. Runs still being
recorded (their launcher alive) are left to their launcher.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from app.errors import UsageError
from app.presentation.terminal import terminal_text
from profiler_agent.runformat import RunStatus, effective_status, is_run_dir, layout, read_manifest
from profiler_agent.runformat.store_url import check_store_url, is_store_url, spool_root
from profiler_agent.upload import sync_run

HELP = "finish uploading runs recorded into a remote store (s3://...) from the local spool"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="*", metavar="RUN",
                        help="run ids in the spool to sync (default: every run spooled for the store)")
    parser.add_argument("--root", help=f"the store URL, s3://bucket/prefix (default ${layout.ROOT_ENV})")
    parser.add_argument("--json", action="store_true",
                        help='print {"root", "spool", "runs": [{"id", "put", "complete", "failed", "skipped"}]}')


def _spooled(spool: Path, wanted: list[str]) -> list[Path]:
    if wanted:
        missing = [w for w in wanted if not is_run_dir(spool / w)]
        if missing:
            raise UsageError(f"{spool}: no spooled run {', '.join(map(repr, missing))}")
        return [spool / w for w in wanted]
    return sorted(p for p in spool.iterdir() if not p.name.startswith(".") and is_run_dir(p)) if spool.is_dir() else []


def run(args: argparse.Namespace) -> int:
    root = args.root or os.environ.get(layout.ROOT_ENV) or ""
    if not is_store_url(root):
        raise UsageError(f"--root {root or '(unset)'}: sync needs a store URL (s3://bucket/prefix); "
                         "a local store has nothing to upload")
    url = check_store_url(root)
    spool = spool_root(url)
    rows: list[dict[str, object]] = []
    for run_dir in _spooled(spool, list(args.runs)):
        try:
            live = effective_status(read_manifest(run_dir)) is RunStatus.RUNNING
        except Exception:  # noqa: BLE001 - an unreadable manifest: upload what is there
            live = False
        if live:
            rows.append({"id": run_dir.name, "put": 0, "complete": False, "failed": [],
                         "skipped": "still being recorded; its launcher uploads it"})
            continue
        result = sync_run(run_dir, url)
        rows.append({"id": run_dir.name, "put": result.put, "complete": result.complete,
                     "failed": list(result.failed), "skipped": None})
    if args.json:
        print(json.dumps({"root": url, "spool": str(spool), "runs": rows}, indent=2))
    else:
        for r in rows:
            what = (f"skipped ({r['skipped']})" if r["skipped"] else
                    f"complete ({r['put']} file(s) put)" if r["complete"] else f"incomplete: {r['failed']}")
            print(terminal_text(f"{url}/{r['id']}: {what}", 2000))
        if not rows:
            print(f"nothing spooled for {url} (in {spool})", file=sys.stderr)
    return 0 if all(r["complete"] or r["skipped"] for r in rows) else 1
