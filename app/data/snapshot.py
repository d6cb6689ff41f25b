"""CUDA allocator snapshots and raw memory-category timelines read from disk (data layer).

A snapshot is the pickle written by ``torch.cuda.memory._dump_snapshot``: plain dicts, lists,
ints and strings (``segments``, ``device_traces``, ...). Pickle can run arbitrary code, and a
run folder may come from someone else, so :func:`load_snapshot` uses an unpickler that refuses
every global: a file that needs anything beyond plain containers and scalars is rejected
before any of it runs.

The raw memory timeline is torch.profiler's ``export_memory_timeline`` raw output: a JSON list
of ``[time_ns, action, bytes, category]`` records (optionally gzipped).
"""
from __future__ import annotations

import gzip
import io
import json
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiler_agent.runformat.errors import CorruptFileError

__all__ = [
    "MEMORY_CATEGORIES",
    "MEMORY_ACTIONS",
    "SnapshotRefusedError",
    "load_snapshot",
    "load_memory_timeline_raw",
    "parse_memory_timeline_raw",
]

# torch.profiler._memory_profiler: the category index is the position in _CATEGORY_TO_COLORS
# (None, "unknown", last) and the action index is Action's value.
MEMORY_CATEGORIES = (
    "parameter", "optimizer_state", "input", "temporary", "activation", "gradient", "autograd_detail", "unknown",
)
MEMORY_ACTIONS = {1: "preexisting", 2: "create", 3: "increment_version", 4: "destroy"}

_MAX_SNAPSHOT_BYTES = 2 * 1024**3


class SnapshotRefusedError(CorruptFileError):
    """A snapshot pickle asks for Python objects other than plain data, so it is not loaded."""


class _PlainDataUnpickler(pickle.Unpickler):
    """Unpickler that builds only dict/list/tuple/set/str/bytes/int/float/bool/None.

    Those come from pickle opcodes that need no lookup; everything else (classes, functions,
    ``os.system`` in a REDUCE) goes through find_class or persistent_load, which refuse.
    """

    def __init__(self, file: io.BufferedIOBase, path: Path) -> None:
        super().__init__(file)
        self._path = path

    def find_class(self, module: str, name: str) -> Any:
        raise SnapshotRefusedError(
            f"{self._path}: refused to load: the pickle asks for the Python object {module}.{name}; "
            "an allocator snapshot holds only plain data (dicts, lists, numbers, strings)"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise SnapshotRefusedError(f"{self._path}: refused to load: the pickle uses persistent ids")


def load_snapshot(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Return a snapshot as the plain dict torch wrote (``segments``, ``device_traces``, ...).

    Raises SnapshotRefusedError when the pickle needs anything but plain data (nothing in it is
    executed), CorruptFileError when the file is missing, truncated, too large, not a pickle,
    or not shaped like a snapshot.
    """
    p = Path(path)
    try:
        size = p.stat().st_size
    except OSError as e:
        raise CorruptFileError(f"{p}: cannot read the snapshot ({e.strerror or e})") from None
    if size > _MAX_SNAPSHOT_BYTES:
        raise CorruptFileError(f"{p}: snapshot is {size / 2**30:.1f} GiB, more than the 2 GiB this reader accepts")
    try:
        with open(p, "rb") as f:
            data = _PlainDataUnpickler(f, p).load()
    except SnapshotRefusedError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError,
            AttributeError, MemoryError, RecursionError, UnicodeDecodeError) as e:
        raise CorruptFileError(f"{p}: not a readable snapshot pickle ({type(e).__name__}: {e})") from None
    return _check_shape(p, data)


def _check_shape(path: Path, data: Any) -> dict[str, Any]:
    """Return ``data`` (unpickled: of any type) once it has the shape of an allocator snapshot."""
    if not isinstance(data, dict):
        raise CorruptFileError(f"{path}: expected a snapshot dict with 'segments', got {type(data).__name__}")
    if not isinstance(data.get("segments"), list):
        raise CorruptFileError(f"{path}: field 'segments' missing or not a list; not an allocator snapshot")
    traces = data.get("device_traces", [])
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise CorruptFileError(f"{path}: field 'device_traces' must be a list of lists of trace entries")
    return data


def _decode_json(raw: bytes, path: Path | str) -> Any:
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise CorruptFileError(f"{path}: truncated or corrupt gzip ({e})") from None
    try:
        return json.loads(raw)
    except ValueError as e:
        raise CorruptFileError(f"{path}: not valid JSON ({e})") from None


def load_memory_timeline_raw(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Return torch's memory timeline as a table of signed byte changes sorted by time.

    Accepts both JSON forms of ``prof.export_memory_timeline``: the raw records of a
    ``.raw.json.gz`` path (``[time_ns, action, bytes, category]`` each), and the coalesced
    ``[times_us, sizes]`` of a ``.json``/``.json.gz`` path (``sizes[i]`` = ``[0, bytes held per
    category...]`` after ``times_us[i]``), which is turned into one change per category and time.

    Columns: ``ts_ns`` (int64; -1 for memory that existed before profiling started),
    ``action`` (preexisting|create|increment_version|destroy), ``bytes`` (int64, negative when
    freed), ``category`` (one of MEMORY_CATEGORIES).

    Raises CorruptFileError when the file is neither form, or uses unknown action or category
    indexes.
    """
    p = Path(path)
    if not p.is_file():
        raise CorruptFileError(f"{p}: no such memory timeline file")
    return parse_memory_timeline_raw(p.read_bytes(), p)


def parse_memory_timeline_raw(raw: bytes, source: Path | str) -> pd.DataFrame:
    """Same as :func:`load_memory_timeline_raw` for the bytes of such a file (JSON or gzipped
    JSON, e.g. an upload); ``source`` names it in error messages."""
    p = source
    data = _decode_json(raw, p)
    if _is_coalesced(data):
        data = _coalesced_to_records(data, p)
    if not isinstance(data, list):
        raise CorruptFileError(f"{p}: expected a JSON list of [time, action, bytes, category] records")
    try:
        arr = np.asarray(data, dtype=np.int64).reshape(-1, 4) if data else np.zeros((0, 4), np.int64)
    except (ValueError, TypeError, OverflowError):
        raise CorruptFileError(f"{p}: every record must be 4 integers [time_ns, action, bytes, category]") from None
    if len(arr) != len(data):
        raise CorruptFileError(f"{p}: every record must be 4 integers [time_ns, action, bytes, category]")
    actions, cats = arr[:, 1], arr[:, 3]
    bad_action = ~np.isin(actions, list(MEMORY_ACTIONS))
    if bad_action.any():
        raise CorruptFileError(f"{p}: record {int(np.flatnonzero(bad_action)[0])}: action must be 1-4, "
                               f"got {int(actions[bad_action][0])}")
    bad_cat = (cats < 0) | (cats >= len(MEMORY_CATEGORIES))
    if bad_cat.any():
        raise CorruptFileError(f"{p}: record {int(np.flatnonzero(bad_cat)[0])}: category must be 0-"
                               f"{len(MEMORY_CATEGORIES) - 1}, got {int(cats[bad_cat][0])}")
    frame = pd.DataFrame({
        "ts_ns": arr[:, 0],
        "action": pd.Categorical.from_codes(actions - 1, categories=list(MEMORY_ACTIONS.values())),
        "bytes": arr[:, 2],
        "category": pd.Categorical.from_codes(cats, categories=list(MEMORY_CATEGORIES)),
    })
    return frame.sort_values("ts_ns", kind="stable").reset_index(drop=True)


def _is_coalesced(data: Any) -> bool:
    return (isinstance(data, list) and len(data) == 2 and all(isinstance(x, list) for x in data)
            and len(data[0]) == len(data[1]) and all(isinstance(t, int) for t in data[0][:1])
            and all(isinstance(row, list) and len(row) == len(MEMORY_CATEGORIES) + 1 for row in data[1][:1]))


def _coalesced_to_records(data: list[Any], source: Path | str) -> list[list[int]]:
    """[times_us, sizes by category] → raw records: the first point as preexisting memory, then
    the change of each category between consecutive points as a create (+) or destroy (−)."""
    try:
        times = np.asarray(data[0], dtype=np.int64)
        sizes = np.asarray(data[1], dtype=np.int64)[:, 1:]
    except (ValueError, TypeError, OverflowError):
        raise CorruptFileError(f"{source}: a [times, sizes] memory timeline must hold integers, "
                               f"with {len(MEMORY_CATEGORIES) + 1} sizes per time") from None
    records: list[list[int]] = []
    previous = np.zeros(len(MEMORY_CATEGORIES), dtype=np.int64)
    for i, (t_us, row) in enumerate(zip(times.tolist(), sizes)):
        for cat in np.flatnonzero(row != previous).tolist():
            delta = int(row[cat] - previous[cat])
            action = 1 if i == 0 else (2 if delta > 0 else 4)
            records.append([t_us * 1000, action, delta, cat])
        previous = row
    return records
