"""Zero-code instrumentation: wait for ``import torch``, then start the agent (agent layer, stdlib only).

Called from the bootstrap ``sitecustomize`` in every Python process of a wrapped job, so it is
on every such process's start-up path and imports only ``os``, ``sys`` and ``import_hooks``
(issue 11: the agent's fixed cost per job). One meta path finder, :class:`TorchImportWatcher`,
answers for the few modules the agent acts on, each once: ``torch`` (the agent starts),
``argparse`` (its results are captured as the run's config) and the Lightning and transformers
trainer modules (their ``Trainer`` gets the agent's callback). The agent's own modules for each
load only when that module has been imported; a process that imports none of them pays one
Python call per import and nothing else.

``torchscope run`` starts the job before the run's manifest is written (so that the job's
interpreter starts while the launcher is still importing); it hands the job the read end of a
pipe (``TORCHSCOPE_RUN_GATE``) that it closes once run.json exists, or once it gave up making
the run. The agent waits for that before its first write, at ``import torch``: by then the
launcher has long finished, so the wait costs nothing in practice.
"""
from __future__ import annotations

import os
import sys

from .import_hooks import spec_running_after

TYPE_CHECKING = False  # typing itself costs ~3 ms of every wrapped process's start; mypy reads it as True
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, MutableMapping, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

__all__ = ["install", "TorchImportWatcher", "wait_for_run", "GATE_ENV", "FRAMEWORK_MODULES"]

# options.RUN_DIR_ENV and runformat.layout.MANIFEST (options loads dataclasses and json, which a
# process that never imports torch does not need); tests/agent/test_early_start.py keeps them equal.
RUN_DIR_ENV = "TORCHSCOPE_RUN_DIR"
_MANIFEST = "run.json"
# "<fd>:<st_dev>:<st_ino>" of the pipe whose end of file says that the launcher has made the run.
GATE_ENV = "TORCHSCOPE_RUN_GATE"
# A process that lacks the pipe (started by the job with close_fds) looks for run.json this long.
GATE_POLL_S = 10.0
# The modules that define the trainer classes frameworks.py patches (frameworks._PATCHES, kept
# equal by a test): frameworks.py itself loads only when one of them is imported.
FRAMEWORK_MODULES = ("lightning.pytorch.trainer.trainer", "pytorch_lightning.trainer.trainer",
                     "transformers.trainer")


class TorchImportWatcher:
    """The bootstrap's meta path finder: answers only for torch, argparse and the trainer modules, each once.

    For each, it asks the finders after it for the real spec and wraps its loader, so that the
    module runs first and the agent's part right after (:class:`AfterExecLoader`). It leaves
    ``sys.meta_path`` once it has nothing left to watch.
    """

    def __init__(self) -> None:
        self._pending: dict[str, Callable[[ModuleType], None]] = {
            "torch": _after_torch, "argparse": _after_argparse,
            **dict.fromkeys(FRAMEWORK_MODULES, _after_framework)}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in self._pending:
            return None
        if fullname in FRAMEWORK_MODULES and _frameworks_watching():
            self.forget(FRAMEWORK_MODULES)  # frameworks.py's own watcher has taken over
            return None
        after = self._pending.pop(fullname, None)  # once, even when two threads import it
        if after is None:
            return None
        if not self._pending:
            _remove_watcher()
        return spec_running_after(self, fullname, path, target, after)

    def forget(self, names: Sequence[str]) -> None:
        for name in names:
            self._pending.pop(name, None)
        if not self._pending:
            _remove_watcher()


def _watchers() -> list[TorchImportWatcher]:
    return [f for f in sys.meta_path if isinstance(f, TorchImportWatcher)]


def _remove_watcher() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, TorchImportWatcher)]


def _frameworks_watching() -> bool:
    frameworks = sys.modules.get("profiler_agent.frameworks")
    watcher = getattr(frameworks, "FrameworkWatcher", None)
    return watcher is not None and any(isinstance(f, watcher) for f in sys.meta_path)


def _after_torch(_torch: ModuleType) -> None:
    _activate()


def _after_argparse(_argparse: ModuleType) -> None:
    try:
        from .argcapture import install_argparse_capture

        install_argparse_capture()
    except Exception as e:  # noqa: BLE001 - the job's argument parsing must work regardless
        print(f"torchscope agent: argparse capture failed ({type(e).__name__}: {e})", file=sys.stderr)


def _after_framework(_module: ModuleType) -> None:
    try:
        from .frameworks import install_framework_capture

        install_framework_capture()  # patches the module that just ran, watches for the others
    except Exception as e:  # noqa: BLE001 - the job keeps its trainer as it was
        print(f"torchscope agent: trainer capture failed ({type(e).__name__}: {e})", file=sys.stderr)
    for watcher in _watchers():
        watcher.forget(FRAMEWORK_MODULES)


def wait_for_run(environ: MutableMapping[str, str] | None = None, *, poll_s: float = GATE_POLL_S) -> bool:
    """Wait until the launcher has made the run (run.json exists) or given up; True when it exists.

    Without ``TORCHSCOPE_RUN_GATE`` (a run made before the job started) nothing is waited for. With it, the pipe's end of file is the answer; a process that did not inherit the
    pipe looks for run.json for at most ``poll_s`` seconds (never in practice: such a process
    starts after the job's own activation). The variable is removed: processes this one starts
    later find run.json there already.
    """
    env = os.environ if environ is None else environ
    gate = env.pop(GATE_ENV, None)
    manifest = os.path.join(env.get(RUN_DIR_ENV, ""), _MANIFEST)
    if not gate:
        return True
    try:
        fd, dev, ino = (int(part) for part in gate.split(":"))
        info = os.fstat(fd)
        ours = (info.st_dev, info.st_ino) == (dev, ino)
    except (ValueError, OSError):
        fd, ours = -1, False
    if ours:
        try:
            while os.read(fd, 4096):  # blocks until the launcher closes its end
                pass
        except OSError:
            pass
        finally:
            try:
                os.close(fd)
            except OSError:
                pass
        return os.path.exists(manifest)
    import time

    deadline = time.monotonic() + poll_s
    while not os.path.exists(manifest):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def _activate() -> None:
    try:
        if not wait_for_run():
            print("torchscope agent: the run was not created; the job runs uninstrumented", file=sys.stderr)
            return
        from .activation import activate_from_environment

        activate_from_environment()
    except Exception as e:  # noqa: BLE001 - the job must run even if the agent cannot
        print(f"torchscope agent: could not start ({type(e).__name__}: {e}); the job runs uninstrumented",
              file=sys.stderr)


def install(environ: Mapping[str, str] | None = None) -> bool:
    """Arm the agent in this process when a run folder is set; return whether it was armed."""
    env = os.environ if environ is None else environ
    if not env.get(RUN_DIR_ENV):
        return False
    if _watchers():
        return True
    watcher = TorchImportWatcher()
    if "argparse" in sys.modules:
        watcher.forget(["argparse"])
        _after_argparse(sys.modules["argparse"])
    if any(name in sys.modules for name in FRAMEWORK_MODULES):
        watcher.forget(FRAMEWORK_MODULES)
        _after_framework(sys.modules[next(n for n in FRAMEWORK_MODULES if n in sys.modules)])
    if "torch" in sys.modules:
        watcher.forget(["torch"])
        _activate()
    if watcher._pending:
        sys.meta_path.insert(0, watcher)
    return True
