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

import io
import os
import pickle
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from app.data.memory_records import NotRecords, read_record_array
from app.data.safe_io import (
    InflateLimit,
    UnsafePath,
    inflate_limit_bytes,
    iter_limited,
    iter_stream_limited,
    read_limited,
    resolve_inside,
)
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


class _PlainDataUnpickler(pickle._Unpickler):
    """Unpickler that builds only dict/list/tuple/set/str/bytes/int/float/bool/None.

    Those come from pickle opcodes that need no lookup; everything else (classes, functions,
    ``os.system`` in a REDUCE) goes through find_class or persistent_load, which refuse.

    It is pickle's pure-Python unpickler, on purpose: the C one keeps its memo in an array sized
    by the largest index a LONG_BINPUT names, so 300 fuzzed bytes made it allocate and clear
    gigabytes for 30 s; here the memo is a dict (one entry per index), and every length is read
    from an in-memory file, so nothing is allocated beyond what the file holds. It is about five
    times slower, which a snapshot opened on demand can afford.
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


def load_snapshot(path: str | os.PathLike[str], *, folder: Path | None = None) -> dict[str, Any]:
    """Return a snapshot as the plain dict torch wrote (``segments``, ``device_traces``, ...).
    A gzipped snapshot is inflated in bounded chunks, under the inflate limit.

    Raises SnapshotRefusedError when the pickle needs anything but plain data (nothing in it is
    executed), CorruptFileError when the file is missing, truncated, too large, not a pickle,
    or not shaped like a snapshot, InflateLimit when it (or its inflated text) is larger than
    ``TORCHSCOPE_MAX_INFLATE_MB``, UnsafePath when ``folder`` is given and it is a link out of it.
    """
    p = Path(path)
    limit = min(_MAX_SNAPSHOT_BYTES, inflate_limit_bytes())
    try:
        # In memory (at most the limit): lengths in the pickle are then read from what it holds.
        source = io.BytesIO(read_limited(p, limit, folder=folder))
        data = _PlainDataUnpickler(source, p).load()
    except (CorruptFileError, InflateLimit, UnsafePath):  # SnapshotRefusedError is a CorruptFileError
        raise
    except OSError as e:
        raise CorruptFileError(f"{p}: cannot read the snapshot ({e.strerror or e})") from None
    except Exception as e:  # noqa: BLE001 - no code runs (find_class refuses): any error is corrupt data
        # e.g. UnpicklingError, EOFError, OverflowError (a FRAME longer than memory), RecursionError
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


_MAX_WHOLE_BYTES = 256 << 20  # a timeline not in the flat record form is decoded whole: held lower


def _decode_whole(pieces: Callable[[int], Iterator[bytes]], path: Path | str) -> Any:
    """A timeline that is not a flat record list (the coalesced ``[times, sizes]`` form), decoded
    whole: it is small (9 numbers per time point), so it is held to 256 MiB or the inflate limit."""
    limit = min(_MAX_WHOLE_BYTES, inflate_limit_bytes())
    try:
        return msgspec.json.decode(b"".join(pieces(limit)))
    except InflateLimit:
        raise CorruptFileError(f"{path}: not a flat list of [time, action, bytes, category] records, and "
                               f"too large ({_MAX_WHOLE_BYTES >> 20} MiB or more) to read as another form") from None
    except msgspec.DecodeError as e:
        raise CorruptFileError(f"{path}: not valid JSON ({e})") from None
    except RecursionError:
        raise CorruptFileError(f"{path}: not a memory timeline (JSON nested too deeply)") from None


def _record_array(pieces: Callable[[int], Iterator[bytes]], path: Path | str) -> np.ndarray[Any, np.dtype[np.int64]]:
    """The (n, 4) int64 records of a timeline in either JSON form, read in bounded pieces."""
    try:
        try:
            return read_record_array(pieces(inflate_limit_bytes()))
        except NotRecords:
            pass
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise CorruptFileError(f"{path}: every record must be 4 integers [time_ns, action, bytes, category] "
                                   f"({e})") from None
        data = _decode_whole(pieces, path)
    except OSError as e:
        raise CorruptFileError(f"{path}: cannot be read ({e.strerror or e})") from None
    if _is_coalesced(data):
        data = _coalesced_to_records(data, path)
    if not isinstance(data, list):
        raise CorruptFileError(f"{path}: expected a JSON list of [time, action, bytes, category] records")
    try:
        arr = np.asarray(data, dtype=np.int64).reshape(-1, 4) if data else np.zeros((0, 4), np.int64)
    except (ValueError, TypeError, OverflowError):
        raise CorruptFileError(f"{path}: every record must be 4 integers [time_ns, action, bytes, category]") from None
    if len(arr) != len(data):
        raise CorruptFileError(f"{path}: every record must be 4 integers [time_ns, action, bytes, category]")
    return arr


def load_memory_timeline_raw(path: str | os.PathLike[str], *, folder: Path | None = None) -> pd.DataFrame:
    """Return torch's memory timeline as a table of signed byte changes sorted by time.

    Accepts both JSON forms of ``prof.export_memory_timeline``: the raw records of a
    ``.raw.json.gz`` path (``[time_ns, action, bytes, category]`` each), and the coalesced
    ``[times_us, sizes]`` of a ``.json``/``.json.gz`` path (``sizes[i]`` = ``[0, bytes held per
    category...]`` after ``times_us[i]``), which is turned into one change per category and time.
    The file is inflated and parsed in bounded pieces (app.data.memory_records), so memory stays
    a small multiple of the records kept.

    Columns: ``ts_ns`` (int64; -1 for memory that existed before profiling started),
    ``action`` (preexisting|create|increment_version|destroy), ``bytes`` (int64, negative when
    freed), ``category`` (one of MEMORY_CATEGORIES).

    Raises CorruptFileError when the file is neither form, or uses unknown action or category
    indexes; InflateLimit when it inflates beyond ``TORCHSCOPE_MAX_INFLATE_MB``; UnsafePath when
    ``folder`` is given and the file is a link out of it.
    """
    p = Path(path)
    if folder is not None:
        resolve_inside(folder, p)
    if not p.is_file():
        raise CorruptFileError(f"{p}: no such memory timeline file")
    return _timeline_frame(_record_array(lambda limit: iter_limited(p, limit, folder=folder), p), p)


def parse_memory_timeline_raw(raw: bytes, source: Path | str) -> pd.DataFrame:
    """Same as :func:`load_memory_timeline_raw` for the bytes of such a file (JSON or gzipped
    JSON, e.g. an upload); ``source`` names it in error messages."""
    return _timeline_frame(_record_array(lambda limit: iter_stream_limited(io.BytesIO(raw), source, limit), source),
                           source)


def _timeline_frame(arr: np.ndarray[Any, np.dtype[np.int64]], p: Path | str) -> pd.DataFrame:
    actions, cats = arr[:, 1], arr[:, 3]
    bad_action = ~np.isin(actions, list(MEMORY_ACTIONS))
    if bad_action.any():
        raise CorruptFileError(f"{p}: record {int(np.flatnonzero(bad_action)[0])}: action must be 1-4, "
                               f"got {int(actions[bad_action][0])}")
    bad_cat = (cats < 0) | (cats >= len(MEMORY_CATEGORIES))
    if bad_cat.any():
        raise CorruptFileError(f"{p}: record {int(np.flatnonzero(bad_cat)[0])}: category must be 0-"
                               f"{len(MEMORY_CATEGORIES) - 1}, got {int(cats[bad_cat][0])}")
    order = np.argsort(arr[:, 0], kind="stable")
    frame = pd.DataFrame({
        "ts_ns": arr[order, 0],
        "action": pd.Categorical.from_codes(arr[order, 1].astype(np.int8) - 1, categories=list(MEMORY_ACTIONS.values())),
        "bytes": arr[order, 2],
        "category": pd.Categorical.from_codes(arr[order, 3].astype(np.int8), categories=list(MEMORY_CATEGORIES)),
    })
    return frame


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
