"""A time range of a run's trace file as a Chrome trace JSON file (workspace: the Timeline's export)."""
from __future__ import annotations

import os

import msgspec

from app.analysis.trace.trace_range import select_trace_range
from app.data.trace_document import read_trace_document
from app.workspace.artifacts import run_file_folder

__all__ = ["export_trace_range"]


def export_trace_range(run_dir: str | os.PathLike[str], path: str | os.PathLike[str], start_us: float,
                       end_us: float) -> bytes:
    """The JSON bytes of the trace file ``path`` of the run ``run_dir`` cut to [start_us, end_us]
    (analysis.trace.trace_range.select_trace_range: metadata kept, events of the range only).

    Raises TraceError for a file that is not a whole JSON trace, UnsafePath for a link out of the
    run, OSError when unreadable, and ValueError for an empty range.
    """
    doc = read_trace_document(path, folder=run_file_folder(run_dir, path))
    return msgspec.json.encode(select_trace_range(doc, start_us, end_us))
