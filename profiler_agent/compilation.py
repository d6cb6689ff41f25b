"""torch.compile seen from the agent: which steps compiled, and graph breaks and recompiles per run (agent layer).

:func:`watch_compilation` never imports ``torch._dynamo`` itself (it is heavy, and most jobs do
not compile): when ``torch._dynamo.callback`` is already loaded the callbacks are registered at
once, otherwise a meta path finder that answers only for that module registers them right after
it loads (``torch.compile`` loads it before its first compilation). Dynamo calls the start and
end callbacks around each outermost compilation (``torch._dynamo.callback.callback_handler``),
with a ``compile_id`` ``"<frame>/<attempt>"``: an attempt above 0 is a recompilation of a frame
already compiled (a guard failed, e.g. a new input shape).

Per step (:meth:`CompileWatch.take_step`): ``{"compile": true, "compile_s": seconds}`` when a
compilation ran during the step, so readers leave it out of steady state like warm-up. Per run
(:meth:`CompileWatch.summary`, run.json ``"compile"``): ``graph_breaks`` (dynamo's
``counters["graph_break"]``, one per break met while compiling), ``recompiles``, ``frames``
(frames compiled), ``compilations`` and ``compile_s``.
"""
from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import time
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from .import_hooks import AfterExecLoader

__all__ = ["CALLBACK_MODULE", "COMPILE_KEY", "COMPILE_S_KEY", "MANIFEST_KEY", "CompileWatch", "watch_compilation"]

CALLBACK_MODULE = "torch._dynamo.callback"
COMPILE_KEY = "compile"  # metrics.jsonl: the step compiled (written only when true)
COMPILE_S_KEY = "compile_s"  # metrics.jsonl: seconds spent compiling during the step
MANIFEST_KEY = "compile"  # run.json: per-run counts


class CompileWatch:
    """Counts dynamo compilations and their time; one per process, fed by dynamo's callbacks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started: float | None = None
        self._step_s = 0.0
        self._step_compiled = False
        self.total_s = 0.0
        self.compilations = 0
        self.recompiles = 0
        self.frames: set[str] = set()
        self.registered = False

    def on_start(self, args: Any) -> None:
        self._started = time.perf_counter()

    def on_end(self, args: Any) -> None:
        started, self._started = self._started, None
        seconds = time.perf_counter() - started if started is not None else 0.0
        frame, _, attempt = str(getattr(args, "compile_id", "")).partition("/")
        with self._lock:
            self._step_compiled = True
            self._step_s += seconds
            self.total_s += seconds
            self.compilations += 1
            if attempt.isdigit() and int(attempt) > 0:
                self.recompiles += 1
            self.frames.add(frame)

    def take_step(self) -> dict[str, Any]:
        """The keys for the step that just ended (empty when it did not compile); resets them."""
        if not self._step_compiled:
            return {}
        with self._lock:
            seconds, self._step_s, self._step_compiled = self._step_s, 0.0, False
        return {COMPILE_KEY: True, COMPILE_S_KEY: seconds}

    def summary(self) -> dict[str, Any] | None:
        """The run's counts for run.json, or None when nothing was compiled."""
        if not self.compilations:
            return None
        return {"graph_breaks": _graph_breaks(), "recompiles": self.recompiles, "frames": len(self.frames),
                "compilations": self.compilations, "compile_s": self.total_s}

    def register(self, module: ModuleType) -> None:
        handler = getattr(module, "callback_handler", None)
        if handler is None or self.registered:
            return
        handler.register_start_callback(self.on_start)
        handler.register_end_callback(self.on_end)
        self.registered = True

    def unregister(self) -> None:
        module = sys.modules.get(CALLBACK_MODULE)
        if module is None or not self.registered:
            return
        with contextlib.suppress(Exception):
            module.callback_handler.remove_start_callback(self.on_start)
            module.callback_handler.remove_end_callback(self.on_end)
        self.registered = False


def _graph_breaks() -> int:
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    if counters is None:
        return 0
    with contextlib.suppress(Exception):
        return int(sum(counters["graph_break"].values()))
    return 0


def watch_compilation(watch: CompileWatch) -> None:
    """Register ``watch`` with dynamo now if it is loaded, else as soon as it is. Never raises."""
    with contextlib.suppress(Exception):
        module = sys.modules.get(CALLBACK_MODULE)
        if module is not None:
            watch.register(module)
        elif not any(isinstance(f, _CallbackImportWatcher) for f in sys.meta_path):
            sys.meta_path.insert(0, _CallbackImportWatcher(watch))


class _CallbackImportWatcher(importlib.abc.MetaPathFinder):
    """A meta path finder that only ever answers for dynamo's callback module, and only once."""

    def __init__(self, watch: CompileWatch) -> None:
        self._watch = watch

    def _register_quietly(self, module: ModuleType) -> None:
        with contextlib.suppress(Exception):  # the job's import must succeed whatever happens here
            self._watch.register(module)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != CALLBACK_MODULE:
            return None
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _CallbackImportWatcher)]
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = AfterExecLoader(spec.loader, self._register_quietly)
        return spec


def write_compile_summary(run_dir: Any, watch: CompileWatch) -> None:
    """Put the run's counts into run.json's ``"compile"`` (nothing when the job never compiled)."""
    summary = watch.summary()
    if summary is None:
        return
    from .runformat import update_manifest

    update_manifest(run_dir, lambda m: m.replace(extra={**m.extra, MANIFEST_KEY: summary}))
