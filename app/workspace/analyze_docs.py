"""The printed ``analyze --json`` document of an unchanged, cached trace set, kept next to its traces (workspace layer).

A warm ``torchscope analyze --json`` used to import pandas, the analysis and the presentation
modules (~0.4 s) only to turn seven cached analysis tables back into the same document. Its text
is now stored in the first trace's cache entry (``trace_cache.write_entry_document``) under a key
that covers everything the document is made from, and printed as it is when nothing changed:

- the traces as ``load_traces`` returns them (path, rank, events, warnings, and the cache entry,
  whose name hashes the file's path, size, mtime and the trace cache version), after ``--rank``;
- the path analysed and ``--rank``;
- for a run folder, the size and mtime of its manifest (profiler windows, id, name) and metrics
  (headline step time, final values): a run still being written never reads an old document;
- the code: size and mtime of every module of ``app`` and of the run format, and the versions
  of pandas, numpy, pyarrow and msgspec (read from their installed metadata, not imported).

Any other input makes a miss, and the full path computes (and stores) the document again. A
trace entry that is replaced (its file changed) takes its documents with it.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import app
from app.data import trace_cache
from app.data.trace import TraceTables, list_trace_paths, load_traces
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout
from profiler_agent.runformat.errors import TorchscopeError

__all__ = ["AnalyzeDocuments"]

_LIBRARIES = ("pandas", "numpy", "pyarrow", "msgspec")


@lru_cache(maxsize=1)
def _code_fingerprint() -> str:
    """Size and mtime of every module of ``app`` and the run format, and the libraries' versions."""
    parts: list[str] = [sys.version]
    for root in (Path(app.__file__).parent, Path(rf.__file__).parent):
        for folder, subs, files in os.walk(root):
            subs[:] = sorted(d for d in subs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    st = os.stat(os.path.join(folder, name))
                    parts.append(f"{folder}/{name}\0{st.st_size}\0{st.st_mtime_ns}")
    parts += _library_versions()
    return "\n".join(parts)


def _library_versions() -> list[str]:
    """The ``*.dist-info`` folder names of the analysis libraries on ``sys.path`` (no import)."""
    found = []
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        found += sorted(n for n in names if n.endswith(".dist-info") and n.split("-", 1)[0] in _LIBRARIES)
    return found


def _stat(path: Path) -> str:
    try:
        st = path.stat()
    except OSError:
        return "-"
    return f"{st.st_size}\0{st.st_mtime_ns}"


class AnalyzeDocuments:
    """The stored document of ``analyze --json PATH [--rank R]``: ``read()`` before anything is
    loaded, ``write(traces, text)`` after the full path printed ``text`` for those ``traces``.

    Made before the run's records are read, so the run's files are fingerprinted as they were
    before the document was computed (a document is never stored under a newer state)."""

    def __init__(self, path: Path, rank: int | None) -> None:
        self.path = path
        self.rank = rank
        self.run = (f"{_stat(path / layout.MANIFEST)}\0{_stat(path / layout.METRICS)}"
                    if path.is_dir() and rf.is_run_dir(path) else "")

    def _key(self, traces: Sequence[TraceTables]) -> str | None:
        if not traces or any(t.cache_entry is None for t in traces):
            return None
        doc = [str(self.path), self.rank, self.run, _code_fingerprint(),
               [[str(t.path), int(t.rank), int(t.n_events), list(t.warnings), t.cache_entry.name if t.cache_entry else ""]
                for t in traces]]
        return hashlib.sha1(json.dumps(doc, default=str).encode("utf-8", "surrogateescape")).hexdigest()[:24]

    def read(self) -> str | None:
        """The stored document, or None (a trace not in the cache yet, anything changed)."""
        try:
            paths = list_trace_paths(self.path)
            if any(trace_cache.read_cached_meta(trace_cache.cache_entry_dir(p)) is None for p in paths):
                return None  # the full path parses it (with its progress bar)
            traces = self._selected(load_traces(self.path))
        except (TorchscopeError, OSError):
            return None  # the full path says what is wrong
        key = self._key(traces)
        entry = traces[0].cache_entry if traces else None
        return trace_cache.read_entry_document(entry, key) if key is not None and entry is not None else None

    def write(self, traces: Sequence[TraceTables], text: str) -> bool:
        """Store ``text``, the document printed for ``traces`` (as selected by ``--rank``)."""
        traces = self._selected(traces)
        key = self._key(traces)
        entry = traces[0].cache_entry if traces else None
        return key is not None and entry is not None and trace_cache.write_entry_document(entry, key, text)

    def _selected(self, traces: Sequence[TraceTables]) -> list[TraceTables]:
        return [t for t in traces if self.rank is None or t.rank == self.rank]
