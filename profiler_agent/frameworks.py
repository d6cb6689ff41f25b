"""Lightning and Hugging Face ``Trainer`` jobs without code changes: config and eval metrics (agent layer).

The global hooks already give these jobs' steps, loss, learning rates, model and traces (both
trainers end each iteration with a plain ``torch.optim`` step, through Lightning's closures and
accelerate's ``AcceleratedOptimizer``). What the hooks cannot see is what only the framework
knows: the configuration (Lightning's ``hparams``, the ``TrainingArguments``) and the evaluation
loss, which both compute inside their own code (a functional loss in ``validation_step``, the
model's own loss in ``Trainer.evaluate``). So the agent reads the frameworks' own records:

- **Lightning** (``lightning.pytorch`` and ``pytorch_lightning``): ``Trainer.__init__`` is wrapped
  to append one callback. ``on_fit_start`` records the module's (and datamodule's) ``hparams`` and
  a few trainer settings into ``config``; ``on_validation_end`` (not during the sanity check)
  logs the ``trainer.callback_metrics`` that this validation produced, i.e. Lightning's own
  per-sample-weighted epoch means of ``self.log(...)`` values, at the step it ran in; when no
  loss was logged, the mean per sample of what ``validation_step`` returned
  (``on_validation_batch_end``).
- **Hugging Face** (``transformers.Trainer`` and its subclasses): ``Trainer.__init__`` is wrapped
  to add one ``TrainerCallback``. ``on_train_begin`` records ``TrainingArguments.to_dict()``
  (tokens are redacted by transformers) and the model config's non-default values;
  ``on_evaluate`` logs the evaluation metrics (``eval_loss`` as ``val_loss``).

The validation loss lands as ``val_loss`` through ``Session.log``, which also stops the agent's
own loss-module capture from adding a second one. Nothing here imports a framework: a meta path
finder installed by the bootstrap (before anything is imported) patches a trainer module right
after it executes, and modules already imported are patched when the agent starts. Every patch
and callback body runs under the session's failure guard; a failure leaves the job as it was.
"""
from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from .import_hooks import spec_running_after

__all__ = [
    "install_framework_capture",
    "FrameworkWatcher",
    "lightning_config",
    "lightning_validation_values",
    "hf_config",
    "hf_eval_values",
    "ReturnedLosses",
]

_MISSING = object()
VAL_LOSS = "val_loss"  # as evaluation.VAL_LOSS_KEY (not imported: that module needs torch)
_HF_SKIPPED_SUFFIXES = ("_runtime", "_per_second", "_preparation_time")  # timings: the agent times steps
_LIGHTNING_TRAINER_FIELDS = ("max_steps", "max_epochs", "accumulate_grad_batches", "gradient_clip_val",
                             "gradient_clip_algorithm", "precision", "val_check_interval",
                             "check_val_every_n_epoch", "log_every_n_steps", "num_devices", "num_nodes")


# -- reading the frameworks' records (pure: plain objects in, dicts out) ---------------------

def lightning_config(trainer: Any, module: Any) -> dict[str, Any]:
    """The module's and datamodule's ``hparams`` (flat, like argparse results) and the trainer's settings.

    Trainer settings go under ``"lightning_trainer"`` so they never shadow a hyperparameter.
    """
    config: dict[str, Any] = {}
    datamodule = getattr(trainer, "datamodule", None)
    for owner in (datamodule, module):  # the model's own hparams win over the datamodule's
        hparams = getattr(owner, "hparams", None) if owner is not None else None
        if isinstance(hparams, Mapping):
            config.update({str(k): v for k, v in hparams.items()})
    settings: dict[str, Any] = {}
    for name in _LIGHTNING_TRAINER_FIELDS:
        value = getattr(trainer, name, None)
        if value is not None:
            settings[name] = value
    for name in ("strategy", "accelerator"):
        value = getattr(trainer, name, None)
        if value is not None:
            settings[name] = type(value).__name__
    if settings:
        config["lightning_trainer"] = settings
    return config


def lightning_validation_values(metrics: Mapping[str, Any], before: Mapping[str, Any]) -> dict[str, Any]:
    """The scalar metrics one validation produced, with its loss named ``val_loss``.

    ``before`` is ``callback_metrics`` as it was when the validation started (the values
    themselves, held so that no ``id()`` can be reused): a key that is new or holds another
    object was logged by this validation (Lightning computes a fresh tensor per epoch-level
    metric). The loss is ``val_loss`` when logged under that name, otherwise the one produced
    key containing ``loss``; with several (several dataloaders), all keep their own names.
    """
    values: dict[str, Any] = {}
    for key, value in metrics.items():
        if before.get(key, _MISSING) is not value and (number := _scalar(value)) is not None:
            values[key] = number
    if VAL_LOSS not in values:
        losses = [k for k in values if "loss" in k.lower()]
        if len(losses) == 1:
            values[VAL_LOSS] = values.pop(losses[0])
    return values


class ReturnedLosses:
    """Mean per sample of the losses ``validation_step`` returned (a scalar, or ``"val_loss"`` /
    ``"loss"`` of a dict), for a validation that logs no loss; kept as one tensor, unread."""

    def __init__(self) -> None:
        self._sum: Any = None
        self._samples = 0

    def add(self, output: Any, batch: Any) -> None:
        if isinstance(output, Mapping):
            output = output.get(VAL_LOSS, output.get("loss"))
        value = _scalar(output)
        if value is None:
            return
        samples = _batch_size(batch) or 1
        weighted = value.float() * samples if hasattr(value, "float") else float(value) * samples
        self._sum = weighted if self._sum is None else self._sum + weighted
        self._samples += samples

    def mean(self) -> Any:
        return None if not self._samples else self._sum / self._samples


def _batch_size(batch: Any) -> int | None:
    """First dimension of the batch's first tensor (in a tuple, list or dict), or None."""
    if isinstance(batch, Mapping):
        items = list(batch.values())
    else:
        items = list(batch) if isinstance(batch, (list, tuple)) else [batch]
    for item in items:
        shape = getattr(item, "shape", None)
        if shape is not None and len(shape) >= 1:
            return int(shape[0])
    return None


def hf_config(args: Any, model: Any = None) -> dict[str, Any]:
    """``TrainingArguments.to_dict()`` (flat, like ``HfArgumentParser`` results) and the model
    config's non-default values under ``"model_config"``."""
    config: dict[str, Any] = dict(args.to_dict()) if hasattr(args, "to_dict") else {}
    model_config = getattr(model, "config", None)
    if model_config is not None and hasattr(model_config, "to_diff_dict"):
        config["model_config"] = model_config.to_diff_dict()
    return config


def hf_eval_values(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """``Trainer.evaluate``'s metrics: ``eval_loss`` as ``val_loss``, other ``eval_*`` values by
    name, timings left out. ``eval_<set>_loss`` of several eval sets keep their names."""
    values: dict[str, Any] = {}
    for key, value in metrics.items():
        number = _scalar(value)
        if number is None or key.endswith(_HF_SKIPPED_SUFFIXES) or key == "epoch":
            continue
        values[VAL_LOSS if key == "eval_loss" else key] = number
    return values


def _scalar(value: Any) -> Any:
    """A one-element tensor (detached, still on its device: the metrics log reads it without an
    extra sync) or a real number; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if hasattr(value, "detach") and hasattr(value, "numel"):
        try:
            if value.numel() == 1 and not value.is_complex():
                return value.detach().clone().reshape(())
        except Exception:  # noqa: BLE001 - an exotic tensor subclass: leave it out
            return None
    return None


# -- the callbacks ---------------------------------------------------------------------------

def _with_session(where: str, action: Callable[[Any], None]) -> None:
    """Run ``action(session)`` under the session's failure guard; nothing without a live session."""
    try:
        from .session import get_session

        session = get_session()
    except Exception:  # noqa: BLE001 - torch not importable: no session to feed
        return
    if session is None or session.disabled or session.closed:
        return
    with session.failures.guard(where):
        action(session)


def _framework_reports_val_loss(session: Any) -> None:
    """From now on the framework logs ``val_loss``: the agent's own capture adds none, not even
    for an evaluation before the first step (Lightning's sanity check), as ``Session.log`` of a
    ``val_loss`` would have said."""
    if hasattr(session, "_user_val_loss"):
        session._user_val_loss = True


def _drop_agent_evaluation(session: Any) -> None:
    """Close the agent's own evaluation phase without logging its losses (Lightning's sanity check:
    two batches through the untrained model, which Lightning itself does not log)."""
    evaluation = getattr(session, "evaluation", None)
    if evaluation is not None and evaluation.active:
        evaluation.end()


@functools.cache
def _lightning_callback_class(base: type) -> type:
    """A Lightning ``Callback`` subclass of ``base`` (each package has its own base class)."""

    class TorchscopeLightningCallback(base):
        """Torchscope's agent: hparams into the run's config, validation metrics into its metrics."""

        def __init__(self) -> None:
            super().__init__()
            self._before: dict[str, Any] = {}
            self._returned = ReturnedLosses()

        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            _with_session("lightning config", lambda s: s.record_config(lightning_config(trainer, pl_module)))

        def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
            self._before = dict(getattr(trainer, "callback_metrics", {}))
            self._returned = ReturnedLosses()

        def on_validation_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                                    batch_idx: int, dataloader_idx: int = 0) -> None:
            _with_session("lightning validation loss", lambda _s: self._returned.add(outputs, batch))

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            sanity_check = bool(getattr(trainer, "sanity_checking", False))

            def log(session: Any) -> None:
                values = lightning_validation_values(trainer.callback_metrics, self._before)
                if VAL_LOSS not in values and (mean := self._returned.mean()) is not None:
                    values[VAL_LOSS] = mean  # not logged: what validation_step returned
                if sanity_check:  # not an evaluation Lightning records: the agent's own capture drops it too
                    _drop_agent_evaluation(session)
                    if VAL_LOSS in values:
                        _framework_reports_val_loss(session)
                elif values:
                    session.log(values)

            _with_session("lightning validation metrics", log)
            self._before, self._returned = {}, ReturnedLosses()

    return TorchscopeLightningCallback


@functools.cache
def _hf_callback_class(base: type) -> type:
    """A ``transformers.TrainerCallback`` subclass of ``base``."""

    class TorchscopeTrainerCallback(base):
        """Torchscope's agent: TrainingArguments into the run's config, eval metrics into its metrics."""

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                           **kwargs: Any) -> None:
            _with_session("transformers config", lambda s: s.record_config(hf_config(args, model)))

        def on_evaluate(self, args: Any, state: Any, control: Any, metrics: Any = None,
                        **kwargs: Any) -> None:
            def log(session: Any) -> None:
                values = hf_eval_values(metrics or {})
                if values:
                    session.log(values)

            _with_session("transformers eval metrics", log)

    return TorchscopeTrainerCallback


def _attach_lightning(trainer: Any, package: str) -> None:
    """Append the callback built on ``package``'s Callback (lightning.pytorch or pytorch_lightning)."""
    base = getattr(sys.modules.get(f"{package}.callbacks"), "Callback", None)
    if base is None:
        raise RuntimeError(f"{package}.callbacks.Callback not found")
    cls = _lightning_callback_class(base)
    if not any(isinstance(c, cls) for c in trainer.callbacks):
        trainer.callbacks.append(cls())


def _attach_hf(trainer: Any) -> None:
    base = getattr(sys.modules.get("transformers.trainer_callback"), "TrainerCallback", None)
    if base is None:
        raise RuntimeError("transformers.trainer_callback.TrainerCallback not found")
    trainer.add_callback(_hf_callback_class(base))


# -- patching the trainer classes ------------------------------------------------------------

def _wrap_init(cls: type, attach: Callable[[Any], None], where: str) -> None:
    original: Callable[..., None] = getattr(cls, "__init__")  # noqa: B009 - cls.__init__ is unsound to mypy
    if getattr(original, "__torchscope__", False):
        return

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        try:  # even before a session exists (the API's Run may start later): the callbacks wait for one
            _attach_once(self, attach)
        except Exception as e:  # noqa: BLE001 - the job keeps its trainer as it was
            _report(where, e)

    __init__.__torchscope__ = True  # type: ignore[attr-defined]
    cls.__init__ = __init__  # type: ignore[misc]


def _attach_once(trainer: Any, attach: Callable[[Any], None]) -> None:
    if not getattr(trainer, "_torchscope_attached", False):
        attach(trainer)
        trainer._torchscope_attached = True


def _patch_lightning(module: ModuleType) -> None:
    package = module.__name__.removesuffix(".trainer.trainer")  # a user's Trainer subclass lives elsewhere
    _wrap_init(module.Trainer, lambda trainer: _attach_lightning(trainer, package), "lightning callback")


def _patch_transformers(module: ModuleType) -> None:
    _wrap_init(module.Trainer, _attach_hf, "transformers callback")


# Module that defines the trainer class -> the patch to apply once it has executed.
_PATCHES: dict[str, Callable[[ModuleType], None]] = {
    "lightning.pytorch.trainer.trainer": _patch_lightning,
    "pytorch_lightning.trainer.trainer": _patch_lightning,
    "transformers.trainer": _patch_transformers,
}
_patched: set[str] = set()


def _apply(name: str, module: ModuleType) -> None:
    if name in _patched:
        return
    _patched.add(name)
    try:
        _PATCHES[name](module)
    except Exception as e:  # noqa: BLE001 - a framework version we do not know: the job runs as is
        _report(f"{name} patch", e)


def _report(where: str, exc: BaseException) -> None:
    recorded = False

    def record(session: Any) -> None:
        nonlocal recorded
        session.failures.record(where, exc)
        recorded = True

    if "torch" in sys.modules:
        _with_session(where, record)
    if not recorded:
        print(f"torchscope agent: {where} failed ({type(exc).__name__}: {exc}); the job continues",
              file=sys.stderr)


class FrameworkWatcher(importlib.abc.MetaPathFinder):
    """A meta path finder that answers only for the trainer modules, each once, asking the other finders."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _PATCHES or fullname in _patched:
            return None
        return spec_running_after(self, fullname, path, target, functools.partial(_apply, fullname))


def install_framework_capture() -> None:
    """Patch the trainer modules already imported and watch for the others (idempotent, imports nothing)."""
    for name in _PATCHES:
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "Trainer"):
            _apply(name, module)
    if not any(isinstance(f, FrameworkWatcher) for f in sys.meta_path):
        sys.meta_path.insert(0, FrameworkWatcher())
