"""Validation loss without code changes: loss values computed during an evaluation phase (agent layer).

An evaluation phase starts when the model's root module is called with ``training == False``
(or, still in train mode, with gradients disabled) and ends when training resumes (the next
training forward or optimizer step) or the job ends. The module hooks are in place only during
a phase; the functional wrappers pass through outside one:

- a global module forward hook keeps the outputs of ``torch.nn.modules.loss._Loss`` modules
  (``nn.CrossEntropyLoss()``, ``nn.MSELoss()``, ...);
- the common functional losses (``torch.nn.functional.cross_entropy``, ``nll_loss``,
  ``mse_loss``, ``l1_loss``, ``smooth_l1_loss``, ``binary_cross_entropy(_with_logits)``,
  ``kl_div``) are wrapped, so a loss computed with ``F.cross_entropy`` (inside the model, as
  nanoGPT does, or in the loop) is kept too. A call made by a loss module is counted once, as
  the module's. These wrappers are installed for the whole session (``install``), not only
  during a phase: in ``F.cross_entropy(model(x), y)`` Python looks the function up *before*
  the model call that opens the phase, so a wrapper put in place by that call missed the first
  batch of every evaluation. Outside a phase a wrapper is one Python call that passes through
  (its first test is ``torch.compiler.is_compiling()``, a constant to dynamo, so compiled
  training code traces torch's own loss and guards on nothing of ours). Not seen: code that
  imported the function itself (``from torch.nn.functional import cross_entropy``) before the
  agent started.

Values stay detached and unread on their device; the phase's mean per sample is one tensor,
read later by the metrics log like the training loss (no extra device sync). A phase opened by
a train-mode forward without gradients (see ``Session``) keeps only values that do not require
grad: a loss that will be backpropagated is training, not evaluation.
"""
from __future__ import annotations

import functools
import threading
import time
import types
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - the name every script uses
from torch.nn.modules import module as module_globals
from torch.nn.modules.loss import _Loss
from torch.utils.hooks import RemovableHandle

from .failures import FailureLog

__all__ = ["EvalLosses", "VAL_LOSS_KEY", "FUNCTIONAL_LOSSES"]

VAL_LOSS_KEY = "val_loss"  # the first loss of a phase; the others are val_loss_1, val_loss_2, ...
# Sum the kept scalars once this many gathered, so a long evaluation holds a bounded number of tensors.
_COLLAPSE_AT = 256
FUNCTIONAL_LOSSES = ("cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss",
                     "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div")


class _Sum:
    """Per-sample-weighted sum of one loss's values during a phase."""

    def __init__(self) -> None:
        self.values: list[torch.Tensor] = []
        self.samples = 0

    def add(self, value: torch.Tensor, samples: int) -> None:
        self.values.append(value)
        self.samples += samples
        if len(self.values) >= _COLLAPSE_AT:
            self.values = [self.total()]

    def total(self) -> torch.Tensor:
        device = self.values[0].device
        return torch.stack([v.to(device) for v in self.values]).sum()


class EvalLosses:
    """Records the loss values of one evaluation phase at a time."""

    def __init__(self, failures: FailureLog) -> None:
        self._failures = failures
        self._handles: list[RemovableHandle] = []
        self._wrapped: dict[str, Callable[..., Any]] = {}  # functional name -> the original
        self._sums: dict[object, _Sum] = {}  # id(loss module) or functional name -> its sum, first-call order
        self._inside_loss = threading.local()  # depth of _Loss module calls (their functional call is theirs)
        self._skip_grad = False  # the phase began in train mode: values that require grad are training
        self.step: int | None = None  # the iteration in progress when the phase began
        self.last_activity: float | None = None  # perf_counter of the phase's latest model/loss call

    @property
    def active(self) -> bool:
        return self.step is not None

    def begin(self, step: int, *, train_mode: bool = False) -> None:
        """The root model was called for evaluation: start a phase (once) and note the time."""
        self.last_activity = time.perf_counter()
        if self.step is None:
            self.step = step
            self._skip_grad = train_mode
            self._handles = [
                module_globals.register_module_forward_pre_hook(self._on_module_input),
                module_globals.register_module_forward_hook(self._on_module_output, always_call=True),
            ]

    def end(self) -> dict[str, torch.Tensor]:
        """Close the phase: remove the hooks; return ``{val_loss: mean per sample, ...}`` (tensors)."""
        self.remove_hook()
        sums, self._sums, self.step = self._sums, {}, None
        out: dict[str, torch.Tensor] = {}
        for i, s in enumerate(v for v in sums.values() if v.values and v.samples):
            with torch.no_grad():
                out[VAL_LOSS_KEY if i == 0 else f"{VAL_LOSS_KEY}_{i}"] = s.total() / s.samples
        return out

    def install(self) -> None:
        """Wrap the functional losses for the session's lifetime (idempotent)."""
        if not self._wrapped:
            self._wrap_functionals()

    def remove_hook(self) -> None:
        """Remove the phase's module hooks (idempotent)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def uninstall(self) -> None:
        """Remove the phase's hooks and the functional wrappers (idempotent; also in forked children)."""
        self.remove_hook()
        self.step = None
        wrapped, self._wrapped = self._wrapped, {}
        for name, original in wrapped.items():
            if getattr(getattr(F, name, None), "__torchscope__", None) is self:
                setattr(F, name, original)
            # else someone wrapped it after us: our wrapper stays in their chain and passes through

    # -- hooks ------------------------------------------------------------------------------

    def _wrap_functionals(self) -> None:
        for name in FUNCTIONAL_LOSSES:
            original = getattr(F, name, None)
            if original is None or getattr(original, "__torchscope__", None) is not None:
                continue
            self._wrapped[name] = original
            setattr(F, name, self._make_wrapper(name, original))

    def _make_wrapper(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        compiling = torch.compiler.is_compiling  # a constant to dynamo: compiled code keeps torch's loss

        # The body uses closure variables and builtins only: see the FunctionType below.
        def loss(*args: Any, **kwargs: Any) -> Any:
            output = original(*args, **kwargs)
            # compiling() first: to dynamo it is the constant True, so no guard on self.step.
            if not compiling() and self.step is not None and not getattr(self._inside_loss, "depth", 0):
                self._keep_functional(name, args, output, kwargs)
            return output

        # torch.jit.script compiles a wrapped function from its __wrapped__ source but resolves
        # names in the wrapper's globals: give it torch.nn.functional's, so scripting code that
        # calls F.cross_entropy during an evaluation still compiles the original.
        wrapper = types.FunctionType(loss.__code__, F.__dict__, name, loss.__defaults__, loss.__closure__)
        functools.update_wrapper(wrapper, original)
        wrapper.__torchscope__ = self  # type: ignore[attr-defined]
        return wrapper

    def _keep_functional(self, name: str, args: tuple[Any, ...], output: Any, kwargs: dict[str, Any]) -> None:
        with self._failures.guard("evaluation loss hook"):
            self._keep(name, args, output, kwargs.get("reduction", "mean"))

    def _on_module_input(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        if isinstance(module, _Loss) and not torch.compiler.is_compiling():
            self._inside_loss.depth = getattr(self._inside_loss, "depth", 0) + 1

    def _on_module_output(self, module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if not isinstance(module, _Loss) or torch.compiler.is_compiling():
            return
        self._inside_loss.depth = max(0, getattr(self._inside_loss, "depth", 1) - 1)
        with self._failures.guard("evaluation loss hook"):
            self._keep(id(module), args, output, getattr(module, "reduction", "mean"))

    def _keep(self, key: object, args: tuple[Any, ...], output: Any, reduction: Any) -> None:
        if not isinstance(output, torch.Tensor) or output.numel() == 0:
            return
        if self._skip_grad and output.requires_grad:
            return
        self.last_activity = time.perf_counter()
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        samples = int(first.shape[0]) if first is not None and first.dim() >= 1 else 1
        with torch.no_grad():
            value = output.detach()
            if value.numel() != 1:  # reduction="none": the mean of the elements
                value = value.float().mean()
            value = value.reshape(()).float()
            # reduction="sum" already sums over the batch; "mean" averages it: weight by the batch.
            if reduction != "sum" or output.numel() != 1:
                value = value * samples
        self._sums.setdefault(key, _Sum()).add(value, samples)
