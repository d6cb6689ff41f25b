"""The run manifest (run.json) as a typed, versioned record (run-format layer, stdlib only).

Schema history (bump SCHEMA_VERSION and add a step to ``_MIGRATIONS`` on every change):

- 0: pre-release manifests: ``start_time``/``end_time`` instead of ``started_at``/``ended_at``.
- 1: current.
"""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import CorruptFileError, SchemaVersionError

__all__ = [
    "SCHEMA_VERSION",
    "RunStatus",
    "ArtifactKind",
    "Artifact",
    "Manifest",
    "manifest_from_dict",
    "manifest_to_dict",
    "MAX_EPOCH_S",
]

SCHEMA_VERSION = 1

# Timestamps (``started_at``, ``ended_at``, ``heartbeat``) are epoch seconds from 1970 up to this
# (2200-01-01 UTC): a value beyond it (1e300, a negative year, NaN) is a broken manifest, not a time,
# and every reader that turns times into dates (pandas' nanosecond timestamps end in 2262) would fail.
MAX_EPOCH_S = 7_258_118_400.0
# Deeper nesting than this in a manifest (a config of dicts in lists...) is refused: Python code
# that walks it (repr, comparisons, the UI's JSON view) recurses, and fails near 1,000 levels.
MAX_NESTING = 100
# More ranks than this in ``world_size`` is not a job but a broken field.
_MAX_WORLD_SIZE = 2**24


class RunStatus(enum.StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    KILLED = "killed"
    # Written by ``torchscope sweep`` over the launcher's ``killed`` when its pruner stopped the
    # trial early from its live metrics: a decision of the search, not a failure of the job.
    PRUNED = "pruned"
    # Never written by the agent: readers derive it from a stale heartbeat and a dead process.
    CRASHED = "crashed"


class ArtifactKind(enum.StrEnum):
    TRACE = "trace"
    MEMORY_SNAPSHOT = "memory_snapshot"
    MEMORY_TIMELINE = "memory_timeline"  # torch export_memory_timeline raw records (by category)
    GRAPH_DOT = "graph_dot"
    GRAPH_SVG = "graph_svg"
    MODULE_TREE = "module_tree"
    METRICS = "metrics"
    SYSTEM = "system"
    LOG = "log"


@dataclass(frozen=True)
class Artifact:
    kind: ArtifactKind
    path: str  # relative to the run folder, with '/' separators
    rank: int | None = None
    bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": str(self.kind), "path": self.path}
        if self.rank is not None:
            d["rank"] = self.rank
        if self.bytes is not None:
            d["bytes"] = self.bytes
        return d


@dataclass(frozen=True)
class Manifest:
    """One run's manifest. Unknown fields read from disk are kept in ``extra`` and written back."""

    id: str
    name: str
    status: RunStatus = RunStatus.RUNNING
    schema_version: int = SCHEMA_VERSION
    started_at: float | None = None  # epoch seconds
    ended_at: float | None = None
    heartbeat: float | None = None  # epoch seconds, refreshed while the job runs
    exit_code: int | None = None
    command: tuple[str, ...] = ()
    cwd: str | None = None
    host: str | None = None
    pid: int | None = None
    git: Mapping[str, Any] = field(default_factory=dict)  # {"commit": str, "dirty": bool}
    versions: Mapping[str, Any] = field(default_factory=dict)  # python, torch, cuda, torchscope
    devices: tuple[Mapping[str, Any], ...] = ()
    config: Mapping[str, Any] = field(default_factory=dict)  # hyperparameters
    world_size: int = 1
    tags: tuple[str, ...] = ()
    notes: str = ""
    artifacts: tuple[Artifact, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    def replace(self, **changes: Any) -> Manifest:
        """Return a copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)

    @property
    def duration_s(self) -> float | None:
        """Seconds from start to end (or to the last heartbeat while running)."""
        end = self.ended_at if self.ended_at is not None else self.heartbeat
        if self.started_at is None or end is None:
            return None
        return max(0.0, end - self.started_at)


_FIELDS = {f.name for f in dataclasses.fields(Manifest)} - {"extra"}


def _migrate_0_to_1(d: dict[str, Any]) -> dict[str, Any]:
    d = dict(d)
    if "start_time" in d and "started_at" not in d:
        d["started_at"] = d.pop("start_time")
    if "end_time" in d and "ended_at" not in d:
        d["ended_at"] = d.pop("end_time")
    d["schema_version"] = 1
    return d


_MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {0: _migrate_0_to_1}


def _expect(d: Mapping[str, Any], key: str, types: type | tuple[type, ...], source: str) -> Any:
    value = d.get(key)
    if value is not None and not isinstance(value, types):
        names = types.__name__ if isinstance(types, type) else " or ".join(t.__name__ for t in types)
        raise CorruptFileError(f"{source}: field {key!r} should be {names}, got {type(value).__name__}")
    return value


def _expect_time(d: Mapping[str, Any], key: str, source: str) -> float | None:
    value = _expect(d, key, (int, float), source)
    if value is None:
        return None
    if isinstance(value, bool) or not (0.0 <= value <= MAX_EPOCH_S):  # NaN fails the comparison too
        raise CorruptFileError(
            f"{source}: field {key!r} is {value!r}, not a time; expected epoch seconds between 0 (1970) "
            f"and {MAX_EPOCH_S:.0f} (2200)"
        )
    return float(value)


def _expect_int(d: Mapping[str, Any], key: str, source: str, low: int, high: int) -> int | None:
    value = d.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise CorruptFileError(f"{source}: field {key!r} is {value!r}; expected an integer from {low} to {high}")
    return value


def _nesting_depth(value: Any, limit: int) -> int:
    """How deeply ``value`` nests lists and objects, counted without recursion up to ``limit`` + 1."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, Mapping):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        todo.extend((child, depth + 1) for child in children)
    return deepest


def _small_int(value: Any) -> int | None:
    """An artifact's ``rank``/``bytes``: an integer within int64, else unknown (None)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        return None
    return value


def _migrated(raw: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The fields of ``raw`` (parsed JSON: values of any type) in the current schema version."""
    version = raw.get("schema_version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise CorruptFileError(f"{source}: field 'schema_version' should be an integer, got {version!r}")
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{source}: schema_version {version} is newer than this Torchscope understands "
            f"(up to {SCHEMA_VERSION}); upgrade Torchscope to read this run"
        )
    d = dict(raw)
    while version < SCHEMA_VERSION:
        d = _MIGRATIONS[version](d)
        version = d["schema_version"]
    return d


def _artifacts(entries: Iterable[Any]) -> tuple[Artifact, ...]:
    """The well-formed entries of a manifest's ``artifacts`` list; the others are skipped."""
    artifacts = []
    for a in entries:
        if not isinstance(a, Mapping) or "path" not in a:
            continue  # tolerant: skip malformed artifact entries rather than refuse the run
        raw_kind = a.get("kind")
        if not isinstance(raw_kind, str):
            continue
        try:
            kind = ArtifactKind(raw_kind)
        except ValueError:
            continue
        artifacts.append(Artifact(kind=kind, path=str(a["path"]), rank=_small_int(a.get("rank")),
                                  bytes=_small_int(a.get("bytes"))))
    return tuple(artifacts)


def manifest_from_dict(raw: Mapping[str, Any], *, source: str = "run.json") -> Manifest:
    """Build a Manifest from parsed JSON, migrating older schema versions.

    Raises SchemaVersionError for a newer schema, CorruptFileError for wrong field types.
    """
    if not isinstance(raw, Mapping):
        raise CorruptFileError(f"{source}: expected a JSON object, got {type(raw).__name__}")
    if _nesting_depth(raw, MAX_NESTING) > MAX_NESTING:
        raise CorruptFileError(f"{source}: nested more than {MAX_NESTING} levels deep (objects and lists)")
    d = _migrated(raw, source)
    for key in ("id", "name"):
        if not isinstance(d.get(key), str) or not d[key]:
            raise CorruptFileError(f"{source}: field {key!r} should be a non-empty string")
    status_raw = _expect(d, "status", str, source) or RunStatus.RUNNING
    try:
        status = RunStatus(status_raw)
    except ValueError:
        valid = ", ".join(s.value for s in RunStatus)
        raise CorruptFileError(f"{source}: field 'status' is {status_raw!r}; expected one of {valid}") from None
    times = {key: _expect_time(d, key, source) for key in ("started_at", "ended_at", "heartbeat") if key in d}
    world_size = _expect_int(d, "world_size", source, 0, _MAX_WORLD_SIZE)
    for key in ("pid", "exit_code"):
        _expect_int(d, key, source, -(2**31), 2**31 - 1)
    for key in ("git", "versions", "config"):
        _expect(d, key, dict, source)
    for key in ("command", "devices", "tags", "artifacts"):
        _expect(d, key, list, source)
    known = {k: d[k] for k in _FIELDS if k in d}
    known.update(
        status=status,
        command=tuple(str(c) for c in d.get("command") or ()),
        # a device is an object ({"type": ..., "name": ...}); anything else is skipped, not shown
        devices=tuple(dv for dv in d.get("devices") or () if isinstance(dv, Mapping)),
        tags=tuple(str(t) for t in d.get("tags") or ()),
        artifacts=_artifacts(d.get("artifacts") or ()),
        git=dict(d.get("git") or {}),
        versions=dict(d.get("versions") or {}),
        config=dict(d.get("config") or {}),
        notes=str(d.get("notes") or ""),
        world_size=world_size or 1,
        **times,
    )
    extra = {k: v for k, v in d.items() if k not in _FIELDS}
    return Manifest(**known, extra=extra)


def manifest_to_dict(m: Manifest) -> dict[str, Any]:
    """Return the JSON-ready dict of a manifest, unknown fields included."""
    d: dict[str, Any] = dict(m.extra)
    for f in dataclasses.fields(Manifest):
        if f.name == "extra":
            continue
        value = getattr(m, f.name)
        if f.name == "artifacts":
            value = [a.to_dict() for a in value]
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, enum.Enum):
            value = value.value
        elif isinstance(value, Mapping):
            value = dict(value)
        d[f.name] = value
    return d
