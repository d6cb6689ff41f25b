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


def test_record_profiles_the_evaluation_and_logs_grad_norm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[object] = []
    monkeypatch.setattr(record, "launch", lambda request: seen.append(request) or 0)
    assert record.record_sample(record.SAMPLES[0], tmp_path, steps=40, extra=["--lr", "0.1"]) == 0
    request = seen[0]
    assert request.options.grad_norm  # type: ignore[attr-defined]
    command = list(request.command)  # type: ignore[attr-defined]
    every = int(command[command.index("--eval-every") + 1])
    schedule = request.options.schedule  # type: ignore[attr-defined]
    active = range(1 + schedule.wait + schedule.warmup, 1 + schedule.cycle)
    assert every in active and every == 9  # evaluation after step 9 runs in iteration 9 (active: 8-10)
    assert command[-2:] == ["--lr", "0.1"]  # the caller's extra arguments come last and win


def test_median_step_time_leaves_out_window_and_evaluations(tmp_path: Path) -> None:
    from profiler_agent.runformat import JsonlWriter, layout

    with JsonlWriter(tmp_path / layout.METRICS) as w:
        for step in range(20):
            slow = step == 0 or 6 <= step <= 11 or step == 15
            line = {"step": step, "step_time_s": 9.0 if slow else 0.1 + step / 1000, "loss": 1.0 / (1 + step)}
            if 6 <= step <= 11:
                line["profiled"] = True  # as the agent marks its profiler window
            w.write(line)
            if step == 15:
                w.write({"step": step, "val_loss": 2.0})  # the evaluation ran during iteration 15
    # The headline rule (app.analysis.run.step_time): warm-up steps 0-1, the profiled window and the
    # evaluation step are dropped. Kept: steps 2-5, 12-14, 16-19 (11 values); the middle one is step 13.
    assert record.read_median_step_time(tmp_path) == pytest.approx(0.113)
    summary = record.summarise_recorded_run(tmp_path)
    # final loss: the median of the last 2 of 20 values (app.analysis.run.final_value)
    assert summary.final_loss is not None and summary.final_loss.value == pytest.approx((1 / 19 + 1 / 20) / 2)
    assert "final loss (median of last 2)" in record.format_summary("baseline", summary)
