"""The job's own ``SummaryWriter.add_scalar``/``add_scalars`` calls copied into its metrics (agent layer).

Installed by ``activation.start_session`` through :func:`watch_tensorboard`, which never imports
tensorboard itself (slow, and optional for the job): when ``torch.utils.tensorboard.writer`` is
already loaded the class is patched at once, otherwise a meta path finder that answers only for
that module patches it right after it loads. The class's methods are wrapped, so writers made
before or after, imported under any name, are all covered.

Each call first runs the original method, so tfevents files are written exactly as without the
agent (and an error the original raises reaches the job unchanged), then writes one metrics line
through ``Session.log`` at the agent's current step: ``{tag: value, "tb_step": global_step}``
(``add_scalars``: ``main_tag/tag`` keys). Tensor values are kept as (cloned) tensors and read by
the metrics log in its next batch, as the loss is, so no device sync is added. Everything after
the original call runs under the session's failure guard.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import operator
import sys
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from .import_hooks import AfterExecLoader
from .runformat.metric_keys import TB_STEP_KEY, tensorboard_key

__all__ = ["WRITER_MODULE", "watch_tensorboard", "patch_summary_writer"]

WRITER_MODULE = "torch.utils.tensorboard.writer"
_MARK = "__torchscope__"


def watch_tensorboard() -> None:
    """Patch ``SummaryWriter`` now if its module is loaded, else as soon as it is. Never raises."""
    with contextlib.suppress(Exception):
        module = sys.modules.get(WRITER_MODULE)
        if module is not None:
            patch_summary_writer(module)
        elif not any(isinstance(f, _WriterImportWatcher) for f in sys.meta_path):
            sys.meta_path.insert(0, _WriterImportWatcher())


def patch_summary_writer(module: ModuleType) -> bool:
    """Wrap ``module.SummaryWriter.add_scalar`` and ``add_scalars`` (once); return whether it could."""
    cls = getattr(module, "SummaryWriter", None)
    if cls is None:
        return False
    for name, wrap in (("add_scalar", _wrap_add_scalar), ("add_scalars", _wrap_add_scalars)):
        original = getattr(cls, name, None)
        if callable(original) and not getattr(original, _MARK, False):
            wrapped = wrap(original)
            setattr(wrapped, _MARK, True)
            setattr(cls, name, wrapped)
    return True


def _wrap_add_scalar(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def add_scalar(self: Any, tag: Any, scalar_value: Any, global_step: Any = None,
                   *args: Any, **kwargs: Any) -> Any:
        result = original(self, tag, scalar_value, global_step, *args, **kwargs)
        _record({tag: scalar_value}, global_step)
        return result

    return add_scalar


def _wrap_add_scalars(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def add_scalars(self: Any, main_tag: Any, tag_scalar_dict: Any, global_step: Any = None,
                    *args: Any, **kwargs: Any) -> Any:
        result = original(self, main_tag, tag_scalar_dict, global_step, *args, **kwargs)
        if isinstance(tag_scalar_dict, Mapping):
            _record({f"{main_tag}/{tag}": value for tag, value in tag_scalar_dict.items()}, global_step)
        return result

    return add_scalars


def _record(values: Mapping[Any, Any], global_step: Any) -> None:
    from .session import get_session  # loaded with the session; importing it here keeps this module light

    session = get_session()
    if session is None or session.disabled or session.closed:
        return
    with session.failures.guard("tensorboard scalars"):
        record: dict[str, Any] = {}
        for tag, value in values.items():
            number = _scalar(value)
            if number is not None:
                record[tensorboard_key(str(tag))] = number
        if not record:
            return
        step = _global_step(global_step)
        if step is not None:
            record[TB_STEP_KEY] = step
        session.log(record)


def _scalar(value: Any) -> Any:
    """A number, a one-element tensor kept unread (cloned: the job may change it in place), or None."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone() if value.numel() == 1 else None
    if isinstance(value, (str, bytes)):  # caffe2 blob names: not a value
        return None
    if getattr(value, "size", 1) == 1 and callable(getattr(value, "item", None)):  # numpy scalars and arrays
        value = value.item()
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _global_step(step: Any) -> Any:
    """The writer's step as an int (a tensor step is kept unread), or None when not given."""
    if step is None:
        return None
    import torch

    if isinstance(step, torch.Tensor):
        return step.detach().clone() if step.numel() == 1 else None
    with contextlib.suppress(TypeError, ValueError):
        return operator.index(step)
    with contextlib.suppress(TypeError, ValueError, OverflowError):
        return int(step)
    return None


def _patch_quietly(module: ModuleType) -> None:
    with contextlib.suppress(Exception):  # the job's import must succeed whatever happens here
        patch_summary_writer(module)


class _WriterImportWatcher(importlib.abc.MetaPathFinder):
    """A meta path finder that only ever answers for torch's tensorboard writer module, and only once."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != WRITER_MODULE:
            return None
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _WriterImportWatcher)]
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = AfterExecLoader(spec.loader, _patch_quietly)
        return spec
