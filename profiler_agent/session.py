"""The agent inside one training process: turns hook events into steps, metrics and artifacts (agent layer).

One :class:`Session` per process writes into one run folder. The zero-code bootstrap and the
Python API both drive it: hooks (``hooks.py``) report forwards, backwards and optimizer steps;
an iteration ends at the primary optimizer's step (or at ``Run.step()`` in manual mode).
Nothing is written until the first step, so processes that never train (DataLoader workers,
launchers such as torchrun) leave no trace in the run.

An iteration's line says ``"evaluation": true`` when the model's root ran for evaluation in it
(``evaluation_steps.py``); an evaluation after the last optimizer step gets a line of its own
at the next step number, without ``step_time_s``. With ``--max-steps N`` the N-th step's
hook flushes, marks the run ``stopped`` and raises ``SystemExit(0)``. A job that never steps an
optimizer becomes an inference run: those methods are :class:`~profiler_agent.inference_steps.InferenceSteps`.
"""
from __future__ import annotations

import os
import socket
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from . import graph
from .accumulation import loss_divisor, step_loss
from .compilation import CompileWatch, write_compile_summary
from .contention import StepCpu
from .environment import read_rank_info
from .evaluation import VAL_LOSS_KEY, EvalLosses
from .evaluation_steps import EvaluationSteps
from .failures import FailureLog
from .first_step import choose_root, record_first_step, start_system_sampler
from .inference import CallWatch
from .inference_steps import InferenceSteps
from .max_steps import stop_job
from .metrics import MetricsLog
from .optimizers import PrimaryOptimizer, total_grad_norm
from .options import AgentOptions
from .profiling import ProfilerWindows
from .runformat import Artifact, RunStatus, layout, update_manifest
from .system import SystemSampler

__all__ = ["Session", "get_session", "set_session"]

_SESSION: Session | None = None


def get_session() -> Session | None:
    """Return this process's active session, if any."""
    return _SESSION


def set_session(session: Session | None) -> None:
    global _SESSION
    _SESSION = session


class Session(InferenceSteps):
    """Everything the agent knows and writes for one process of one run."""

    def __init__(self, run_dir: Path, options: AgentOptions, *, t0: float | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.options = options
        info = read_rank_info()
        self.rank = info.rank
        self.world_size = info.world_size
        self.worker = layout.worker_name(socket.gethostname(), os.getpid(), self.rank)
        self.t0 = t0 if t0 is not None else time.time()
        self.failures = FailureLog(self.run_dir, rank=self.rank)
        self.metrics = MetricsLog(self.run_dir, self.failures, rank=self.rank, t0=self.t0)
        self.windows = ProfilerWindows(self.run_dir, options, self.failures, worker=self.worker, rank=self.rank,
                                       module_root=lambda: self.root)
        self.step = 0  # iterations completed so far; the current iteration's number
        self.manual = False  # True when the API's Run.step() ends iterations
        self.disabled = False
        self.closed = False
        self._lock = threading.RLock()
        self._started = False
        self._iteration_start: float | None = None  # perf_counter at the start of this iteration
        self._trained_this_iteration = False  # a training forward of the model happened in it
        self._data_time: float | None = None  # iteration start (or evaluation end) -> first training forward
        self.evaluation = EvalLosses(self.failures)
        self.evaluation_steps = EvaluationSteps()
        self._discovery_eval: set[int] = set()  # iteration 0: top-level modules called for evaluation
        self._discovery_eval_grad: set[int] = set()  # ... of them, in eval mode with grad mode on
        self._early_values: dict[str, torch.Tensor] = {}  # their losses, until the root is known
        self._step_cpu = StepCpu()
        self.compilation = CompileWatch()  # torch.compile: registered with dynamo by activation
        self.calls = CallWatch()  # inference runs: top-level calls (inference.py)
        self._call_refs: dict[int, weakref.ref[torch.nn.Module]] = {}
        self._training_seen = False  # a backward or an optimizer step happened: not an inference run
        self._inference_summarised = False
        self._compile_marks: dict[int, tuple[int, float]] = {}  # before recognition: per module at call start
        self._stopped = False  # --max-steps ended the job
        self._user_val_loss = False  # the script logs val_loss itself: do not add ours
        self._losses: list[torch.Tensor] = []
        self._loss_divisors: list[float | None] = []  # per loss: the constant it was divided by
        self._samples = 0
        self._tokens = 0  # B x T of the root's integer (B, T) training inputs
        self._early_tokens: dict[int, int] = {}  # iteration 0: per top-level module, until the root is known
        self._grad_norm: torch.Tensor | None = None
        self._primary = PrimaryOptimizer()
        self._pending_config: dict[str, Any] = {}
        self._step_lrs: dict[str, Any] | None = None
        self._sampler: SystemSampler | None = None
        self._graph_thread: threading.Thread | None = None
        self._graph_drawn = False
        # Discovery of the model during the first iteration (see hooks.ModelDiscovery).
        self.top_level: dict[int, tuple[weakref.ref[torch.nn.Module], int]] = {}  # id -> (module, samples)
        self.output_shapes: dict[int, tuple[int, ...]] = {}
        self.root: torch.nn.Module | None = None
        self.unscaled: dict[int, torch.Tensor] = {}  # id(scaler.scale(loss)) -> loss
        self.on_root_found: Callable[[torch.nn.Module | None], None] | None = None  # set by hooks.install
        self.on_inference_root: Callable[[torch.nn.Module], None] | None = None  # set by hooks.install
        self.finalize: Callable[[RunStatus], None] | None = None  # set by an API Run that owns the run
        self.uninstall_hooks: Callable[[], None] = lambda: None  # set by activation.start_session

    # -- events from hooks -------------------------------------------------------------------

    def on_forward(self, module: torch.nn.Module, batch: int | None, top_level: bool,
                   tokens: int = 0) -> None:
        """A training forward of ``module`` with ``batch`` samples and ``tokens`` token ids (B x T of an
        integer input; 0 for other inputs), a top-level call or the root."""
        if not self._trained_this_iteration:
            self._first_training_forward()
        if self.root is None and top_level:
            self.on_top_level_samples(module, batch, tokens)
        elif module is self.root and batch:
            self._samples += batch
            self._tokens += tokens

    def on_top_level_samples(self, module: torch.nn.Module, batch: int | None, tokens: int = 0) -> None:
        """Iteration 0 (root not known yet): a top-level training forward of ``module`` saw ``batch``."""
        if self.root is not None:
            return
        ref, seen = self.top_level.get(id(module), (weakref.ref(module), 0))
        self.top_level[id(module)] = (ref, seen + (batch or 0))
        if tokens:
            self._early_tokens[id(module)] = self._early_tokens.get(id(module), 0) + tokens

    def on_eval_forward(self, *, train_mode: bool = False) -> None:
        """The model's root was called for evaluation (eval mode, or no grad): a phase begins or goes on."""
        if not (self.disabled or self.closed):
            self.evaluation_steps.saw_evaluation()
            if not self.evaluation.active:  # a phase begins: profile it if no window does
                self.windows.on_evaluation(self.step)
            self.evaluation.begin(self.step, train_mode=train_mode)

    def on_discovery_eval(self, module: torch.nn.Module) -> None:
        """Iteration 0 (root not known yet): a top-level module was called for evaluation."""
        if not (self.disabled or self.closed):
            self._discovery_eval.add(id(module))
            if torch.is_grad_enabled():
                self._discovery_eval_grad.add(id(module))
            self.evaluation.begin(self.step, train_mode=module.training)

    def on_training_output(self, output: Any) -> None:
        """A train-mode forward of the root with grad returned ``output``: does a backward reach it?"""
        if not (self.disabled or self.closed):
            self.evaluation_steps.watch(output)

    def on_eval_output(self, output: Any) -> None:
        """An eval-mode forward of the root with grad mode on returned ``output``: unused graph?"""
        if not (self.disabled or self.closed):
            self.evaluation_steps.watch_evaluation(output)

    def on_backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()`` is about to run: keep the scalar (detached, unread) for this step."""
        self._training_began()
        kept = loss
        if self.unscaled:  # AMP: report the loss, not loss * scale
            original = self.unscaled.pop(id(loss), None)
            self.unscaled.clear()
            kept = original if original is not None else loss
        self._losses.append(kept.detach())
        self._loss_divisors.append(loss_divisor(kept))  # gradient accumulation: loss / n (accumulation.py)
        if not self._graph_drawn and self.options.graph and self.rank == 0:
            self._graph_drawn = True
            with self.failures.guard("backward graph"):
                self._draw_graph(loss)

    def on_optimizer_pre_step(self, optimizer: torch.optim.Optimizer) -> None:
        """The optimizer is about to step: with ``--grad-norm``, the primary's gradient norm (unread)."""
        if self.options.grad_norm and self._primary.is_primary(optimizer):
            with self.failures.guard("gradient norm"):
                self._grad_norm = total_grad_norm(optimizer)

    def on_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """The optimizer stepped: in automatic mode the primary optimizer's step ends the iteration."""
        self._training_began()
        if not self._primary.claim(optimizer):
            return
        # The rates this step used: a scheduler may change them before Run.step() is called.
        self._step_lrs = self._primary.learning_rates()
        if not self.manual:
            self.end_iteration()

    def record_config(self, config: Mapping[str, Any]) -> None:
        """Merge hyperparameters into the manifest's config (written at the first step if before)."""
        with self._lock:
            self._pending_config.update(config)
            if self._started:
                self._flush_config()

    # -- iterations -------------------------------------------------------------------------

    def end_iteration(self, extra: Mapping[str, Any] | None = None) -> None:
        """Close the current iteration: write its metrics line and advance the profiler."""
        if self.disabled or self.closed:
            return
        with self._lock:
            now = time.perf_counter()
            cpu = self._step_cpu.finish()
            if not self._started:
                self._on_first_step()
            if self.evaluation.active:
                with self.failures.guard("evaluation loss"):
                    self._end_evaluation()
            record = self._take_step_record(now, cpu)
            if extra:
                record.update(extra)
            self.metrics.append(record)
            self.windows.on_step(self.step, record)
            self.step += 1
            stop = self._max_steps_reached()
            # The profiler's own work (a trace export) is not part of the next iteration.
            self._iteration_start = time.perf_counter()
            self._step_cpu.start()
        if stop:
            stop_job(self.run_dir, self.metrics, self.failures, self.options.max_steps, self.close)

    def _take_step_record(self, now: float, cpu: Mapping[str, Any]) -> dict[str, Any]:
        """The iteration's metrics line (values may be unread tensors); resets what it took."""
        record: dict[str, Any] = {"step": self.step}
        if self._iteration_start is not None:
            record["step_time_s"] = now - self._iteration_start
            record.update(cpu)
        if self._data_time is not None:
            record["data_time_s"], self._data_time = self._data_time, None
        self._trained_this_iteration = False
        if self._losses:
            losses, self._losses = self._losses, []
            divisors, self._loss_divisors = self._loss_divisors, []
            record["loss"] = step_loss(losses, divisors)
            if len(losses) > 1:
                record["backward_calls"] = len(losses)
        lrs, self._step_lrs = self._step_lrs, None
        record.update(lrs if lrs is not None else self._primary.learning_rates())
        if self._samples:
            record["samples"], self._samples = self._samples, 0
        if self._tokens:
            record["tokens"], self._tokens = self._tokens, 0
        if self._grad_norm is not None:
            record["grad_norm"], self._grad_norm = self._grad_norm, None
        if self.windows.active:  # a profiler window (warm-up or active) covered this iteration
            record["profiled"] = True
        if self.evaluation_steps.held():
            record["evaluation"] = True
            record["eval_grad_enabled"] = self.evaluation_steps.grad_enabled
        record.update(self.compilation.take_step())
        return record

    def log(self, values: Mapping[str, Any]) -> None:
        """Write a metrics line of user values (e.g. validation loss) at the current step."""
        if self.disabled or self.closed:
            return
        with self._lock:
            if VAL_LOSS_KEY in values:
                self._user_val_loss = True
            self.metrics.append({"step": self.step, **values})

    def start_clock(self) -> None:
        """Start timing the current iteration now (API mode: Run.__enter__)."""
        if self._iteration_start is None:
            self._iteration_start = time.perf_counter()
            self._step_cpu.start()

    def close(self) -> None:
        """Flush everything: metrics, an open profiler window, the sampler, the graph. Idempotent."""
        with self._lock:
            if self.closed or self.disabled:
                return
            with self.failures.guard("inference summary"):
                if self._inference_pending():  # the job ended right after its RECOGNISE_CALLS-th call
                    self._recognise_inference()
                self._end_inference()
            # the iteration in progress did something (a forward, an evaluation): an open profiler
            # window records it; a job that simply ended after its last step has none
            in_progress = self._trained_this_iteration or self.evaluation.active
            with self.failures.guard("evaluation loss"):
                self._end_evaluation(last=True)  # an evaluation after the last step
            self.closed = True
        self.evaluation.uninstall()
        self._step_cpu.close()
        with self.failures.guard("close profiler"):
            self.windows.close(in_progress=in_progress)
        with self.failures.guard("close metrics"):
            self.metrics.close()
        if self.rank == 0:
            with self.failures.guard("compile summary"):
                write_compile_summary(self.run_dir, self.compilation)
        if self._sampler is not None:
            self._sampler.stop()
        if self._graph_thread is not None:
            self._graph_thread.join(timeout=30)
        self.failures.close()

    # -- internals --------------------------------------------------------------------------

    def _first_training_forward(self) -> None:
        """Start of the iteration's compute: what came before it since the last step was data waiting."""
        now = time.perf_counter()
        self._trained_this_iteration = True
        if self.evaluation.active:
            with self.failures.guard("evaluation loss"):
                self._end_evaluation()
        if self._iteration_start is None:  # step 0 (zero-code): the clock starts here
            self._iteration_start = now
            self._step_cpu.start()
            return
        since = self._iteration_start
        last_eval = self.evaluation.last_activity
        if last_eval is not None and last_eval > since:  # an evaluation ran in between: not data time
            since = last_eval
        self._data_time = now - since

    def _end_evaluation(self, *, last: bool = False) -> None:
        """Close an evaluation phase, logging its mean loss at the step it began in.

        ``last``: the job ends; an evaluation since the last optimizer step has no step line to
        mark, so its line (``{"step": n, "evaluation": true, "val_loss": ...}``) says it.
        """
        step = self.evaluation.step
        values = self.evaluation.end() if self.evaluation.active else {}
        if not self._started:  # iteration 0: kept until the first step says whether it was the model
            self._early_values.update(values)
            return
        if self._user_val_loss:
            values = {}
        record: dict[str, Any] = {}
        if last and self.evaluation_steps.held():
            record["evaluation"] = True
            record["eval_grad_enabled"] = self.evaluation_steps.grad_enabled
        record.update(values)
        if record:
            self.metrics.append({"step": self.step if step is None else step, **record})

    def _max_steps_reached(self) -> bool:
        limit = self.options.max_steps
        if limit is None or self._stopped or self.step < limit:
            return False
        self._stopped = True
        return True

    def _on_first_step(self) -> None:
        self._started = True
        tree = self._adopt_root()
        self._judge_early_evaluation()
        if self.on_root_found is not None:
            with self.failures.guard("model hooks"):
                self.on_root_found(self.root)
        self._record_first_step(tree)

    def _record_first_step(self, tree: Artifact | None) -> None:
        """The run's first step is known (a training step, or an inference run recognised): the
        manifest's first-step record, the config, and the system sampler."""
        with self.failures.guard("manifest"):
            record_first_step(self.run_dir, self.options, rank=self.rank, world_size=self.world_size, tree=tree)
        self._flush_config()
        with self.failures.guard("system sampler"):
            self._sampler = start_system_sampler(self.run_dir, self.failures, self.options, rank=self.rank,
                                                 t0=self.t0, step_cpu=self._step_cpu)

    def _adopt_root(self) -> Artifact | None:
        """Choose the model's root among the first iteration's top-level modules and take its
        samples; rank 0 writes its module tree (returned, recorded with the first step's manifest)."""
        tree: Artifact | None = None
        with self.failures.guard("find model"):
            candidates = [m for ref, _ in self.top_level.values() if (m := ref()) is not None]
            self.root = choose_root(candidates, self._primary.parameter_ids())
            if self.root is not None:
                _, samples = self.top_level.get(id(self.root), (None, 0))
                self._samples = samples
                self._tokens = self._early_tokens.get(id(self.root), 0)
                if self.rank == 0:  # every rank holds the same model
                    tree = graph.write_module_tree(self.run_dir, self.root, self.output_shapes, record=False)
        self.top_level.clear()
        self._early_tokens.clear()
        return tree

    def _judge_early_evaluation(self) -> None:
        """Iteration 0's evaluations, seen before the root was known: the model's, or another module's."""
        early, self._early_values = self._early_values, {}
        if self.root is not None and id(self.root) in self._discovery_eval:
            # the model was evaluated before (or within) its first training step
            self.evaluation_steps.saw_evaluation(with_grad=id(self.root) in self._discovery_eval_grad)
            if early and not self._user_val_loss:
                self.metrics.append({"step": 0, **early})
        elif self.evaluation.active:  # another module (a frozen teacher) ran in eval mode: not ours
            self.evaluation.end()
        self._discovery_eval.clear()
        self._discovery_eval_grad.clear()

    def _flush_config(self) -> None:
        if not self._pending_config:
            return
        config, self._pending_config = self._pending_config, {}
        with self.failures.guard("record config"):
            update_manifest(self.run_dir, config=config)

    def _draw_graph(self, loss: torch.Tensor) -> None:
        params: dict[str, torch.Tensor] = {}
        for ref, _ in self.top_level.values():
            if (module := ref()) is not None:
                params.update(module.named_parameters())
        self._graph_thread = graph.start_backward_graph(self.run_dir, self.failures, loss, params)
