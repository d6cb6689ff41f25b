"""`torchscope ls`: list the runs of a store as a table or as JSON (CLI layer).

``--json`` prints one document ``{"root": str, "runs": [...], "problems": [...]}``; each run
has exactly the keys of ``app.data.runs.STORE_COLUMNS`` (documented in docs/app.md): ``step_time_s``
is the headline step time (app.analysis.run.step_time), ``mean_step_time_s`` the mean of the same steps,
``final_loss`` the final value of the loss (app.analysis.run.final_value), ``group`` the run's replicate group
or null. Runs are
listed newest first by start time, and a torch-tb-profiler log folder's runs through the same
read-only mirror ``torchscope ui`` uses: both list the store through app.workspace.catalog, so
they show the same runs in the same order with the same problem messages. The listing goes through
the store's catalog index (docs/catalog.md): only runs the store's change journal names (or that were
added, replaced or are running) are checked, only those that changed are read, and with a current
index this module imports neither pandas nor the analysis (``--json`` prints the stored record
texts). ``--refresh`` checks every run's files (edits by other tools); ``--reindex`` reads every run again.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from app.workspace import catalog_records, ls_snapshot, printed_listing
from profiler_agent.runformat import layout

HELP = "list the runs of a store (name, status, duration, steps, loss, step time, memory)"

# Under the table whenever a final loss is shown: which number it is (docs/app.md, "Final values").
FINAL_LOSS_NOTE = (
    "FINAL LOSS: median of the last 10 % of rank 0's loss values (1 to 20 values), the same number as "
    "the Run page and `torchscope diff`"
)

# Under the table whenever a step time is shown: which number it is (docs/app.md, "Step time").
STEP_TIME_NOTE = (
    "STEP TIME: median of the steady-state steps (slowest rank per step; warm-up, profiled and "
    "evaluation steps dropped), the same number as the Run page and `torchscope diff`"
)

# (header, STORE_COLUMNS key, formatter) of the text table.
_TEXT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("NAME", "name"),
    ("STATUS", "status"),
    ("STARTED", "started_at"),
    ("DURATION", "duration_s"),
    ("STEPS", "steps"),
    ("FINAL LOSS", "final_loss"),
    ("STEP TIME", "step_time_s"),
    ("PEAK MEM", "peak_memory_bytes"),
    ("ID", "id"),
)
# A problem line longer than this (a 10,000-character folder name) is cut.
_MAX_PROBLEM_CHARS = 500

# Shown after NAME only when some run belongs to a replicate group.
_GROUP_COLUMN = ("GROUP", "group")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root", help=f"run store folder or URL, s3://bucket/prefix (default ${layout.ROOT_ENV} or "
        f"./{layout.DEFAULT_ROOT})"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    parser.add_argument("--refresh", action="store_true",
                        help="check every run's files for changes instead of trusting the store's change journal "
                        "(sees edits made by other tools; docs/catalog.md)")
    parser.add_argument("--reindex", action="store_true",
                        help="read every run again instead of trusting the catalog index's unchanged entries")


# Values of the rows' ``steps_source`` (app.workspace.cached_steps, which imports pyarrow: not here).
STEPS_FROM_TRACE = "trace"
STEPS_IN_TRACE = "in trace"
# The status markers of app.data.runs.STATUS_MARKERS (that module imports pandas).
STATUS_MARKERS = {"running": "● ", "finished": "✓ ", "failed": "✗ ", "killed": "■ ", "crashed": "✗ ",
                  "pruned": "✂ "}

# Marks on the STEPS and STEP TIME cells of runs without metrics.jsonl, explained under the table.
_TRACE_MARK = "*"
_NOTES = {
    STEPS_FROM_TRACE: f"{_TRACE_MARK} profiled steps of the run's traces (it has no metrics.jsonl), "
    "from the trace analysis cache",
    STEPS_IN_TRACE: "in trace: the run has no metrics.jsonl; its steps are in its traces, which were "
    "not analysed yet: `torchscope analyze PATH` or opening the run in `torchscope ui` fills them in",
}


def _cell(key: str, value: Any, source: str = "") -> str:
    from app.presentation.units import format_bytes, format_seconds  # the table only: not for --json

    if key in ("steps", "step_time_s"):
        if source == STEPS_IN_TRACE:
            return "in trace"
        if source == STEPS_FROM_TRACE and value is not None:
            shown = format_seconds(value) if key == "step_time_s" else str(value)
            return shown + _TRACE_MARK
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if key == "status":
        # the same markers as the Runs page, so crashed and running runs stand out without colour
        return STATUS_MARKERS.get(str(value), "") + str(value)
    if key == "started_at":
        return str(value)[:19].replace("T", " ")
    if key in ("duration_s", "step_time_s"):
        return format_seconds(value)
    if key == "peak_memory_bytes":
        return format_bytes(value)
    if key == "final_loss":
        return f"{value:.4g}"
    return str(value)


def format_table(records: list[dict[str, Any]]) -> str:
    """The runs as an aligned text table, one line per run (a GROUP column when a run has a group)."""
    from app.presentation.text_table import text_table

    columns = list(_TEXT_COLUMNS)
    if any(r.get("group") for r in records):
        columns.insert(1, _GROUP_COLUMN)
    rows = [[_cell(k, r.get(k), str(r.get("steps_source") or "")) for _, k in columns] for r in records]
    return text_table([h for h, _ in columns], rows, rule=False, strip=True)


json_document = printed_listing.json_document  # one spelling of the document, also printed from the index


def _write_bytes(data: bytes) -> None:
    """``data`` to stdout as bytes when it has a binary buffer (the terminal, a pipe), else as text."""
    out = sys.stdout
    buffer = getattr(out, "buffer", None)
    if buffer is None:  # a StringIO put in its place
        out.write(data.decode("utf-8", "surrogateescape"))
        return
    out.flush()
    buffer.write(data)
    buffer.flush()


def run(args: argparse.Namespace) -> int:
    reindex = bool(getattr(args, "reindex", False))
    full_check = bool(getattr(args, "refresh", False))
    if args.json:
        url = getattr(args, "store_url", None)
        local = url is None  # a local store's document is also kept for the check before imports
        root, runs_text, problems = catalog_records.list_store_json(
            args.root, reindex=reindex, full_check=full_check,
            document=(lambda found, runs, probs: json_document(str(found), runs, probs)) if local else None,
            root_text=ls_snapshot.root_value(args.root) if local else None)
        # a store URL stays the root shown; its mirror folder is only where it is read from
        shown_root = url or str(root)
        _write_bytes(json_document(shown_root, runs_text, problems))
        return 0
    listing = catalog_records.list_store_records(args.root, reindex=reindex, full_check=full_check)
    records = [json.loads(text) for text in listing.records]
    if records:
        sources = listing.steps_sources
        print(format_table([{**r, "steps_source": src} for r, src in zip(records, sources, strict=True)]))
        if any(r.get("final_loss") is not None for r in records):
            print(FINAL_LOSS_NOTE, file=sys.stderr)
        if any(r.get("step_time_s") is not None for r in records):
            print(STEP_TIME_NOTE, file=sys.stderr)
        for source, note in _NOTES.items():
            if source in sources:
                print(note, file=sys.stderr)
    else:
        shown = getattr(args, "store_url", None) or listing.root
        print(f"no runs in {shown}; record one with: torchscope run --root {shown} --name NAME -- python train.py")
    if listing.mirror is not None:
        print(
            f"note: torch-tb-profiler runs of {listing.root} are listed read-only from the mirror {listing.mirror}",
            file=sys.stderr,
        )
    from app.presentation.terminal import terminal_text

    for p in listing.problems:  # they quote folder names and values: one safe line each
        print(f"warning: {terminal_text(p, _MAX_PROBLEM_CHARS)}", file=sys.stderr)
    return 0
