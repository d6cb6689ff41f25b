"""The sample models: they train, they are seeded, and the optimized one is cheaper by construction."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from profiler_agent.graph import describe_module_tree
from sample_models import record, resnet_baseline, resnet_optimized
from sample_models.data import HeavyAugmentDataset, TensorPairDataset, make_images

TINY = ["--train-size", "32", "--val-size", "16", "--batch-size", "8", "--width", "8", "--image-size", "16",
        "--eval-every", "2", "--steps", "3", "--num-workers", "0"]


def _flops(model: torch.nn.Module, size: int = 16) -> int:
    shapes: dict[int, tuple[int, ...]] = {}

    def keep_shape(m: torch.nn.Module, args: object, out: torch.Tensor) -> None:
        shapes.setdefault(id(m), tuple(out.shape))

    hooks = [m.register_forward_hook(keep_shape) for m in model.modules()]
    model(torch.zeros(2, 3, size, size))
    for h in hooks:
        h.remove()
    return describe_module_tree(model, shapes)["root"]["flops"]


def test_optimized_model_needs_fewer_flops_and_params() -> None:
    base, opt = resnet_baseline.SmallResNet(width=16), resnet_optimized.SmallSeparableResNet(width=16)
    assert _flops(opt) < 0.4 * _flops(base)
    assert sum(p.numel() for p in opt.parameters()) < 0.4 * sum(p.numel() for p in base.parameters())
    x = torch.randn(2, 3, 16, 16)
    assert base(x).shape == opt(x).shape == (2, 10)


@pytest.mark.parametrize("module", [resnet_baseline, resnet_optimized])
def test_scripts_train_a_few_steps(module: object, capsys: pytest.CaptureFixture[str]) -> None:
    threads = torch.get_num_threads()
    try:
        module.main(TINY)  # type: ignore[attr-defined]
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "done: 3 steps" in out and "val_loss" in out


def test_data_is_seeded_and_learnable() -> None:
    a, ya = make_images(20, classes=10, size=8, seed=1)
    b, yb = make_images(20, classes=10, size=8, seed=1)
    assert torch.equal(a, b) and torch.equal(ya, yb)
    assert not torch.equal(a, make_images(20, classes=10, size=8, seed=2)[0])
    heavy = HeavyAugmentDataset(a, ya, seed=0, blur_passes=2)
    assert torch.equal(heavy[3][0], heavy[3][0]) and heavy[3][0].shape == (3, 8, 8)
    assert TensorPairDataset(a, ya)[3][1] == ya[3]


def test_record_skips_runs_already_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import write_run

    write_run(tmp_path, "baseline")
    write_run(tmp_path, "optimized")
    assert record.recorded_names(tmp_path) == {"baseline", "optimized"}
    assert record.main(["--root", str(tmp_path)]) == 0
    assert capsys.readouterr().out.count("already in") == 2
    assert record.recorded_names(tmp_path / "missing") == set()
