"""Torchscope's agent: records a PyTorch training job into a run folder (agent layer).

Two ways in, same files on disk:

- zero-code: ``torchscope run -- python train.py`` (or ``python -m profiler_agent run -- ...``);
- the API::

      with profiler_agent.Run(name="baseline", config=vars(args)) as run:
          for batch in loader:
              ...
              run.step()
          run.log(val_loss=val_loss)

Importing this package does not import torch: ``Run`` and friends load on first use, so
``profiler_agent.runformat`` stays usable by readers without torch.
"""
from __future__ import annotations

TYPE_CHECKING = False  # not typing's: it costs ~3 ms of every wrapped process's start (mypy reads it as True)
if TYPE_CHECKING:
    from typing import Any

    from .api import Run
    from .launcher import LaunchRequest, launch
    from .options import AgentOptions, ProfileSchedule

__all__ = ["Run", "ProfileSchedule", "AgentOptions", "LaunchRequest", "launch"]

_LAZY = {
    "Run": ("api", "Run"),
    "ProfileSchedule": ("options", "ProfileSchedule"),
    "AgentOptions": ("options", "AgentOptions"),
    "LaunchRequest": ("launcher", "LaunchRequest"),
    "launch": ("launcher", "launch"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'profiler_agent' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
