"""Run a callback right after a module's own loader has executed it (agent layer, stdlib only).

The agent patches torch, torch's tensorboard writer, dynamo's callback module and the trainer
modules of Lightning and transformers as they are imported, without importing any of them
itself. Each has a meta path finder of its own (which module, how it looks the spec up); all of
them wrap the module's real loader in :class:`AfterExecLoader`.

This module is on every wrapped process's start-up path (the bootstrap), so it imports nothing:
``importlib.abc`` alone loads ``importlib.resources``, ``tempfile`` and ``random`` (~10 ms). The
import system needs only ``create_module`` and ``exec_module`` of a loader.
"""
from __future__ import annotations

TYPE_CHECKING = False  # typing itself costs ~3 ms of start-up; mypy reads the name as True
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from importlib.abc import Loader as _Loader
    from importlib.machinery import ModuleSpec
    from types import ModuleType
else:
    _Loader = object

__all__ = ["AfterExecLoader", "spec_running_after"]


class AfterExecLoader(_Loader):
    """Runs the module's own loader, then ``after(module)``; the module keeps its own loader
    (``__spec__.loader`` and ``__loader__`` are handed back first, so importlib.resources and
    friends see the real one)."""

    def __init__(self, inner: _Loader, after: Callable[[ModuleType], None]) -> None:
        self._inner = inner
        self._after = after

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        if module.__spec__ is not None:
            module.__spec__.loader = self._inner
        module.__loader__ = self._inner
        self._inner.exec_module(module)
        self._after(module)


def spec_running_after(
    watcher: object, fullname: str, path: Sequence[str] | None, target: ModuleType | None,
    after: Callable[[ModuleType], None],
) -> ModuleSpec | None:
    """The spec the other meta path finders give ``fullname`` (every finder but those of
    ``watcher``'s type), its loader wrapped to run ``after`` once the module has executed; None
    when none has it, or when one raised (the import system then asks that finder itself)."""
    import sys

    for finder in list(sys.meta_path):
        if isinstance(finder, type(watcher)) or not hasattr(finder, "find_spec"):
            continue
        try:
            spec = finder.find_spec(fullname, path, target)
        except Exception:  # noqa: BLE001 - let the import system ask that finder itself
            return None
        if spec is not None:
            if spec.loader is not None:
                spec.loader = AfterExecLoader(spec.loader, after)
            return spec
    return None
