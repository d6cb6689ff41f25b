"""Module scopes: each nn.Module forward call as a named profiler range inside profiler windows (agent layer).

While installed (only during a profiler window, see ``profiling.ProfilerWindows``), global
module forward pre/post hooks open and close a ``record_function``-style range around every
module call, so the Kineto trace holds an ``X`` event of cat ``user_annotation`` named
``nn.Module: <label>`` on the calling thread, with the module's aten ops inside it:

- ``<label>`` is the module's qualified name in the root model's ``named_modules()``
  (``layer1.0.conv1``), the names of graph/modules.json;
- ``(model)`` for the root model itself;
- the class name (``CrossEntropyLoss``) for modules outside the root's tree, and for every
  module while no root is known.

Ranges nest: the pre-hook pushes onto a per-thread stack, the post-hook (``always_call``, so it
also runs when forward raises) pops back to its module, closing any range left open above it.
Uninstalling closes whatever is still open and removes the hooks, so outside windows modules
keep torch's hook-free fast path. A failure inside a hook is recorded in agent_errors.jsonl
(``where`` = ``module scope``) and the job goes on. A process forked inside a window (DataLoader
workers) drops the hooks it inherited.
"""
from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.modules import module as module_globals
from torch.utils.hooks import RemovableHandle

from .failures import FailureLog

__all__ = ["RANGE_PREFIX", "ROOT_LABEL", "ModuleScopes", "module_labels", "range_name"]

RANGE_PREFIX = "nn.Module: "
ROOT_LABEL = "(model)"
_WHERE = "module scope"
_INSTALLED: weakref.WeakSet[ModuleScopes] = weakref.WeakSet()


def _ops_enter(name: str) -> Any:
    return torch.ops.profiler._record_function_enter_new(name, None)


def _ops_exit(handle: Any) -> None:
    torch.ops.profiler._record_function_exit._RecordFunction(handle)


# Same USER_SCOPE RecordFunction as ``torch.autograd.profiler.record_function`` (cat
# ``user_annotation`` in the trace), without its dispatcher round trip: ~5 µs per range instead of
# ~20-35 µs measured on torch 2.13 CPU. The public op is the fallback where the binding is absent.
_enter: Callable[[str], Any] = getattr(torch.autograd, "_record_function_with_args_enter", _ops_enter)
_exit: Callable[[Any], None] = getattr(torch.autograd, "_record_function_with_args_exit", _ops_exit)


def range_name(label: str) -> str:
    """The trace event name of a module range with ``label``."""
    return RANGE_PREFIX + label


def module_labels(root: torch.nn.Module | None) -> dict[int, str]:
    """``id(module) -> label`` for ``root`` and every module under it (``named_modules()`` names).

    A module reachable under several names keeps the first, as ``named_modules()`` lists it.
    Empty when ``root`` is None.
    """
    if root is None:
        return {}
    return {id(m): (name or ROOT_LABEL) for name, m in root.named_modules()}


class ModuleScopes:
    """Global module forward hooks that wrap every module call in a profiler range, while installed."""

    def __init__(self, failures: FailureLog,
                 root: Callable[[], torch.nn.Module | None] | None = None) -> None:
        self._failures = failures
        self._root = root
        self._names: dict[int, str] = {}  # id(module) -> range name, for the root's tree
        self._alive: list[torch.nn.Module] = []  # keeps those ids unique while installed
        self._by_class: dict[type, str] = {}
        self._handles: list[RemovableHandle] = []
        self._local = threading.local()
        self._stacks: list[list[tuple[int, Any]]] = []  # every thread's stack, to close leftovers
        self._stacks_lock = threading.Lock()

    @property
    def installed(self) -> bool:
        return bool(self._handles)

    def install(self) -> None:
        """Label the root's modules and install the global hooks (no-op when already installed)."""
        if self._handles:
            return
        # Built at every window start: a root found later or a replaced submodule is picked up.
        root = self._root() if self._root is not None else None
        self._names = {key: range_name(label) for key, label in module_labels(root).items()}
        self._alive = list(root.modules()) if root is not None else []
        self._local = threading.local()
        with self._stacks_lock:
            self._stacks = []
        self._handles.append(module_globals.register_module_forward_pre_hook(self._pre))
        self._handles.append(module_globals.register_module_forward_hook(self._post, always_call=True))
        _INSTALLED.add(self)

    def uninstall(self) -> None:
        """Remove the hooks, then close every range still open (oldest last). Idempotent; never raises."""
        _INSTALLED.discard(self)
        handles, self._handles = self._handles, []
        for handle in handles:
            handle.remove()
        with self._stacks_lock:
            stacks, self._stacks = self._stacks, []
        for stack in stacks:
            while stack:
                _, handle = stack.pop()
                try:
                    _exit(handle)
                except Exception as e:  # noqa: BLE001 - the agent must never break the job
                    self._failures.record(_WHERE, e)
        self._names = {}
        self._alive = []

    # -- the hooks: kept small, they run on every module call inside a window ------------------

    def _pre(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        try:
            name = self._names.get(id(module))
            if name is None:
                cls = type(module)
                name = self._by_class.get(cls)
                if name is None:
                    name = self._by_class[cls] = range_name(cls.__name__)
            stack = getattr(self._local, "stack", None)
            if stack is None:
                stack = self._new_stack()
            stack.append((id(module), _enter(name)))
        except Exception as e:  # noqa: BLE001 - the agent must never break the job
            self._failures.record(_WHERE, e)

    def _post(self, module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> None:
        try:
            stack = getattr(self._local, "stack", None)
            if not stack:
                return
            key = id(module)
            i = len(stack) - 1
            while i >= 0 and stack[i][0] != key:
                i -= 1
            if i < 0:  # its pre-hook did not open a range (installed mid-call, or it failed)
                return
            while len(stack) > i:  # ranges above it were left open (a BaseException skipped their post-hooks)
                _exit(stack.pop()[1])
        except Exception as e:  # noqa: BLE001 - the agent must never break the job
            self._failures.record(_WHERE, e)

    def _forget_in_child(self) -> None:
        # A forked child (DataLoader worker) has no profiler window of its own: no hooks, no ranges.
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._stacks = []
        self._stacks_lock = threading.Lock()  # the parent may have held it at the fork
        self._local = threading.local()

    def _new_stack(self) -> list[tuple[int, Any]]:
        stack: list[tuple[int, Any]] = []
        self._local.stack = stack
        with self._stacks_lock:
            self._stacks.append(stack)
        return stack


def _after_fork_in_child() -> None:
    for scopes in list(_INSTALLED):
        scopes._forget_in_child()
    _INSTALLED.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
