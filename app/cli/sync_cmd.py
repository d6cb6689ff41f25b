"""`torchscope sync`: complete, from the local spool, the upload of runs recorded into a remote store (CLI layer, thin).

``torchscope run --root s3://bucket/prefix`` records into a spool folder and uploads as the job
runs (profiler_agent.upload); when the launcher was killed or the network failed, the spool
still holds every file. ``torchscope sync --root URL`` puts what is missing or changed, run.json
last, so that afterwards each remote run equals its spooled copy file by file. Runs still being
recorded (their launcher alive) are left to their launcher. Afterwards spooled runs whose upload
is complete and older than $TORCHSCOPE_SPOOL_RETENTION_DAYS (default 7; 0 keeps them) are deleted
from the spool (profiler_agent.spool); ``--clean`` deletes every complete one now, ``--dry-run``
says what would be put and deleted, changing nothing.
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
from profiler_agent.spool import DEFAULT_RETENTION_DAYS, RETENTION_ENV, clean_spool, retention_days
from profiler_agent.upload import connect, sync_run

HELP = "finish uploading runs recorded into a remote store (s3://...) from the local spool"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="*", metavar="RUN",
                        help="run ids in the spool to sync (default: every run spooled for the store)")
    parser.add_argument("--root", help=f"the store URL, s3://bucket/prefix (default ${layout.ROOT_ENV})")
    parser.add_argument("--clean", action="store_true",
                        help="delete from the spool every run whose upload is complete, whatever its age "
                        f"(default: those older than ${RETENTION_ENV} days, {DEFAULT_RETENTION_DAYS:g})")
    parser.add_argument("--dry-run", action="store_true",
                        help="say which files would be put and which spooled runs deleted; change nothing")
    parser.add_argument("--json", action="store_true",
                        help='print {"root", "spool", "dry_run", "runs": [{"id", "put", "complete", "failed", '
                        '"skipped", "pending"}], "cleaning": [{"id", "removed", "kept"}]}')


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
    connection = None  # one file system for every run: made when the first run needs it
    for run_dir in _spooled(spool, list(args.runs)):
        try:
            live = effective_status(read_manifest(run_dir)) is RunStatus.RUNNING
        except Exception:  # noqa: BLE001 - an unreadable manifest: upload what is there
            live = False
        if live:
            rows.append({"id": run_dir.name, "put": 0, "complete": False, "failed": [],
                         "skipped": "still being recorded; its launcher uploads it", "pending": []})
            continue
        connection = connection or connect(url)
        result = sync_run(run_dir, url, dry_run=args.dry_run, connection=connection)
        rows.append({"id": run_dir.name, "put": result.put, "complete": result.complete,
                     "failed": list(result.failed), "skipped": None, "pending": list(result.pending)})
    cleaning = _clean(spool, args)
    if args.json:
        print(json.dumps({"root": url, "spool": str(spool), "dry_run": bool(args.dry_run), "runs": rows,
                          "cleaning": cleaning}, indent=2))
    else:
        _print_text(url, spool, rows, cleaning, dry_run=args.dry_run, clean=args.clean)
    return 0 if all(r["complete"] or r["skipped"] for r in rows) else 1


def _clean(spool: Path, args: argparse.Namespace) -> list[dict[str, object]]:
    """Spooled runs whose upload is complete deleted: older than the retention, or all with --clean;
    only the named runs when some are named."""
    days = 0.0 if args.clean else retention_days()
    if not args.clean and days <= 0:
        return []  # a retention of 0 keeps every spooled run
    named = set(args.runs)
    others = frozenset(p.name for p in spool.iterdir() if p.name not in named) if named and spool.is_dir() else frozenset()
    return [{"id": v.run_dir.name, "removed": v.removed, "kept": v.kept}
            for v in clean_spool(spool, older_than_days=days, dry_run=args.dry_run, keep=others)]


def _print_text(url: str, spool: Path, rows: list[dict[str, object]], cleaning: list[dict[str, object]], *,
                dry_run: bool, clean: bool) -> None:
    for r in rows:
        if r["skipped"]:
            what = f"skipped ({r['skipped']})"
        elif dry_run:
            pending = list(r["pending"])  # type: ignore[call-overload]
            what = f"would put {len(pending)} file(s): {', '.join(pending)}" if pending else "complete, nothing to put"
        else:
            what = f"complete ({r['put']} file(s) put)" if r["complete"] else f"incomplete: {r['failed']}"
        print(terminal_text(f"{url}/{r['id']}: {what}", 2000))
    for c in cleaning:
        if c["removed"]:
            verb = "would delete" if dry_run else "deleted"
            print(terminal_text(f"{verb} the spooled copy of {c['id']} (upload complete)", 2000))
        elif clean or dry_run:
            print(terminal_text(f"kept the spooled copy of {c['id']}: {c['kept']}", 2000))
    if not rows:
        print(f"nothing spooled for {url} (in {spool})", file=sys.stderr)
