"""The metrics keys of TensorBoard tags: the agent's own keys are never taken by a tag."""
from __future__ import annotations

import pytest

from profiler_agent.runformat import metric_keys
from profiler_agent.runformat.metric_keys import TB_STEP_KEY, is_agent_key, tensorboard_key


@pytest.mark.parametrize(("tag", "key"), [
    ("Loss/train", "Loss/train"), ("accuracy", "accuracy"), ("loss", "tb/loss"), ("step", "tb/step"),
    ("time", "tb/time"), (TB_STEP_KEY, "tb/tb_step"), ("lr_2", "tb/lr_2"), ("val_loss_1", "tb/val_loss_1"),
    ("lr_warmup", "lr_warmup"), ("val_loss/epoch", "val_loss/epoch"),
])
def test_tensorboard_key(tag: str, key: str) -> None:
    assert tensorboard_key(tag) == key


def test_public_surface() -> None:
    for name in metric_keys.__all__:
        assert getattr(metric_keys, name) is not None
    assert is_agent_key("step_time_s") and not is_agent_key("Loss/train")
