"""Zero-code instrumentation: wait for ``import torch``, then start the agent (agent layer, stdlib only).

Called from the bootstrap ``sitecustomize`` in every Python process of a wrapped job. It
costs a process that never imports torch one meta-path lookup per import and the argparse
wrapper; the torch-dependent part (``activation``) is imported only once torch has loaded.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from .argcapture import install_argparse_capture
from .frameworks import install_framework_capture
from .import_hooks import AfterExecLoader
from .options import RUN_DIR_ENV

__all__ = ["install", "TorchImportWatcher"]


class TorchImportWatcher(importlib.abc.MetaPathFinder):
    """A meta path finder that only ever answers for ``torch``, and only once."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch":
            return None
        _remove_watcher()
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        spec.loader = AfterExecLoader(spec.loader, lambda _torch: _activate())
        return spec


def _remove_watcher() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, TorchImportWatcher)]


def _activate() -> None:
    try:
        from .activation import activate_from_environment

        activate_from_environment()
    except Exception as e:  # noqa: BLE001 - the job must run even if the agent cannot
        print(f"torchscope agent: could not start ({type(e).__name__}: {e}); the job runs uninstrumented",
              file=sys.stderr)


def install(environ: Any = None) -> bool:
    """Arm the agent in this process when a run folder is set; return whether it was armed."""
    env = os.environ if environ is None else environ
    if not env.get(RUN_DIR_ENV):
        return False
    install_argparse_capture()
    install_framework_capture()  # before anything imports a trainer module
    if "torch" in sys.modules:
        _activate()
    elif not any(isinstance(f, TorchImportWatcher) for f in sys.meta_path):
        sys.meta_path.insert(0, TorchImportWatcher())
    return True
