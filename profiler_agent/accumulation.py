"""The training loss of one optimizer step from the losses passed to ``backward()`` (agent layer).

With gradient accumulation a script backpropagates ``loss / n`` for each of its ``n`` micro-batches
(nanoGPT: ``loss = loss / gradient_accumulation_steps``) and reports the mean of the undivided
losses. The agent reads the division off the tensor's autograd node, without reading any device
value: ``DivBackward0`` / ``MulBackward0`` keep the constant as ``_saved_other``, a 0-dim CPU tensor
(a Python number wrapped by torch), whose value is read on the host. When every one of the step's
``n`` backward calls received a loss divided by ``n`` (or multiplied by ``1 / n``), the step's loss
is the sum of those tensors, i.e. the mean of the undivided losses; otherwise the mean of what was
passed (a lone ``sum() / batch_size`` is a loss the script divided on purpose, not accumulation).
"""
from __future__ import annotations

import math

import torch

__all__ = ["loss_divisor", "step_loss"]

_TOLERANCE = 1e-6  # relative: 1 / 3 stored as a double, times 3


def loss_divisor(loss: torch.Tensor) -> float | None:
    """The constant ``c`` when ``loss`` is ``x / c`` or ``x * (1 / c)`` of a constant number, else None.

    Only host values are read (a constant held by a CUDA tensor is ignored: reading it would sync).
    """
    node = loss.grad_fn
    name = type(node).__name__ if node is not None else ""
    if name not in ("DivBackward0", "MulBackward0"):
        return None
    other = getattr(node, "_saved_other", None)
    if isinstance(other, torch.Tensor):
        if other.dim() != 0 or other.requires_grad or other.device.type != "cpu" or other.is_complex():
            return None
        value = float(other)  # a host scalar: no device sync
    elif isinstance(other, (int, float)) and not isinstance(other, bool):
        value = float(other)
    else:
        return None
    if not math.isfinite(value) or value == 0:
        return None
    return value if name == "DivBackward0" else 1.0 / value


def step_loss(losses: list[torch.Tensor], divisors: list[float | None]) -> torch.Tensor:
    """The loss to record for one step (a tensor, unread): see the module docstring."""
    if len(losses) == 1:  # one backward: what the script passed (loss / 1 is the loss)
        return losses[0]
    stacked = torch.stack([x.float() for x in losses])
    n = len(losses)
    if len(divisors) == n and all(d is not None and math.isclose(d, n, rel_tol=_TOLERANCE) for d in divisors):
        return stacked.sum()  # sum of loss_i / n = mean of the undivided losses
    return stacked.mean()
