"""Which optimizer's step ends an iteration, and what it reports: learning rates, gradient norm (agent layer)."""
from __future__ import annotations

import weakref
from typing import Any

import torch

__all__ = ["PrimaryOptimizer", "total_grad_norm"]


class PrimaryOptimizer:
    """The optimizer whose step ends an iteration, held weakly.

    Several optimizers per iteration (a GAN's D and G) alternate, and the first to step stays
    primary. An optimizer that steps twice while the primary does not (a new training phase)
    becomes primary; so does any optimizer once the primary has been freed.
    """

    def __init__(self) -> None:
        self._ref: weakref.ref[torch.optim.Optimizer] | None = None
        self._other_steps: set[int] = set()  # ids of non-primary optimizers stepped since the primary

    @property
    def current(self) -> torch.optim.Optimizer | None:
        """The primary optimizer, or None before the first step or once it was freed."""
        return self._ref() if self._ref is not None else None

    def is_primary(self, optimizer: torch.optim.Optimizer) -> bool:
        """Whether ``optimizer`` is (or would become, there being none) the primary one."""
        current = self.current
        return current is None or current is optimizer

    def claim(self, optimizer: torch.optim.Optimizer) -> bool:
        """Whether this step of ``optimizer`` is the primary's, switching primaries between phases."""
        if self.is_primary(optimizer) or id(optimizer) in self._other_steps:
            self._ref = weakref.ref(optimizer)
            self._other_steps.clear()
            return True
        self._other_steps.add(id(optimizer))
        return False

    def parameter_ids(self) -> set[int]:
        """``id()`` of every parameter the primary optimizer updates (empty without one)."""
        opt = self.current
        return {id(p) for g in opt.param_groups for p in g["params"]} if opt is not None else set()

    def learning_rates(self) -> dict[str, Any]:
        """``{"lr": ..., "lr_1": ...}`` of the primary's parameter groups (tensor rates copied, unread)."""
        opt = self.current
        if opt is None:
            return {}
        out: dict[str, Any] = {}
        for i, group in enumerate(opt.param_groups):
            lr = group.get("lr")
            if isinstance(lr, torch.Tensor):
                lr = lr.detach().clone()  # schedulers update tensor rates in place
            if lr is not None:
                out["lr" if i == 0 else f"lr_{i}"] = lr
        return out


def total_grad_norm(optimizer: torch.optim.Optimizer) -> torch.Tensor | None:
    """The L2 norm of all of ``optimizer``'s gradients as a tensor (unread), or None without any."""
    grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
    if not grads:
        return None
    by_device: dict[torch.device, list[torch.Tensor]] = {}
    for g in grads:
        by_device.setdefault(g.device, []).append(g)
    with torch.no_grad():
        norms = [torch.linalg.vector_norm(torch.stack(torch._foreach_norm(gs)).float())
                 for gs in by_device.values()]
        first = norms[0].device
        return torch.linalg.vector_norm(torch.stack([n.to(first) for n in norms]))
