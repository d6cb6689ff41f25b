"""The session's inference-run part: recognition, one step per top-level call, the summary (agent layer).

:class:`InferenceSteps` is a base of :class:`~profiler_agent.session.Session`, split from it so
that each module keeps to one responsibility: ``inference.py`` holds the pure rules (warm-up,
the latency summary), this module the session's methods that apply them to the hooks' calls
(``hooks.py`` calls ``on_call_begin``/``on_call_end``). The state it reads and writes is the
session's own, set in ``Session.__init__``.
"""
from __future__ import annotations

import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from . import graph
from .compilation import COMPILE_KEY, COMPILE_S_KEY, CompileWatch
from .evaluation import EvalLosses
from .failures import FailureLog
from .first_step import choose_root
from .inference import INFERENCE_KEY, RECOGNISE_CALLS, Call, CallWatch, latency_summary
from .inference import MANIFEST_KEY as INFERENCE_MANIFEST_KEY
from .metrics import MetricsLog
from .profiling import ProfilerWindows
from .runformat import Artifact, update_manifest

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["InferenceSteps"]


class InferenceSteps:
    """Top-level calls of a job that never steps an optimizer, as steps (inference.py)."""

    if TYPE_CHECKING:  # the session's state (Session.__init__)
        run_dir: Path
        rank: int
        step: int
        disabled: bool
        closed: bool
        root: torch.nn.Module | None
        failures: FailureLog
        metrics: MetricsLog
        windows: ProfilerWindows
        evaluation: EvalLosses
        compilation: CompileWatch
        calls: CallWatch
        top_level: dict[int, tuple[weakref.ref[torch.nn.Module], int]]
        output_shapes: dict[int, tuple[int, ...]]
        on_root_found: Callable[[torch.nn.Module | None], None] | None
        on_inference_root: Callable[[torch.nn.Module], None] | None
        _lock: threading.RLock
        _started: bool
        _training_seen: bool
        _inference_summarised: bool
        _compile_marks: dict[int, tuple[int, float]]
        _call_refs: dict[int, weakref.ref[torch.nn.Module]]
        _discovery_eval: set[int]
        _discovery_eval_grad: set[int]

        def _record_first_step(self, tree: Artifact | None) -> None: ...

    def _calls_watched(self) -> bool:
        if self.disabled or self.closed or self._training_seen or self.calls.stopped:
            return False
        return self.calls.recognised or not self._started

    def on_call_begin(self, module: torch.nn.Module, batch: int | None) -> None:
        """A top-level call of ``module`` begins (grad mode and module.training read here: cheap)."""
        if not self._calls_watched():
            return
        # Recognised at the next call's start, not at the RECOGNISE_CALLS-th call's end: a training
        # forward's backward comes between the two.
        if not self.calls.recognised and self.calls.calls_seen.get(id(module), 0) >= RECOGNISE_CALLS:
            with self.failures.guard("inference"):
                self._recognise_inference()
        self.calls.begin(id(module), batch, torch.is_grad_enabled(), module.training)
        if not self.calls.recognised:  # compile keys of a call that may yet be a training step's
            self._compile_marks[id(module)] = (self.compilation.compilations, self.compilation.total_s)

    def on_call_end(self, module: torch.nn.Module) -> None:
        """A top-level call of ``module`` ended: an inference step, or a call towards recognition."""
        if not self._calls_watched():
            return
        call = self.calls.end(id(module))
        if call is None:
            return
        if self.calls.recognised:
            compiled = self.compilation.take_step()
        else:  # not taken: if this is a training job, its first step's line needs them
            count, seconds = self._compile_marks.pop(id(module), (self.compilation.compilations, 0.0))
            compiled = {COMPILE_KEY: True, COMPILE_S_KEY: self.compilation.total_s - seconds} \
                if self.compilation.compilations > count else {}
        if compiled:
            call = Call(call.latency_s, call.batch, call.grad, call.train, call.idle_s, compiled)
        if self.calls.recognised:
            if module is self.root:
                self._inference_step(call)
            return
        self._call_refs.setdefault(id(module), weakref.ref(module))
        self.calls.note_early(id(module), call)

    def _inference_pending(self) -> bool:
        return (not (self.calls.recognised or self._started or self._training_seen)
                and max(self.calls.calls_seen.values(), default=0) >= RECOGNISE_CALLS)

    def _recognise_inference(self) -> None:
        candidates = [m for ref in self._call_refs.values() if (m := ref()) is not None]
        root = choose_root(candidates, set())
        if root is None:
            return
        with self._lock:
            self.calls.recognised = True
            self.compilation.take_step()  # the early calls carry their own compile keys
            self._compile_marks.clear()
            self.root = root
            self._started = True
            if self.evaluation.active:  # evaluation-loss bookkeeping is the training loop's
                self.evaluation.end()
            self._discovery_eval.clear()
            self._discovery_eval_grad.clear()
            self.top_level.clear()
            tree: Artifact | None = None
            if self.rank == 0:
                with self.failures.guard("module tree"):
                    tree = graph.write_module_tree(self.run_dir, root, self.output_shapes, record=False)
            self._record_first_step(tree)
            if self.on_inference_root is not None:
                with self.failures.guard("inference hooks"):
                    self.on_inference_root(root)
            early = self.calls.early.get(id(root), [])
            self.calls.early.clear()
            self._call_refs.clear()
            for call in early:
                self._inference_step(call)

    def _inference_step(self, call: Call) -> None:
        """One inference call: its metrics line (held back until warm-up settles) and the profiler."""
        with self._lock:
            record: dict[str, Any] = {"step": self.step, "step_time_s": call.latency_s, INFERENCE_KEY: True}
            if call.batch:
                record["samples"] = call.batch
            if call.idle_s is not None:
                record["idle_s"] = call.idle_s
            if call.grad:
                record["grad_enabled"] = True
            if call.train:
                record["train_mode"] = True
            if self.windows.active:
                record["profiled"] = True
            record.update(call.compile)
            for line in self.calls.add(record):
                self.metrics.append(line)
            self.windows.on_step(self.step, record)
            self.step += 1

    def _end_inference(self, *, training: bool = False) -> None:
        """Write what is held and the run's latency summary (metrics line and run.json), once."""
        if not self.calls.recognised or self._inference_summarised:
            return
        self._inference_summarised = True
        self.calls.stopped = True
        for line in self.calls.flush():
            self.metrics.append(line)
        summary = latency_summary(self.calls.written)
        if not summary["inference_calls"]:
            return
        self.metrics.append({"step": self.step, **summary})
        if training:
            summary["stopped"] = "training began (a backward or an optimizer step)"
        if self.rank == 0:
            update_manifest(self.run_dir, lambda m: m.replace(extra={**m.extra, INFERENCE_MANIFEST_KEY: summary}))

    def _training_began(self) -> None:
        if self._training_seen:
            return
        self._training_seen = True
        if self.calls.recognised:
            with self.failures.guard("inference"):
                self._end_inference(training=True)
                if self.on_root_found is not None:
                    self.on_root_found(self.root)

