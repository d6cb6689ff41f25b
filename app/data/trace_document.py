"""A trace file's whole JSON document, parsed as it is (data layer).

For what needs the file's own events with every field (the Timeline's range export), not the
columnar tables of ``app.data.trace``. Inflated under the inflate limit (``safe_io``).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from app.data.safe_io import read_limited
from app.errors import TraceError

__all__ = ["read_trace_document"]


def read_trace_document(path: str | os.PathLike[str], *, folder: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The parsed top-level object of the trace file ``path`` (plain or gzip JSON).

    Raises TraceError naming the file when it is not a JSON object (or is cut short), the errors
    of ``safe_io.read_limited`` for unreadable, corrupt or too large files, and UnsafePath when
    ``folder`` is given and the file leaves it.
    """
    p = Path(path)
    data = read_limited(p, folder=Path(folder) if folder is not None else None)
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError as e:
        raise TraceError(f"{p}: not a whole JSON trace ({e}); export needs the complete file") from None
    if not isinstance(doc, dict):
        raise TraceError(f"{p}: the trace is a JSON {type(doc).__name__}, expected an object with traceEvents")
    return doc
