"""A sweep's state in the store: ``<store>/.torchscope/sweeps/<id>.json`` (workspace layer).

The file is rewritten atomically (runformat's writer) after every trial event, so a sweep killed
at any moment (SIGKILL included) leaves the last event on disk and ``torchscope sweep --resume``
continues from it. The Optuna study of an ``--optuna`` sweep lives beside it in
``<id>.optuna.sqlite3`` (Optuna's RDB storage), the study named after the sweep.

Trial states: ``running`` → ``complete`` | ``pruned`` | ``failed``; a trial found ``running``
when a sweep resumes was cut by the kill: it becomes ``interrupted`` and its parameters run again.
"""
from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.errors import UsageError
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout

__all__ = [
    "SWEEP_FIELD",
    "SWEEP_TAG_PREFIX",
    "TrialState",
    "Trial",
    "SweepSpec",
    "SweepState",
    "sweep_id",
    "sweeps_dir",
    "state_path",
    "study_storage_url",
    "read_sweep",
    "write_sweep",
    "list_sweeps",
]

# run.json ``extra`` key of a trial run: {"id", "trial", "params", "objective", "state"}.
SWEEP_FIELD = "sweep"
SWEEP_TAG_PREFIX = "sweep:"
_VERSION = 1


class TrialState(enum.StrEnum):
    RUNNING = "running"
    COMPLETE = "complete"
    PRUNED = "pruned"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # running when the sweep was killed; its parameters ran again


@dataclass(frozen=True)
class Trial:
    number: int
    params: Mapping[str, Any]
    state: TrialState = TrialState.RUNNING
    run_id: str | None = None
    objective: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    reason: str = ""  # why failed (no objective logged, exit code) or pruned (at which step)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["state"] = str(self.state)
        d["params"] = dict(self.params)
        return d


@dataclass(frozen=True)
class SweepSpec:
    """What the sweep searches: the command template, the method and the space, the objective."""

    command: tuple[str, ...]
    method: str  # grid | random | optuna
    params: tuple[Mapping[str, Any], ...]  # sweep_space.Param.to_dict()
    trials: int  # planned trials (the grid's size, or N)
    objective: str = "val_loss"
    direction: str = "min"
    reduce: str = "best"
    seed: int = 0
    run_args: tuple[str, ...] = ()
    name: str = "sweep"

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["command"], d["params"], d["run_args"] = list(self.command), [dict(p) for p in self.params], \
            list(self.run_args)
        return d


@dataclass(frozen=True)
class SweepState:
    id: str
    spec: SweepSpec
    created_at: float
    trials: tuple[Trial, ...] = ()
    state: str = "running"  # running | complete
    updated_at: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def replace_trial(self, trial: Trial) -> SweepState:
        """This state with ``trial`` stored under its number (added when new)."""
        others = [t for t in self.trials if t.number != trial.number]
        return dataclasses.replace(self, trials=tuple(sorted([*others, trial], key=lambda t: t.number)))

    def trial(self, number: int) -> Trial | None:
        return next((t for t in self.trials if t.number == number), None)

    def to_dict(self) -> dict[str, Any]:
        return {"version": _VERSION, "id": self.id, "spec": self.spec.to_dict(), "created_at": self.created_at,
                "updated_at": self.updated_at, "state": self.state, "trials": [t.to_dict() for t in self.trials],
                "extra": dict(self.extra)}


def sweep_id(spec: SweepSpec) -> str:
    """The same command, method, space, objective and seed give the same id: running the same
    ``torchscope sweep`` again resumes it."""
    key = json.dumps({k: v for k, v in spec.to_dict().items() if k != "name"}, sort_keys=True)
    return f"{spec.method}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def sweeps_dir(root: Path) -> Path:
    return root / layout.SWEEPS_DIR


def state_path(root: Path, sid: str) -> Path:
    if not sid or "/" in sid or sid.startswith("."):
        raise UsageError(f"{sid!r}: not a sweep id (e.g. optuna-1a2b3c4d, from torchscope sweep)")
    return sweeps_dir(root) / f"{sid}.json"


def study_storage_url(root: Path, sid: str) -> str:
    """Optuna's RDB storage of the sweep: a SQLite file beside its state."""
    return f"sqlite:///{(sweeps_dir(root) / f'{sid}.optuna.sqlite3').resolve()}"


def write_sweep(root: Path, state: SweepState) -> SweepState:
    """Atomically write ``state``; return it with ``updated_at`` set."""
    state = dataclasses.replace(state, updated_at=time.time())
    path = state_path(root, state.id)
    path.parent.mkdir(parents=True, exist_ok=True)
    rf.atomic_write_json(path, state.to_dict())
    return state


def _trial(d: Mapping[str, Any], path: Path) -> Trial:
    try:
        return Trial(number=int(d["number"]), params=dict(d.get("params") or {}), state=TrialState(d["state"]),
                     run_id=d.get("run_id"), objective=d.get("objective"), started_at=d.get("started_at"),
                     ended_at=d.get("ended_at"), exit_code=d.get("exit_code"), reason=str(d.get("reason") or ""))
    except (KeyError, ValueError, TypeError) as e:
        raise rf.CorruptFileError(f"{path}: a trial is malformed ({e})") from None


def read_sweep(root: Path, sid: str) -> SweepState:
    """The stored state of sweep ``sid``. Raises UsageError when there is none and
    CorruptFileError when the file is not a sweep state."""
    path = state_path(root, sid)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        known = ", ".join(s.id for s in list_sweeps(root)[:5]) or "none"
        raise UsageError(f"no sweep {sid!r} in {root} (sweeps there: {known})") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise rf.CorruptFileError(f"{path}: not valid JSON ({e})") from None
    try:
        s = raw["spec"]
        spec = SweepSpec(command=tuple(s["command"]), method=s["method"], params=tuple(s["params"]),
                         trials=int(s["trials"]), objective=s.get("objective", "val_loss"),
                         direction=s.get("direction", "min"), reduce=s.get("reduce", "best"),
                         seed=int(s.get("seed", 0)), run_args=tuple(s.get("run_args") or ()),
                         name=s.get("name", "sweep"))
        return SweepState(id=raw["id"], spec=spec, created_at=float(raw["created_at"]),
                          trials=tuple(_trial(t, path) for t in raw.get("trials") or ()),
                          state=raw.get("state", "running"), updated_at=raw.get("updated_at"),
                          extra=raw.get("extra") or {})
    except (KeyError, TypeError, ValueError) as e:
        raise rf.CorruptFileError(f"{path}: not a sweep state (field {e})") from None


def list_sweeps(root: Path) -> Sequence[SweepState]:
    """Every readable sweep of the store, newest first (unreadable files are skipped)."""
    folder = sweeps_dir(root)
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        try:
            out.append(read_sweep(root, path.stem))
        except rf.TorchscopeError:
            continue
    return sorted(out, key=lambda s: s.created_at, reverse=True)
