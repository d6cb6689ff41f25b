"""Profiler windows: torch.profiler runs only for scheduled iterations and writes gzipped Kineto traces (agent layer).

A window is a fresh ``torch.profiler.profile`` created just before its warm-up iteration and
dropped after its last active one, so iterations outside windows pay nothing. Its step labels
(``ProfilerStep#N``) use the agent's own step numbers, so traces and metrics.jsonl line up.
On CUDA the allocator history is recorded during the window and a snapshot is dumped to
memory/ at its end. With ``memory_timeline`` the first window also records Python stacks and its
``export_memory_timeline`` raw records (memory by category: parameters, gradients, activations,
optimizer state, ...) are written to memory/ next to the trace. With ``module_scopes`` (the
default) every nn.Module call inside the window is a ``nn.Module: <label>`` range in the trace
(``module_scopes.py``); its global hooks exist only while the window does.

Each window has a reason (:class:`WindowReason`): the schedule's first window (``early``) and
later ones (``scheduled``), the first evaluation phase that began outside any recording window
(``evaluation``: the profiler starts at that forward, inside the iteration, and the trace ends
with the iteration's optimizer step), a training step slower than ``anomaly_factor`` times the
running median (``anomaly``, ``anomaly.py``: the next iterations are profiled), or
``Run.profile_window`` (``requested``). When a window ends, its record (reason, the recorded
steps, the trace) is appended to the manifest's ``profiler.windows``. The first CUDA
out-of-memory error dumps an allocator snapshot (``oom.py``).
"""
from __future__ import annotations

import contextlib
import enum
import gzip
import os
import shutil
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .anomaly import CONFIRM_STEPS, SlowSteps
from .failures import FailureLog
from .module_scopes import ModuleScopes
from .oom import OomSnapshots
from .options import AgentOptions, ProfileSchedule
from .runformat import Artifact, ArtifactKind, add_artifact, layout, update_manifest

__all__ = ["ProfilerWindows", "WindowReason", "WINDOWS_KEY", "profiler_settings"]

WINDOWS_KEY = "windows"  # run.json profiler.windows: one record per finished window


class WindowReason(enum.StrEnum):
    """Why a profiler window was opened (``profiler.windows[].reason`` in run.json)."""

    EARLY = "early"  # the schedule's first window
    SCHEDULED = "scheduled"  # the schedule's later windows (--repeat)
    EVALUATION = "evaluation"  # the first evaluation that no recording window covered
    ANOMALY = "anomaly"  # a training step slower than --anomaly-factor x the running median
    REQUESTED = "requested"  # Run.profile_window()


_RECORDING = (torch.profiler.ProfilerAction.RECORD, torch.profiler.ProfilerAction.RECORD_AND_SAVE)


@dataclass
class _Window:
    """What the manifest will say of the window in progress."""

    reason: WindowReason
    detail: str = ""
    steps: list[int] = field(default_factory=list)  # iterations the trace records (not warm-up)
    evaluation: bool = False  # an evaluation phase began while it recorded
    trace: str | None = None  # its trace, relative to the run folder

    def to_json(self, rank: int) -> dict[str, Any]:
        out: dict[str, Any] = {"reason": str(self.reason), "steps": self.steps, "rank": rank}
        if self.detail:
            out["detail"] = self.detail
        if self.evaluation:
            out["evaluation"] = True
        if self.trace is not None:
            out["trace"] = self.trace
        return out

# Enough allocator events for a few steps of a large model without unbounded memory.
_MEMORY_HISTORY_ENTRIES = 100_000


def profiler_settings(options: AgentOptions, previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The manifest's ``profiler`` field: the schedule as ``torch.profiler.schedule`` arguments, the switches.

    ``skip_first`` is 1: iteration 0 (one-off costs) is never profiled, the first cycle starts at
    iteration 1. ``with_stack`` is what the traces hold (``memory_timeline`` turns it on);
    ``module_scopes`` whether they hold ``nn.Module: <label>`` ranges.
    ``evaluation_window``, ``anomaly_factor`` and ``max_anomaly_windows`` say which windows
    besides the schedule may open; ``windows`` (kept from ``previous``, the field as it was)
    lists those that did.
    """
    s = options.schedule
    windows = list((previous or {}).get(WINDOWS_KEY, []))
    return {
        "wait": s.wait,
        "warmup": s.warmup,
        "active": s.active,
        "repeat": s.repeat,
        "skip_first": 1,
        "enabled": bool(options.profile),
        "with_stack": bool(options.with_stack or options.memory_timeline),
        "memory_timeline": bool(options.memory_timeline),
        "module_scopes": bool(options.module_scopes),
        "evaluation_window": bool(options.evaluation_window),
        "anomaly_factor": float(options.anomaly_factor),
        "max_anomaly_windows": int(options.max_anomaly_windows),
        WINDOWS_KEY: windows,
    }


class ProfilerWindows:
    """Starts and stops torch.profiler windows as the job's iterations advance.

    ``module_root`` returns the model's root (or None while none is known): module ranges are
    labelled by their names in its tree.
    """

    def __init__(
        self,
        run_dir: Path,
        options: AgentOptions,
        failures: FailureLog,
        *,
        worker: str,
        rank: int,
        module_root: Callable[[], torch.nn.Module | None] | None = None,
    ) -> None:
        self._run_dir = run_dir
        self._options = options
        self._failures = failures
        self._worker = worker
        self._rank = rank
        self._prof: torch.profiler.profile | None = None
        self._last_step = -1
        self._requests: list[ProfileSchedule] = []  # extra windows asked for through the API
        self._window: _Window | None = None  # the reason and steps of the open window
        self._scheduled_started = 0
        # A scheduled window whose start came while another window (an anomaly's, a requested one)
        # held the profiler: it starts as soon as the profiler is free, rather than never -- the
        # early window is the typical one an anomaly window is compared with.
        self._scheduled_pending = False
        self._evaluation_left = 1 if options.profile and options.evaluation_window else 0
        self._anomaly_left = options.max_anomaly_windows if options.profile else 0
        self._slow = SlowSteps(options.anomaly_factor)
        self.oom = OomSnapshots(run_dir, failures, worker=worker, rank=rank, step=lambda: self._last_step + 1)
        self._cuda_history = False
        self._timeline_written = False  # see _timeline_wanted
        self._scopes = ModuleScopes(failures, module_root) if options.module_scopes else None
        self.traces_written: list[Path] = []

    @property
    def active(self) -> bool:
        return self._prof is not None

    def request_window(self, warmup: int = 1, active: int = 3) -> None:
        """Profile ``active`` iterations after ``warmup``, starting at the next iteration."""
        self._requests.append(ProfileSchedule(wait=0, warmup=warmup, active=active, repeat=1))

    def on_step(self, step: int, record: Mapping[str, Any] | None = None) -> None:
        """Called when iteration ``step`` has ended (the next one, ``step + 1``, begins).

        ``record`` is the iteration's metrics line (``step_time_s``, ``evaluation``,
        ``profiled``): a slow training step opens an anomaly-triggered window.
        """
        self._last_step = step
        if not self.oom.attached:
            self.oom.attach()
        slow = None
        if record is not None and self._anomaly_left:
            slow = self._slow.observe(step, record.get("step_time_s"),
                                      evaluation=bool(record.get("evaluation")),
                                      profiled=bool(record.get("profiled")))
        upcoming = step + 1
        due = self._options.profile and self._options.schedule.window_start(upcoming)
        if self._prof is not None:
            if due:
                self._scheduled_pending = True
            if self._window is not None and self._prof.current_action in _RECORDING:
                self._window.steps.append(step)
            if self._prof.current_action == torch.profiler.ProfilerAction.RECORD_AND_SAVE:
                # This step() stops the profiler and writes the trace: close module ranges first.
                self._stop_module_scopes()
            with self._failures.guard("profiler step"):
                self._prof.step()
            if self._prof is not None and self._window_over():
                self._finish()
            if self._prof is not None:
                return
        if self._requests or slow is not None:
            # a scheduled window due now follows the window started instead (it was dropped)
            self._scheduled_pending = self._scheduled_pending or due
        if self._requests:
            self._start(upcoming, self._requests.pop(0), _Window(WindowReason.REQUESTED))
        elif slow is not None:
            self._anomaly_left -= 1
            median_s = record["step_time_s"] / slow if record else 0.0
            detail = (f"{CONFIRM_STEPS} training steps in a row over {self._options.anomaly_factor:g}x the "
                      f"running median ({median_s * 1e3:.3g} ms); step {step} took {slow:.1f}x")
            sched = self._options.schedule
            self._start(upcoming, ProfileSchedule(wait=0, warmup=min(sched.warmup, 1), active=sched.active),
                        _Window(WindowReason.ANOMALY, detail))
        elif self._options.profile and (self._scheduled_pending or due):
            self._scheduled_pending = False
            reason = WindowReason.SCHEDULED if self._scheduled_started else WindowReason.EARLY
            self._scheduled_started += 1
            self._start(upcoming, self._options.schedule, _Window(reason))

    def on_evaluation(self, step: int) -> None:
        """An evaluation phase begins in iteration ``step``: profile it if no window records it yet.

        The window starts now, in the middle of the iteration, and ends with the iteration (the
        optimizer step after the evaluation, or the job's end).
        """
        if self._prof is not None:
            if self._window is not None and self._prof.current_action in _RECORDING:
                self._window.evaluation = True
                self._evaluation_left = 0
            return
        if not self._evaluation_left:
            return
        self._evaluation_left = 0
        self._start(step, ProfileSchedule(wait=0, warmup=0, active=1),
                    _Window(WindowReason.EVALUATION, evaluation=True))

    def on_exception(self, exc: BaseException) -> None:
        """An exception is ending the job: an out-of-memory error dumps an allocator snapshot."""
        with self._failures.guard("out-of-memory capture"):
            self.oom.on_exception(exc)

    def close(self, *, in_progress: bool = True) -> None:
        """Stop a window that is still open (the job ended inside it); its trace is saved. The
        iteration in progress is one of its steps when ``in_progress`` says it did something (a
        forward, an evaluation), not when the job simply ended after its last step: that step
        has no metrics line (the suite under load saw a window end at step 60 of a 60-step job)."""
        if self._prof is not None:
            if self._window is not None and self._prof.current_action in _RECORDING and in_progress:
                self._window.steps.append(self._last_step + 1)
            self._finish()

    # -- internals -------------------------------------------------------------------------

    def _window_over(self) -> bool:
        assert self._prof is not None
        return self._prof.current_action == torch.profiler.ProfilerAction.NONE

    def _start(self, first_step: int, sched: ProfileSchedule, window: _Window) -> None:
        with self._failures.guard("profiler start"):
            activities = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            schedule = torch.profiler.schedule(
                wait=0, warmup=sched.warmup, active=sched.active, repeat=1, skip_first=first_step
            ) if sched.warmup else _no_warmup_schedule(first_step, sched.active)
            prof = torch.profiler.profile(
                activities=activities,
                schedule=schedule,
                on_trace_ready=self._write_trace,
                record_shapes=self._options.record_shapes,
                profile_memory=self._options.profile_memory,
                # The memory timeline's categories come from the Python stacks of the allocations.
                with_stack=self._options.with_stack or self._timeline_wanted(),
            )
            # Number the profiler's steps like ours so ProfilerStep#N is iteration N.
            prof.step_num = first_step
            prof.current_action = schedule(first_step)
            if hasattr(prof, "_prev_schedule_action"):
                prof._prev_schedule_action = prof.current_action
            self._start_cuda_history()
            prof.start()
            self._prof = prof
            self._window = window
        if self._prof is not None and self._scopes is not None:
            with self._failures.guard("module scopes"):
                self._scopes.install()

    def _finish(self) -> None:
        self._stop_module_scopes()  # before stop(), so ranges still open are closed inside the trace
        prof, self._prof = self._prof, None
        if prof is not None:
            with self._failures.guard("profiler stop"):
                prof.stop()
        self._stop_cuda_history()
        window, self._window = self._window, None
        if window is not None and window.steps:
            with self._failures.guard("profiler window record"):
                self._record_window(window)

    def _record_window(self, window: _Window) -> None:
        entry = window.to_json(self._rank)

        def change(m: Any) -> Any:
            settings = profiler_settings(self._options, m.extra.get("profiler"))
            settings[WINDOWS_KEY].append(entry)
            return m.replace(extra={**m.extra, "profiler": settings})

        update_manifest(self._run_dir, change)

    def _stop_module_scopes(self) -> None:
        if self._scopes is not None:
            with self._failures.guard("module scopes"):
                self._scopes.uninstall()

    def _write_trace(self, prof: torch.profiler.profile) -> None:
        with self._failures.guard("trace export"):
            traces = self._run_dir / layout.TRACES_DIR
            traces.mkdir(parents=True, exist_ok=True)
            name = layout.trace_file_name(self._worker, time.time_ns())
            raw = traces / f".{name}.{os.getpid()}.json.tmp"
            packed = traces / f".{name}.{os.getpid()}.gz.tmp"
            try:
                prof.export_chrome_trace(str(raw))
                with open(raw, "rb") as src, gzip.open(packed, "wb", compresslevel=5) as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                os.replace(packed, traces / name)
            finally:
                for tmp in (raw, packed):
                    with contextlib.suppress(OSError):
                        tmp.unlink()
            path = traces / name
            self.traces_written.append(path)
            rel = f"{layout.TRACES_DIR}/{name}"
            if self._window is not None:
                self._window.trace = rel
            add_artifact(self._run_dir, Artifact(ArtifactKind.TRACE, rel, rank=self._rank,
                                                 bytes=path.stat().st_size))
        if self._timeline_wanted():
            self._timeline_written = True
            self._write_memory_timeline(prof)
        self._dump_cuda_snapshot()

    def _timeline_wanted(self) -> bool:
        """The memory timeline is exported for the first window of each process only: torch's
        export replays every allocation in Python (tens of seconds for a few steps of a small CPU
        model, inside the job) and the categories rarely change from one window to the next."""
        return self._options.memory_timeline and not self._timeline_written

    def _write_memory_timeline(self, prof: torch.profiler.profile) -> None:
        with self._failures.guard("memory timeline"):
            folder = self._run_dir / layout.MEMORY_DIR
            folder.mkdir(parents=True, exist_ok=True)
            name = layout.memory_timeline_file_name(self._worker, time.time_ns())
            # torch picks the raw form from the ".raw.json.gz" ending: keep it on the temporary name.
            tmp = folder / f".{os.getpid()}.tmp.{name}"
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                device = f"cuda:{torch.cuda.current_device()}"
            else:
                device = "cpu"
            try:
                with warnings.catch_warnings():  # deprecated in favour of CUDA snapshots, which CPUs lack
                    warnings.simplefilter("ignore", FutureWarning)
                    prof.export_memory_timeline(str(tmp), device=device)
                os.replace(tmp, folder / name)
            finally:
                with contextlib.suppress(OSError):
                    tmp.unlink()
            add_artifact(self._run_dir, Artifact(ArtifactKind.MEMORY_TIMELINE, f"{layout.MEMORY_DIR}/{name}",
                                                 rank=self._rank, bytes=(folder / name).stat().st_size))

    def _start_cuda_history(self) -> None:
        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return
        with self._failures.guard("cuda memory history"):
            torch.cuda.memory._record_memory_history(max_entries=_MEMORY_HISTORY_ENTRIES)
            self._cuda_history = True

    def _dump_cuda_snapshot(self) -> None:
        if not self._cuda_history:
            return
        with self._failures.guard("cuda memory snapshot"):
            folder = self._run_dir / layout.MEMORY_DIR
            folder.mkdir(parents=True, exist_ok=True)
            name = layout.snapshot_file_name(self._worker, time.time_ns())
            tmp = folder / f".{name}.tmp"
            torch.cuda.memory._dump_snapshot(str(tmp))
            os.replace(tmp, folder / name)
            add_artifact(self._run_dir, Artifact(ArtifactKind.MEMORY_SNAPSHOT, f"{layout.MEMORY_DIR}/{name}",
                                                 rank=self._rank, bytes=(folder / name).stat().st_size))

    def _stop_cuda_history(self) -> None:
        if self._cuda_history:
            self._cuda_history = False
            with self._failures.guard("cuda memory history"):
                torch.cuda.memory._record_memory_history(enabled=None)


def _no_warmup_schedule(first_step: int, active: int) -> Callable[[int], torch.profiler.ProfilerAction]:
    # torch.profiler.schedule warns when warmup is 0; an explicit 0 is the user's informed choice.
    last = first_step + active - 1

    def schedule(step: int) -> torch.profiler.ProfilerAction:
        if step < first_step or step > last:
            return torch.profiler.ProfilerAction.NONE
        return torch.profiler.ProfilerAction.RECORD_AND_SAVE if step == last else torch.profiler.ProfilerAction.RECORD

    return schedule
