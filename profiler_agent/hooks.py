"""Global hooks that feed a Session without any change to the user's code (agent layer).

- optimizer step pre/post hooks (``torch.optim.optimizer.register_optimizer_step_*_hook``):
  iteration boundaries, learning rates, gradient norm;
- ``torch.autograd.backward`` wrapped (``Tensor.backward`` calls it): the scalar loss, unscaled
  when it came from ``GradScaler.scale`` (also wrapped);
- global module forward hooks during the first iteration only: the top-level modules, their
  batch size and every module's output shape; afterwards a single forward pre-hook on the
  model's root counts samples and times the wait for data (``data_time_s``), and a forward
  hook on the root puts a gradient hook on its output (did a backward reach it?), so later
  iterations pay two Python calls per forward; when the root runs for evaluation (eval mode,
  or no grad), losses are recorded until training resumes (``evaluation.py``) and the
  iteration is marked ``evaluation``;
- the same global hooks time every top-level call until the job steps an optimizer or is
  recognised as an inference run (``inference.py``); then a forward pre-hook and a forward hook on
  the model's root time each call (a ScriptModule takes no hooks of its own: the global hooks stay,
  one Python call per module call, and only the root's calls count). Grad mode and
  ``module.training`` are read at the call, never a tensor's value;

(argparse results are captured by ``argcapture``, which must not import torch.)
Every hook body runs under the session's failure guard.
"""
from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.modules import module as module_globals
from torch.optim import optimizer as optimizer_globals
from torch.utils.hooks import RemovableHandle

from .session import Session

__all__ = ["install_hooks", "batch_size_of", "first_input", "tokens_of"]


_TOKEN_DTYPES = frozenset({torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8})


def first_input(args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> torch.Tensor | None:
    """The tensor a forward's batch size is read from: the first tensor argument (positional first;
    the first of a list/tuple, the first with a dimension in a dict), or None."""
    for value in (*args, *(kwargs or {}).values()):
        if isinstance(value, torch.Tensor):
            return value
        if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
            return value[0]
        if isinstance(value, dict):
            for inner in value.values():
                if isinstance(inner, torch.Tensor) and inner.dim() >= 1:
                    return inner
    return None


def batch_size_of(args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> int | None:
    """First dimension of the first tensor argument (positional first), or None."""
    return _batch(first_input(args, kwargs))


def tokens_of(t: torch.Tensor | None) -> int:
    """B × T of an integer (token id) input of shape (B, T), else 0. Shape and dtype only: no value read."""
    if t is None or t.dtype not in _TOKEN_DTYPES or t.dim() != 2:
        return 0
    b, n = t.shape
    return b * n


def _batch(t: torch.Tensor | None) -> int | None:
    return int(t.shape[0]) if t is not None and t.dim() >= 1 else None


def _output_shape(output: Any) -> tuple[int, ...] | None:
    if isinstance(output, torch.Tensor):
        return tuple(output.shape)
    if isinstance(output, (list, tuple)) and output and isinstance(output[0], torch.Tensor):
        return tuple(output[0].shape)
    return None


class _Hooks:
    """The handles of the hooks installed for one session, so they can be removed."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.handles: list[RemovableHandle] = []
        self.discovery: list[RemovableHandle] = []
        self.root_handle: RemovableHandle | None = None
        self.root_post_handle: RemovableHandle | None = None
        self.call_handles: list[RemovableHandle] = []
        self.depth = threading.local()
        self.original_backward: Callable[..., Any] | None = None
        self.original_scale: Callable[..., Any] | None = None

    # -- first iteration: which modules are top-level, and their shapes ----------------------

    def forward_pre(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        depth = getattr(self.depth, "value", 0)
        self.depth.value = depth + 1
        if depth == 0:
            with self.session.failures.guard("forward hook"):
                first = first_input(args)
                compiling = torch.compiler.is_compiling()
                if not compiling:  # inference: every top-level call is timed until the job trains
                    self.session.on_call_begin(module, _batch(first))
                if module.training and torch.is_grad_enabled():
                    self.session.on_forward(module, _batch(first), top_level=True, tokens=tokens_of(first))
                elif not compiling and not self.session.calls.active:  # an evaluation before the root
                    self.session.on_discovery_eval(module)  # is known: judged at the first step

    def forward_post(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                     output: Any) -> None:
        depth = max(0, getattr(self.depth, "value", 1) - 1)
        self.depth.value = depth
        if depth == 0 and not torch.compiler.is_compiling():
            with self.session.failures.guard("forward hook"):
                self.session.on_call_end(module)
        # A model called with keyword arguments only (the HF Trainer's model(**batch)): the global
        # pre-hook sees no kwargs, so its batch is read here, where torch passes them.
        if depth == 0 and kwargs and module.training and torch.is_grad_enabled() and first_input(args) is None:
            with self.session.failures.guard("forward hook"):
                first = first_input((), kwargs)
                self.session.on_top_level_samples(module, _batch(first), tokens_of(first))
        if module.training and id(module) not in self.session.output_shapes:
            shape = _output_shape(output)
            if shape is not None:
                self.session.output_shapes[id(module)] = shape

    def root_found(self, root: torch.nn.Module | None) -> None:
        for handle in (*self.discovery, *self.call_handles):
            handle.remove()
        self.discovery.clear()
        self.call_handles.clear()
        if root is not None:
            self.root_handle = root.register_forward_pre_hook(self.root_pre, with_kwargs=True)
            self.root_post_handle = root.register_forward_hook(self.root_post)

    def inference_root(self, root: torch.nn.Module) -> None:
        """An inference run's root is known: time its calls with its own hooks, when it takes them."""
        try:
            pre = root.register_forward_pre_hook(self.call_pre, with_kwargs=True)
        except RuntimeError:  # a ScriptModule: the global hooks go on timing its calls
            return
        self.call_handles = [pre, root.register_forward_hook(self.call_post, always_call=True)]
        for handle in self.discovery:
            handle.remove()
        self.discovery.clear()

    def call_pre(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not torch.compiler.is_compiling():
            with self.session.failures.guard("inference hook"):
                self.session.on_call_begin(module, _batch(first_input(args, kwargs)))

    def call_post(self, module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if not torch.compiler.is_compiling():
            with self.session.failures.guard("inference hook"):
                self.session.on_call_end(module)

    def root_pre(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if module.training and torch.is_grad_enabled():
            with self.session.failures.guard("forward hook"):
                first = first_input(args, kwargs)
                self.session.on_forward(module, _batch(first), top_level=False, tokens=tokens_of(first))
        # Evaluation (eval mode, or no grad): its losses are recorded until training resumes. Not while
        # torch.compile traces a function calling the model: installing hooks there breaks its graph.
        elif not torch.compiler.is_compiling():
            with self.session.failures.guard("evaluation hook"):
                self.session.on_eval_forward(train_mode=module.training)

    def root_post(self, module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> None:
        # A train-mode forward with grad is training only if a backward reaches its output.
        # Not while torch.compile traces a function that calls the model: a tensor hook there
        # could break its graph (is_compiling() is a constant to dynamo).
        if not torch.is_grad_enabled() or torch.compiler.is_compiling():
            return
        with self.session.failures.guard("forward hook"):
            if module.training:
                self.session.on_training_output(output)
            else:  # eval mode with gradients: did it build a graph that no backward uses?
                self.session.on_eval_output(output)

    # -- every iteration --------------------------------------------------------------------

    def optimizer_pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        with self.session.failures.guard("optimizer hook"):
            self.session.on_optimizer_pre_step(optimizer)

    def optimizer_post(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        with self.session.failures.guard("optimizer hook"):
            self.session.on_optimizer_step(optimizer)

    def uninstall(self) -> None:
        roots = [h for h in (self.root_handle, self.root_post_handle) if h is not None]
        for handle in (*self.handles, *self.discovery, *roots, *self.call_handles):
            handle.remove()
        self.call_handles.clear()
        self.handles.clear()
        self.discovery.clear()
        self.root_handle = self.root_post_handle = None
        if self.original_backward is not None and getattr(torch.autograd.backward, "__torchscope__", False):
            torch.autograd.backward = self.original_backward
        if self.original_scale is not None and getattr(torch.amp.GradScaler.scale, "__torchscope__", False):
            torch.amp.GradScaler.scale = self.original_scale
        self.session.evaluation.uninstall()
        self.session.on_root_found = None
        self.session.on_inference_root = None


def _wrap_backward(hooks: _Hooks) -> None:
    original = torch.autograd.backward
    hooks.original_backward = original

    @functools.wraps(original)
    def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        session = hooks.session
        if not session.disabled:
            with session.failures.guard("backward hook"):
                loss = tensors[0] if isinstance(tensors, (list, tuple)) and len(tensors) == 1 else tensors
                if isinstance(loss, torch.Tensor) and loss.numel() == 1 and loss.requires_grad:
                    session.on_backward(loss)
        return original(tensors, *args, **kwargs)

    backward.__torchscope__ = True  # type: ignore[attr-defined]
    torch.autograd.backward = backward


def _wrap_grad_scaler(hooks: _Hooks) -> None:
    # With AMP, backward() receives scaler.scale(loss): remember the unscaled loss behind it.
    scaler_cls = torch.amp.GradScaler
    original = scaler_cls.scale
    hooks.original_scale = original

    @functools.wraps(original)
    def scale(self: Any, outputs: Any) -> Any:
        result = original(self, outputs)
        if isinstance(outputs, torch.Tensor) and isinstance(result, torch.Tensor) and outputs.numel() == 1:
            with hooks.session.failures.guard("grad scaler hook"):
                hooks.session.unscaled[id(result)] = outputs
        return result

    scale.__torchscope__ = True  # type: ignore[attr-defined]
    scaler_cls.scale = scale


def install_hooks(session: Session) -> Callable[[], None]:
    """Install the global hooks feeding ``session``; return a function that removes them."""
    hooks = _Hooks(session)
    hooks.handles.append(optimizer_globals.register_optimizer_step_pre_hook(hooks.optimizer_pre))
    hooks.handles.append(optimizer_globals.register_optimizer_step_post_hook(hooks.optimizer_post))
    hooks.discovery.append(module_globals.register_module_forward_pre_hook(hooks.forward_pre))
    hooks.discovery.append(module_globals.register_module_forward_hook(hooks.forward_post, with_kwargs=True,
                                                                          always_call=True))
    _wrap_backward(hooks)
    _wrap_grad_scaler(hooks)
    with session.failures.guard("evaluation loss wrappers"):
        session.evaluation.install()  # functional losses: seen in evaluations (evaluation.py)
    session.on_root_found = hooks.root_found
    session.on_inference_root = hooks.inference_root
    return hooks.uninstall
