"""Run a sweep: each trial a ``torchscope run`` of the filled command, N at a time (workspace layer).

Every trial goes through the run command's own launcher (``python -m app.cli run``), so it is a
normal run, tagged ``sweep:<id>`` and ``sweep-trial:<n>``; when it ends the sweep adds its record
to run.json ``extra["sweep"]`` (id, trial, params, objective, state). The objective is read from
the run's metrics.jsonl with the run format's reader (app.analysis.sweep_space.compute_objective).

For ``--optuna`` the trial's metrics.jsonl is tailed while it runs and each new value of the
objective is reported to Optuna; when the pruner says so the trial's launcher gets SIGTERM (it
forwards it to the job, which flushes), SIGKILL after a grace period, and the run is marked
``pruned``. State is written after every event (sweep_state), so a killed sweep resumes.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.analysis.sweep_space import (
    Param,
    compute_objective,
    expand_grid,
    fill_command,
    objective_series,
    sample_random,
)
from app.errors import UsageError
from app.workspace.sweep_state import (
    SWEEP_FIELD,
    SWEEP_TAG_PREFIX,
    SweepSpec,
    SweepState,
    Trial,
    TrialState,
    read_sweep,
    state_path,
    study_storage_url,
    sweep_id,
    sweeps_dir,
    write_sweep,
)
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout
from profiler_agent.runformat.reader import check_sample

__all__ = ["run_sweep", "best_trial", "load_study", "distributions", "TRIAL_TAG_PREFIX", "POLL_S", "PRUNE_GRACE_S"]

TRIAL_TAG_PREFIX = "sweep-trial:"
POLL_S = 0.05  # how often a running trial's process and metrics are looked at
PRUNE_GRACE_S = 10.0  # SIGTERM, then SIGKILL after this
_PROJECT_HOME = Path(__file__).resolve().parents[2]
_DONE = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAILED)


def _params(spec: SweepSpec) -> list[Param]:
    return [Param(p["name"], p["kind"], p.get("low"), p.get("high"), tuple(p.get("choices") or ())) for p in spec.params]


def _plan(spec: SweepSpec) -> list[dict[str, Any]]:
    """The grid's points or the random points, trial number = index (the same on resume)."""
    params = _params(spec)
    return expand_grid(params) if spec.method == "grid" else sample_random(params, spec.trials, spec.seed)


def best_trial(state: SweepState) -> Trial | None:
    """The complete trial with the best objective (min or max by the spec's direction)."""
    done = [t for t in state.trials if t.state is TrialState.COMPLETE and t.objective is not None]
    if not done:
        return None
    sign = 1.0 if state.spec.direction == "min" else -1.0
    return min(done, key=lambda t: (sign * float(t.objective or 0.0), t.number))


class _MetricsTail:
    """New complete lines of a growing metrics.jsonl, checked like the run format's reader."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0
        self.records: list[dict[str, Any]] = []

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return
        end = chunk.rfind(b"\n")
        if end < 0:
            return
        self.offset += end + 1
        for line in chunk[:end].splitlines():
            with contextlib.suppress(ValueError, UnicodeDecodeError, RecursionError):
                obj = json.loads(line)
                kept, _ = check_sample(obj) if isinstance(obj, dict) else (None, [])
                if kept is not None:
                    self.records.append(kept)


@dataclass
class _Active:
    trial: Trial
    proc: subprocess.Popen[bytes]
    study_trial: Any = None  # optuna.Trial: optuna is an optional import
    run_dir: Path | None = None
    tail: _MetricsTail | None = None
    reported: int = 0  # objective values reported to the study so far
    stop_sent_at: float | None = None
    pruned_reason: str = ""
    log: Any = None
    seen: set[str] = field(default_factory=set)


def _die_with_parent() -> None:
    # A SIGKILLed sweep must not leave trials running: the launcher gets SIGTERM and marks it killed.
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class _Sweep:
    def __init__(self, root: Path, state: SweepState, parallel: int, say: Callable[[str], None]) -> None:
        self.root, self.state, self.parallel, self.say = root, state, parallel, say
        self.spec = state.spec
        self.study: Any = None
        self.active: list[_Active] = []
        self.before = {p.name for p in root.iterdir()} if root.is_dir() else set()

    # -- state ------------------------------------------------------------------------------
    def save(self, trial: Trial | None = None) -> None:
        if trial is not None:
            self.state = self.state.replace_trial(trial)
        self.state = write_sweep(self.root, self.state)

    def recover(self) -> None:
        """Trials left ``running`` by a killed sweep become ``interrupted``; their runs say so."""
        for t in self.state.trials:
            if t.state is TrialState.RUNNING:
                self.say(f"trial {t.number} was running when the sweep stopped: marked interrupted, "
                         "its parameters run again")
                self.save(dataclasses.replace(t, state=TrialState.INTERRUPTED, ended_at=time.time(),
                                              reason="running when the sweep was killed"))
                cut = [*self.state.extra.get("interrupted_runs", []), {"trial": t.number, "run_id": t.run_id}]
                self.state = dataclasses.replace(self.state, extra={**self.state.extra, "interrupted_runs": cut})
                self._mark_run(t.run_id, dataclasses.replace(t, state=TrialState.INTERRUPTED))
        if self.spec.method == "optuna":
            self.study = load_study(self.root, self.state)
            import optuna

            for ft in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
                self.study.tell(ft.number, state=optuna.trial.TrialState.FAIL)
                self.study.enqueue_trial(dict(ft.params), skip_if_exists=False)

    # -- trials -----------------------------------------------------------------------------
    def next_trial(self) -> Trial | None:
        running = {a.trial.number for a in self.active}
        if self.spec.method != "optuna":
            done = {t.number for t in self.state.trials if t.state in _DONE} | running
            todo = [i for i in range(len(_plan(self.spec))) if i not in done]
            return Trial(todo[0], _plan(self.spec)[todo[0]]) if todo else None
        finished = sum(t.state in _DONE for t in self.state.trials)
        if finished + len(self.active) >= self.spec.trials:
            return None
        return Trial(-1, {})  # asked from the study when started

    def start(self, trial: Trial) -> None:
        study_trial = None
        if self.spec.method == "optuna":
            study_trial = self.study.ask(distributions(_params(self.spec)))
            trial = Trial(study_trial.number, dict(study_trial.params))
        command = fill_command(self.spec.command, trial.params)
        logs = sweeps_dir(self.root) / f"{self.state.id}.logs"
        logs.mkdir(parents=True, exist_ok=True)
        log = open(logs / f"trial-{trial.number}.log", "wb")  # noqa: SIM115 - closed when the trial ends
        argv = [sys.executable, "-c", _LAUNCH, str(_PROJECT_HOME), "run", "--root", str(self.root),
                "--name", f"{self.spec.name}-t{trial.number}", *self.spec.run_args,
                "--tags", f"{SWEEP_TAG_PREFIX}{self.state.id}", f"{TRIAL_TAG_PREFIX}{trial.number}", "--", *command]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,  # noqa: S603
                                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
        trial = dataclasses.replace(trial, state=TrialState.RUNNING, started_at=time.time())
        self.active.append(_Active(trial, proc, study_trial, log=log))
        self.save(trial)
        shown = " ".join(f"{k}={v}" for k, v in trial.params.items())
        self.say(f"trial {trial.number} started: {shown}")

    def _find_run(self, a: _Active) -> None:
        tag = f"{TRIAL_TAG_PREFIX}{a.trial.number}"
        for entry in os.scandir(self.root):
            if entry.name in self.before or entry.name in a.seen or entry.name.startswith("."):
                continue
            a.seen.add(entry.name)
            try:
                m = rf.read_manifest(entry.path)
            except rf.TorchscopeError:
                a.seen.discard(entry.name)  # not written yet: look again
                continue
            if f"{SWEEP_TAG_PREFIX}{self.state.id}" in m.tags and tag in m.tags:
                a.run_dir = Path(entry.path)
                a.tail = _MetricsTail(a.run_dir / layout.METRICS)
                a.trial = dataclasses.replace(a.trial, run_id=m.id)
                self.before.add(entry.name)
                self.save(a.trial)
                return

    def watch(self, a: _Active) -> None:
        """Report new objective values to the study; stop the trial when the pruner says so."""
        if a.run_dir is None:
            self._find_run(a)
        if a.tail is None or a.study_trial is None or a.stop_sent_at is not None:
            return
        a.tail.poll()
        for step, value in objective_series(a.tail.records, self.spec.objective):
            # Optuna's step is the value's ordinal (the n-th evaluation), not the optimizer step:
            # trials of different batch sizes evaluate at different optimizer steps, and the
            # median pruner compares trials at equal steps.
            report = a.reported
            a.reported += 1
            a.study_trial.report(value, report)
            if a.study_trial.should_prune():
                a.pruned_reason = (f"pruned at evaluation {report} (step {step}, "
                                   f"{self.spec.objective}={value:.4g})")
                self.say(f"trial {a.trial.number} {a.pruned_reason}: stopping it")
                a.proc.send_signal(signal.SIGTERM)
                a.stop_sent_at = time.monotonic()
                return
        a.tail.records.clear()

    def finish(self, a: _Active) -> None:
        a.log.close()
        if a.run_dir is None:
            self._find_run(a)
        code = a.proc.returncode
        records = rf.read_samples(a.run_dir / layout.METRICS).records if a.run_dir else []
        # A pruned trial's objective is what the pruner judged; values logged after its decision, while
        # the job was being stopped, stay in the run's metrics (they could read better than the best).
        objective = compute_objective(records, self.spec.objective, direction=self.spec.direction,
                                      reduce=self.spec.reduce, upto=a.reported if a.pruned_reason else None)
        if a.pruned_reason:
            state, reason = TrialState.PRUNED, a.pruned_reason
        elif code == 0 and objective is not None:
            state, reason = TrialState.COMPLETE, ""
        elif code == 0:
            state, reason = TrialState.FAILED, f"the run logged no {self.spec.objective}"
        else:
            state, reason = TrialState.FAILED, f"exit code {code}"
        trial = dataclasses.replace(a.trial, state=state, objective=objective, ended_at=time.time(),
                                    exit_code=code, reason=reason)
        if a.study_trial is not None:
            import optuna

            if state is TrialState.COMPLETE:
                self.study.tell(a.study_trial, objective)
            else:
                self.study.tell(a.study_trial, state=optuna.trial.TrialState.PRUNED
                                if state is TrialState.PRUNED else optuna.trial.TrialState.FAIL)
        self._mark_run(trial.run_id, trial, pruned=state is TrialState.PRUNED)
        self.save(trial)
        shown = f"{self.spec.objective}={objective:.6g}" if objective is not None else reason
        self.say(f"trial {trial.number} {state}: {shown}" + (f" ({reason})" if reason and objective is not None else "")
                 + (f" → run {trial.run_id}" if trial.run_id else ""))

    def _mark_run(self, run_id: str | None, trial: Trial, *, pruned: bool = False) -> None:
        if run_id is None or not (self.root / run_id).is_dir():
            return
        record = {"id": self.state.id, "trial": trial.number, "params": dict(trial.params),
                  "objective_key": self.spec.objective, "objective": trial.objective, "state": str(trial.state)}
        with contextlib.suppress(rf.TorchscopeError, OSError):
            rf.update_manifest(self.root / run_id, lambda m: m.replace(
                extra={**m.extra, SWEEP_FIELD: record},
                status=rf.RunStatus.PRUNED if pruned else m.status))

    # -- loop -------------------------------------------------------------------------------
    def loop(self) -> None:
        while True:
            while len(self.active) < self.parallel:
                nxt = self.next_trial()
                if nxt is None:
                    break
                self.start(nxt)
            if not self.active:
                return
            time.sleep(POLL_S)
            for a in list(self.active):
                self.watch(a)
                if a.stop_sent_at is not None and a.proc.poll() is None \
                        and time.monotonic() - a.stop_sent_at > PRUNE_GRACE_S:
                    a.proc.kill()
                if a.proc.poll() is not None:
                    self.active.remove(a)
                    self.finish(a)

    def stop_all(self) -> None:
        """On Ctrl-C/SIGTERM: stop the running trials (their runs say killed), keep them resumable."""
        for a in self.active:
            with contextlib.suppress(OSError):
                a.proc.send_signal(signal.SIGTERM)
        for a in self.active:
            try:
                a.proc.wait(timeout=PRUNE_GRACE_S)
            except subprocess.TimeoutExpired:
                a.proc.kill()
                a.proc.wait()
            a.log.close()
        self.active.clear()


# The trial's launcher: `torchscope run` from this project's tree, whatever the job's sys.path.
_LAUNCH = "import sys; sys.path.insert(0, sys.argv.pop(1)); from app.cli import main; sys.exit(main(sys.argv[1:]))"


def distributions(params: list[Param]) -> dict[str, Any]:
    """Optuna distributions of the sweep's parameters (log-uniform ones on a log scale)."""
    import optuna

    d = optuna.distributions
    out: dict[str, Any] = {}
    for p in params:
        if p.kind == "choice":
            out[p.name] = d.CategoricalDistribution(list(p.choices))
        elif p.kind == "int":
            out[p.name] = d.IntDistribution(int(p.low or 0), int(p.high or 0))
        else:
            out[p.name] = d.FloatDistribution(float(p.low or 0), float(p.high or 0), log=p.kind == "loguniform")
    return out


def require_optuna() -> None:
    """Raise UsageError with the install line when Optuna is missing."""
    try:
        import optuna  # noqa: F401
    except ImportError:
        raise UsageError("--optuna needs Optuna: pip install 'torchscope[sweep]' (or pip install optuna)") from None


def load_study(root: Path, state: SweepState, *, storage: Any = None) -> Any:
    """The sweep's Optuna study (created or loaded): TPE seeded by the spec, MedianPruner with the
    sweep's startup and warm-up settings, stored in the sweep's SQLite file (or ``storage``, e.g.
    Optuna's in-memory one for a replay); a new study gets the sweep's ``--enqueue`` points first."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    extra = state.extra
    pruner = optuna.pruners.MedianPruner(n_startup_trials=int(extra.get("prune_startup_trials", 5)),
                                         n_warmup_steps=int(extra.get("prune_warmup_steps", 0)))
    study = optuna.create_study(study_name=state.id, storage=storage or study_storage_url(root, state.id),
                                direction="minimize" if state.spec.direction == "min" else "maximize",
                                sampler=optuna.samplers.TPESampler(seed=state.spec.seed), pruner=pruner,
                                load_if_exists=True)
    if not study.get_trials(deepcopy=False):  # a new study: --enqueue's points run first, in order
        for point in extra.get("enqueue") or ():
            study.enqueue_trial(dict(point))
    return study


def run_sweep(root: Path, spec: SweepSpec | None, *, resume: str | None = None, parallel: int = 1,
              extra: dict[str, Any] | None = None, say: Callable[[str], None] | None = None) -> SweepState:
    """Run (or resume) a sweep in store ``root``; return its final state.

    ``spec`` starts a new sweep, or resumes the stored one of the same id (the same command and
    space); ``resume`` names a stored sweep instead. Raises UsageError for a bad spec or id.
    """
    say = say or (lambda line: print(f"torchscope sweep: {line}", file=sys.stderr, flush=True))
    if parallel < 1:
        raise UsageError(f"--parallel {parallel}: need 1 or more")
    root.mkdir(parents=True, exist_ok=True)
    if resume is not None:
        state = read_sweep(root, resume)
    else:
        assert spec is not None
        sid = sweep_id(spec)
        if state_path(root, sid).is_file():
            state = read_sweep(root, sid)
            say(f"resuming sweep {sid} (the same command and space)")
        else:
            state = write_sweep(root, SweepState(id=sid, spec=spec, created_at=time.time(), extra=extra or {}))
            say(f"sweep {sid}: {spec.trials} trials ({spec.method}), state in {state_path(root, sid)}")
    if state.spec.method == "optuna":
        require_optuna()
    sweep = _Sweep(root, dataclasses.replace(state, state="running"), parallel, say)
    sweep.recover()
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        sweep.loop()
    except KeyboardInterrupt:
        sweep.stop_all()
        for t in sweep.state.trials:
            if t.state is TrialState.RUNNING:
                sweep.save(dataclasses.replace(t, state=TrialState.INTERRUPTED, reason="the sweep was stopped"))
        say(f"stopped; resume with: torchscope sweep --resume {state.id}")
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    sweep.save()
    sweep.state = write_sweep(root, dataclasses.replace(sweep.state, state="complete"))
    best = best_trial(sweep.state)
    say(f"sweep {state.id} complete: best trial {best.number} {state.spec.objective}={best.objective:.6g} "
        f"({' '.join(f'{k}={v}' for k, v in best.params.items())}) → run {best.run_id}" if best
        else f"sweep {state.id} complete: no trial finished with a {state.spec.objective}")
    return sweep.state


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
