"""A nanoGPT-style job with gradient accumulation (``accum_job.py``) wrapped with zero code: the loss per
optimizer step is the script's own, tokens per step are B × T, and every evaluation says whether it
ran with gradients enabled (``eval_grad_enabled``), which the advisor reads when no trace covers it.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from app.analysis.advisor import advise
from app.workspace.evidence import load_evidence
from profiler_agent.accumulation import loss_divisor, step_loss
from profiler_agent.activation import start_session, stop_session
from profiler_agent.hooks import tokens_of
from profiler_agent.options import AgentOptions
from profiler_agent.runformat import create_run, layout, read_jsonl

from . import accum_job, eval_job
from .helpers import only_run, torchscope

ACCUM_JOB = Path(accum_job.__file__)
ITERS, ACCUM, BATCH = 16, 3, 4
EVALS = [0, 6, 12]  # --eval-every 6, at the top of the loop
# One window: iteration 2 warm-up, 3–4 active (iteration 0 is never profiled): no evaluation inside.
# one early window that covers no evaluation (the default evaluation-covering window is off, so the
# advisor must find evaluation with gradients from the agent's per-evaluation signal alone)
WINDOW = ["--wait", "1", "--warmup", "1", "--active", "2", "--repeat", "1", "--no-evaluation-window"]


def _job(root: Path, eval_grad: str, block: int) -> tuple[list[dict[str, object]], str, Path]:
    proc = torchscope("run", "--root", str(root), "--no-graph", "--system-interval", "0.5", *WINDOW, "--",
                      sys.executable, str(ACCUM_JOB), "--iters", str(ITERS), "--accum", str(ACCUM),
                      "--batch", str(BATCH), "--block", str(block), "--eval-every", "6",
                      "--eval-grad", eval_grad)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "done" in proc.stdout
    run_dir = only_run(root)
    return read_jsonl(run_dir / layout.METRICS).records, proc.stdout, run_dir


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[list[dict[str, object]], str, Path]]:
    """Two recorded runs: evaluation under no_grad with T = 8, under enable_grad with T = 16."""
    return {"no_grad": _job(tmp_path_factory.mktemp("no_grad"), "no_grad", 8),
            "enable_grad": _job(tmp_path_factory.mktemp("enable_grad"), "enable_grad", 16)}


def _steps(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    return [r for r in rows if "step_time_s" in r]


@pytest.mark.parametrize("which", ["no_grad", "enable_grad"])
def test_loss_equals_the_scripts_printed_loss_at_every_step(jobs: dict, which: str) -> None:
    rows, stdout, _ = jobs[which]
    printed = {int(w[1]): float(w[3]) for line in stdout.splitlines() if (w := line.split())[:1] == ["step"]}
    steps = _steps(rows)
    assert [r["step"] for r in steps] == list(range(ITERS)) == sorted(printed)
    assert all(r["backward_calls"] == ACCUM for r in steps)
    recorded = [r["loss"] for r in steps]
    assert recorded == pytest.approx([printed[s] for s in range(ITERS)], rel=2e-6, abs=2e-7)
    # not the mean of what backward() received (the divided losses): that is ACCUM times smaller
    assert all(abs(r - printed[s] / ACCUM) > 1.0 for s, r in enumerate(recorded))


def test_tokens_per_step_are_b_times_t_and_follow_the_sequence_length(jobs: dict) -> None:
    short, long = _steps(jobs["no_grad"][0]), _steps(jobs["enable_grad"][0])
    assert [r["samples"] for r in short] == [r["samples"] for r in long] == [ACCUM * BATCH] * ITERS
    assert [r["tokens"] for r in short] == [ACCUM * BATCH * 8] * ITERS
    assert [r["tokens"] for r in long] == [ACCUM * BATCH * 16] * ITERS  # T doubled: tokens double


def test_every_evaluation_says_whether_it_ran_with_gradients(jobs: dict) -> None:
    for which, expected in (("no_grad", False), ("enable_grad", True)):
        steps = _steps(jobs[which][0])
        assert [r["step"] for r in steps if r.get("evaluation")] == EVALS
        assert not any(r.get("profiled") for r in steps if r.get("evaluation"))  # the window missed them
        assert any(r.get("profiled") for r in steps)
        assert {r["step"]: r["eval_grad_enabled"] for r in steps if "eval_grad_enabled" in r} == \
            dict.fromkeys(EVALS, expected)


def test_the_advisor_flags_evaluation_with_grad_outside_the_profiler_windows(jobs: dict) -> None:
    bad = advise(load_evidence(jobs["enable_grad"][2]), rules=["eval_without_no_grad"])
    [finding] = bad.findings
    assert finding.rule == "eval_without_no_grad" and finding.step == 0
    assert finding.evidence["evaluations_with_grad"] == len(EVALS)
    assert finding.evidence["evaluation_steps_profiled"] == 0
    good = advise(load_evidence(jobs["no_grad"][2]), rules=["eval_without_no_grad"])
    assert good.findings == () and "eval_without_no_grad" in good.checked


# -- units: the division, tokens, and the signal in other evaluation styles ---------------------------


def test_loss_divisor_reads_the_constant_of_a_division_or_multiplication() -> None:
    x = torch.randn(3, requires_grad=True)
    loss = x.sum()
    assert loss_divisor(loss / 4) == 4 and loss_divisor(loss * 0.25) == pytest.approx(4)
    assert loss_divisor(loss.div(3)) == 3 and loss_divisor(loss) is None
    count = torch.tensor(5.0)  # a host tensor: its value is read without a device sync
    assert loss_divisor(loss / count) == 5 and loss_divisor(loss / torch.ones(3)) is None  # not 0-dim
    assert loss_divisor(loss / x[0]) is None  # the divisor requires grad


def test_step_loss_undoes_the_division_only_for_accumulation() -> None:
    raw = [torch.tensor(2.0), torch.tensor(4.0), torch.tensor(6.0)]
    assert float(step_loss([r / 3 for r in raw], [3.0, 3.0, 3.0])) == pytest.approx(4.0)
    assert float(step_loss([r * (1 / 3) for r in raw], [3.0] * 3)) == pytest.approx(4.0)
    # one backward of sum() / batch: what the script divided on purpose
    assert float(step_loss([torch.tensor(0.5)], [8.0])) == 0.5
    # several backward calls with other divisors (a GAN, a partial accumulation): the mean as passed
    assert float(step_loss([torch.tensor(1.0), torch.tensor(3.0)], [None, None])) == 2.0
    assert float(step_loss([torch.tensor(1.0), torch.tensor(3.0)], [3.0, 3.0])) == 2.0


def test_tokens_only_for_integer_b_by_t_inputs() -> None:
    assert tokens_of(torch.zeros(4, 8, dtype=torch.long)) == 32
    assert tokens_of(torch.zeros(4, 8, dtype=torch.int32)) == 32
    assert tokens_of(torch.zeros(4, 8)) == 0  # features, not tokens
    assert tokens_of(torch.zeros(4, 3, 8, dtype=torch.long)) == 0 and tokens_of(None) == 0
    assert tokens_of(torch.zeros(4, 8, dtype=torch.bool)) == 0


def _record(tmp_path: Path, loop: object) -> list[dict[str, object]]:
    run_dir, _ = create_run(tmp_path, "signal")
    session = start_session(run_dir, AgentOptions(profile=False, graph=False))
    try:
        loop()  # type: ignore[operator]
    finally:
        stop_session(session)
    return read_jsonl(run_dir / layout.METRICS).records


@pytest.mark.parametrize(("style", "expected"), [("eval_mode", False), ("nograd_train", False),
                                                 ("grad_train", True)])
def test_eval_grad_enabled_in_other_evaluation_styles(tmp_path: Path, style: str, expected: bool) -> None:
    rows = _record(tmp_path, lambda: eval_job.main(["--iters", "9", "--eval-every", "4", "--eval", style,
                                                    "--final-eval"]))
    flagged = {r["step"]: r["eval_grad_enabled"] for r in _steps(rows) if r.get("evaluation")}
    assert flagged == dict.fromkeys([0, 4, 8] if style != "grad_train" else [4, 8], expected)
    last = rows[-1]  # the evaluation after the last optimizer step has a line of its own
    assert "step_time_s" not in last and last["evaluation"] is True and last["eval_grad_enabled"] is expected


def test_training_in_eval_mode_is_not_evaluation_with_grad(tmp_path: Path) -> None:
    """Fine-tuning with model.eval() (frozen batch norm): the eval-mode outputs are backpropagated."""
    def loop() -> None:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(6):
            model.train(i == 0)  # the first iteration trains in train mode (the root is found then)
            loss = model(torch.randn(8, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    steps = _steps(_record(tmp_path, loop))
    assert len(steps) == 6
    assert not any(r.get("eval_grad_enabled") for r in steps)


def test_the_new_hook_paths_read_no_device_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """No tensor value is read for tokens or the evaluation signal; a division's constant is read on
    the host (one ``__float__`` of the 0-dim CPU scalar torch wrapped the Python number in)."""
    from profiler_agent.evaluation_steps import EvaluationSteps

    reads: list[tuple[str, str]] = []
    for name in ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__"):
        original = getattr(torch.Tensor, name)

        def counting(self: torch.Tensor, *a: object, _name: str = name, _orig: object = original,
                     **k: object) -> object:
            reads.append((_name, self.device.type))
            return _orig(self, *a, **k)  # type: ignore[operator]

        monkeypatch.setattr(torch.Tensor, name, counting)
    model, steps = nn.Linear(4, 3), EvaluationSteps()
    assert tokens_of(torch.zeros(2, 5, dtype=torch.long)) == 10
    model.eval()
    steps.saw_evaluation()
    steps.watch_evaluation(model(torch.randn(2, 4)))
    held, with_grad = steps.held(), steps.grad_enabled
    loss = model(torch.randn(2, 4)).sum()
    plain = loss_divisor(loss)
    assert reads == []
    divided = loss_divisor(loss / 4)
    monkeypatch.undo()
    assert held and with_grad and plain is None and divided == 4
    assert reads == [("__float__", "cpu")]


def test_accumulation_through_a_grad_scaler_records_the_undivided_loss(tmp_path: Path) -> None:
    """nanoGPT's ``scaler.scale(loss).backward()`` with ``loss = loss / accum``: unscaled, undivided."""
    printed: list[float] = []

    def loop() -> None:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        for _ in range(4):
            micro = []
            for _ in range(2):
                loss = model(torch.randn(8, 4)).pow(2).mean()
                micro.append(loss.item())
                scaler.scale(loss / 2).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            printed.append(sum(micro) / 2)

    steps = _steps(_record(tmp_path, loop))
    assert [r["loss"] for r in steps] == pytest.approx(printed, rel=1e-6)
