"""Validation loss without code changes: loss-module outputs while the model is in eval mode (agent layer).

An evaluation phase starts when the model's root module is called with ``training == False``
and ends when training resumes (the next training forward or optimizer step) or the job ends.
Only during a phase is a global module forward hook installed; it keeps the outputs of
``torch.nn.modules.loss._Loss`` modules (``nn.CrossEntropyLoss()``, ``nn.MSELoss()``, ...)
detached and unread on their device, so training iterations pay nothing and evaluation pays an
``isinstance`` check per module call. The phase's mean per sample is one tensor, read later by
the metrics log like the training loss (no extra device sync).
"""
from __future__ import annotations

import time
from typing import Any

import torch
from torch.nn.modules import module as module_globals
from torch.nn.modules.loss import _Loss
from torch.utils.hooks import RemovableHandle

from .failures import FailureLog

__all__ = ["EvalLosses", "VAL_LOSS_KEY"]

VAL_LOSS_KEY = "val_loss"  # the first loss module of a phase; the others are val_loss_1, val_loss_2, ...
# Sum the kept scalars once this many gathered, so a long evaluation holds a bounded number of tensors.
_COLLAPSE_AT = 256


class _Sum:
    """Per-sample-weighted sum of one loss module's outputs during a phase."""

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
    """Records the loss modules' outputs of one evaluation phase at a time."""

    def __init__(self, failures: FailureLog) -> None:
        self._failures = failures
        self._handle: RemovableHandle | None = None
        self._sums: dict[int, _Sum] = {}  # id(loss module) -> its sum, in first-call order
        self.step: int | None = None  # the iteration in progress when the phase began
        self.last_activity: float | None = None  # perf_counter of the phase's latest model/loss call

    @property
    def active(self) -> bool:
        return self.step is not None

    def begin(self, step: int) -> None:
        """The root model was called in eval mode: start a phase (once) and note the time."""
        self.last_activity = time.perf_counter()
        if self.step is None:
            self.step = step
            self._handle = module_globals.register_module_forward_hook(self._on_module_output)

    def end(self) -> dict[str, torch.Tensor]:
        """Close the phase: remove the hook; return ``{val_loss: mean per sample, ...}`` (tensors)."""
        self.remove_hook()
        sums, self._sums, self.step = self._sums, {}, None
        out: dict[str, torch.Tensor] = {}
        for i, s in enumerate(v for v in sums.values() if v.values and v.samples):
            with torch.no_grad():
                out[VAL_LOSS_KEY if i == 0 else f"{VAL_LOSS_KEY}_{i}"] = s.total() / s.samples
        return out

    def remove_hook(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _on_module_output(self, module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if not isinstance(module, _Loss) or not isinstance(output, torch.Tensor):
            return
        with self._failures.guard("evaluation loss hook"):
            self.last_activity = time.perf_counter()
            first = args[0] if args and isinstance(args[0], torch.Tensor) else None
            samples = int(first.shape[0]) if first is not None and first.dim() >= 1 else 1
            with torch.no_grad():
                value = output.detach()
                if value.numel() != 1:  # reduction="none": the mean of the elements
                    value = value.float().mean()
                value = value.reshape(()).float()
                # reduction="sum" already sums over the batch; "mean" averages it: weight by the batch.
                if getattr(module, "reduction", "mean") != "sum" or output.numel() != 1:
                    value = value * samples
            self._sums.setdefault(id(module), _Sum()).add(value, samples)
