"""Which iterations held an evaluation of the model, however the script computes its loss (agent layer).

The session reports what the hooks see of the model's root module; :meth:`EvaluationSteps.held`
then says, at each optimizer step, whether the iteration now ending held an evaluation:

- a forward of the root in ``eval()`` mode, or in train mode with gradients disabled
  (``no_grad``, ``inference_mode``): :meth:`saw_evaluation`;
- a train-mode forward with gradients whose output no backward reached before the step: the
  iteration's first such output gets a gradient hook (:meth:`watch`). An evaluation with
  gradients runs before the iteration's training forward (right after the previous step), and
  with gradient accumulation the first micro-batch stands for the others, so one hook per
  iteration is enough (each costs microseconds).

A pattern found in every iteration is part of the training step (reinforcement learning
choosing actions in eval mode, a ``no_grad`` target from the model itself): after
``RECURRING`` marked iterations in a row the next ones are not marked, until one without it.
"""
from __future__ import annotations

from typing import Any

import torch

__all__ = ["EvaluationSteps", "RECURRING"]

RECURRING = 3  # an evaluation-like pattern in this many iterations in a row is part of every step


class EvaluationSteps:
    """The evaluation signal of the iteration in progress."""

    def __init__(self) -> None:
        self._seen = False  # the root ran for evaluation during this iteration
        self._streak = 0  # how many iterations in a row before this one it did
        self._watched: list[bool] | None = None  # [backward reached it] for the watched output
        self._broken = False  # registering a tensor hook failed once: no more watching

    def saw_evaluation(self) -> None:
        """The root was called in eval mode or without gradients."""
        self._seen = True

    def watch(self, output: Any) -> None:
        """A train-mode forward of the root with gradients returned ``output``: did a backward reach it?"""
        if self._watched is not None or self._broken:
            return
        tensors = _grad_tensors(output)
        if not tensors:
            return  # nothing to watch: taken for training
        cell = [False]

        def reached(grad: torch.Tensor) -> None:
            cell[0] = True

        try:
            for t in tensors:
                t.register_hook(reached)
        except Exception:
            self._broken = True  # e.g. a tensor subclass without hooks: stop trying (recorded once)
            raise
        self._watched = cell

    def held(self) -> bool:
        """Whether the iteration now ending held an evaluation; starts the next iteration's signal."""
        seen = self._seen or (self._watched is not None and not self._watched[0])
        self._seen = False
        self._watched = None
        held = seen and self._streak < RECURRING
        self._streak = self._streak + 1 if seen else 0
        return held


def _grad_tensors(output: Any, limit: int = 3) -> list[torch.Tensor]:
    """Up to ``limit`` tensors that require grad in a forward's output (a tensor, tuple, list or dict)."""
    if isinstance(output, torch.Tensor):
        return [output] if output.requires_grad else []
    if isinstance(output, dict):
        items: Any = output.values()
    elif isinstance(output, (list, tuple)):
        items = output
    else:
        return []
    found = []
    for value in items:
        if isinstance(value, torch.Tensor) and value.requires_grad:
            found.append(value)
            if len(found) >= limit:
                break
    return found
