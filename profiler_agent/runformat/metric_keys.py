"""metrics.jsonl keys the agent writes, and how a TensorBoard tag becomes one (run-format layer, stdlib only).

Shared by the agent (``profiler_agent.tensorboard``: a job's ``SummaryWriter.add_scalar`` calls)
and the importer (``app.data.tfevents``: tfevents files), so that one tag gets the same key
on both ways in and an imported run lines up with a recorded one.
"""
from __future__ import annotations

import re

__all__ = ["TB_STEP_KEY", "TB_PREFIX", "AGENT_KEYS", "is_agent_key", "tensorboard_key"]

# The writer's own ``global_step``, kept beside the agent's ``step`` (the optimizer-step count).
TB_STEP_KEY = "tb_step"
# Put before a tag that spells one of the agent's keys, so the user's value never overwrites it.
TB_PREFIX = "tb/"

AGENT_KEYS = frozenset({
    "step", "time", "rank", TB_STEP_KEY,
    "step_time_s", "data_time_s", "cpu_time_s", "contention", "steal",
    "loss", "backward_calls", "lr", "samples", "tokens", "grad_norm", "profiled", "evaluation",
    "eval_grad_enabled", "val_loss",
})
# Numbered siblings the agent writes: lr_1 (second param group), val_loss_1 (second loss module).
_NUMBERED = re.compile(r"^(?:lr|val_loss)_\d+$")


def is_agent_key(key: str) -> bool:
    """True when ``key`` is (or may later be) written by the agent itself on a metrics line."""
    return key in AGENT_KEYS or bool(_NUMBERED.match(key))


def tensorboard_key(tag: str) -> str:
    """The metrics.jsonl key of a TensorBoard scalar tag: the tag itself (``Loss/train``), or
    ``tb/<tag>`` when the tag spells one of the agent's keys (``loss``, ``step``, ``lr``, …)."""
    return TB_PREFIX + tag if is_agent_key(tag) else tag
