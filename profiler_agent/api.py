"""The Python API: ``with profiler_agent.Run(...) as run: ... run.step(); run.log(...)`` (agent layer).

A Run writes the same files as the zero-code wrapper. Inside a process started by
``torchscope run`` it attaches to that run instead of creating a second one (the launcher then
owns the status); otherwise it creates the run, keeps its heartbeat and sets its final status.
Calling ``step()`` switches the iteration boundary from the optimizer hook to the script.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from .activation import activate_from_environment, start_session, stop_session, write_traceback
from .environment import describe_launch
from .heartbeat import Heartbeat
from .options import RUN_DIR_ENV, AgentOptions, ProfileSchedule
from .runformat import RunStatus, create_run, layout, reserve_status_space, update_manifest_final
from .session import Session, get_session

__all__ = ["Run"]


class Run:
    """One recorded run, driven from the training script.

    Args:
        name: the run's name (default: the script's name).
        root: the run store (default: $TORCHSCOPE_RUNS or ./runs).
        config: hyperparameters to record in the manifest.
        tags: labels shown by the app and ``torchscope ls``.
        schedule: when torch.profiler records (``ProfileSchedule``); ``profile=False`` disables it.
        module_scopes: an ``nn.Module: <name>`` range around each module call in traces (default on).
        evaluation_window, anomaly_factor, max_anomaly_windows: the windows besides the schedule
            (``--no-evaluation-window``, ``--anomaly-factor``, ``--max-anomaly-windows``).
    """

    def __init__(
        self,
        name: str | None = None,
        *,
        root: str | os.PathLike[str] | None = None,
        config: Mapping[str, Any] | None = None,
        tags: tuple[str, ...] | list[str] = (),
        notes: str = "",
        schedule: ProfileSchedule | None = None,
        profile: bool = True,
        grad_norm: bool = False,
        graph: bool = True,
        memory_timeline: bool = False,
        module_scopes: bool = True,
        evaluation_window: bool = True,
        anomaly_factor: float = 2.0,
        max_anomaly_windows: int = 2,
    ) -> None:
        self._session: Session | None = None
        self._heartbeat: Heartbeat | None = None
        self.owner = False
        self.disabled = False
        options = AgentOptions(profile=profile, schedule=schedule or ProfileSchedule(),
                               grad_norm=grad_norm, graph=graph, memory_timeline=memory_timeline,
                               module_scopes=module_scopes, evaluation_window=evaluation_window,
                               anomaly_factor=anomaly_factor, max_anomaly_windows=max_anomaly_windows)
        try:
            self._session = self._attach_or_create(name, root, options, tags, notes)
        except Exception as e:  # noqa: BLE001 - an unrecordable run must not stop the training script
            print(f"torchscope: cannot record this run ({type(e).__name__}: {e}); training continues unrecorded",
                  file=sys.stderr)
            self.disabled = True
            return
        self._session.manual = True
        self._session.start_clock()
        if config:
            self._session.record_config(dict(config))

    def _attach_or_create(self, name: str | None, root: str | os.PathLike[str] | None, options: AgentOptions,
                          tags: tuple[str, ...] | list[str], notes: str) -> Session:
        existing = get_session() or (activate_from_environment() if os.environ.get(RUN_DIR_ENV) else None)
        if existing is not None:
            return existing
        script = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else "run"
        run_dir, manifest = create_run(layout.resolve_root(root), name or script or "run",
                                       command=[sys.executable, *sys.argv], tags=list(tags), notes=notes,
                                       **describe_launch())
        reserve_status_space(run_dir)  # the final status must fit even when the script fills the disk
        session = start_session(run_dir, options, t0=manifest.started_at)
        session.finalize = self._finalize
        self._heartbeat = Heartbeat(run_dir).start()
        self.owner = True
        return session

    # -- public surface ---------------------------------------------------------------------

    @property
    def dir(self) -> Path | None:
        """The run folder (None when the run could not be created)."""
        return None if self.disabled else self._require().run_dir

    @property
    def step_count(self) -> int:
        """Iterations ended so far (the number the next ``step()`` will record)."""
        return 0 if self.disabled else self._require().step

    def step(self, **metrics: Any) -> None:
        """End the current iteration: write its metrics (plus ``metrics``) and advance the profiler."""
        if not self.disabled:
            self._require().end_iteration(metrics or None)

    def log(self, **metrics: Any) -> None:
        """Write ``metrics`` (numbers or scalar tensors) at the current step, e.g. validation loss."""
        if not self.disabled:
            self._require().log(metrics)

    def profile_window(self, *, warmup: int = 1, active: int = 3) -> None:
        """Profile ``active`` iterations (after ``warmup``) starting with the next one."""
        if not self.disabled:
            self._require().windows.request_window(warmup=warmup, active=active)

    def set_config(self, **config: Any) -> None:
        """Record more hyperparameters in the manifest."""
        if not self.disabled:
            self._require().record_config(config)

    def finish(self, status: RunStatus = RunStatus.FINISHED) -> None:
        """Flush everything; when this Run created the run, mark it ``status``."""
        session = self._session
        if session is None:
            return
        if self.owner:
            stop_session(session)
            self._finalize(status)
        else:
            session.metrics.flush()
        self._session = None

    def __enter__(self) -> Run:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        session = self._session
        # sys.exit(0) (or --max-steps ending the job from Run.step()) is a clean end, not a failure.
        clean = exc is None or (isinstance(exc, SystemExit) and exc.code in (0, None))
        if not clean and exc is not None and session is not None and not isinstance(exc, KeyboardInterrupt):
            session.windows.on_exception(exc)  # an out-of-memory error dumps an allocator snapshot
            try:
                write_traceback(session.run_dir, exc, rank=session.rank)
            except OSError:
                pass
        if clean:
            self.finish(RunStatus.FINISHED)
        elif isinstance(exc, KeyboardInterrupt):
            self.finish(RunStatus.KILLED)
        else:
            self.finish(RunStatus.FAILED)

    # -- internals --------------------------------------------------------------------------

    def _require(self) -> Session:
        if self._session is None:
            raise RuntimeError("this Run is finished")
        return self._session

    def _finalize(self, status: RunStatus) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None
        session = self._session
        if session is not None:
            session.finalize = None
        run_dir = session.run_dir if session is not None else None
        if run_dir is None:
            return
        now = time.time()
        try:
            update_manifest_final(run_dir, status=status, ended_at=now, heartbeat=now,
                                  exit_code=0 if status is RunStatus.FINISHED else 1)
        except Exception:  # noqa: BLE001, S110 - the script's outcome matters more than the mark
            pass
