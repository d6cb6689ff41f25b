"""Evaluation steps known in any script: ``"evaluation": true`` on the lines of the iterations that evaluated.

The scripts here are not like sample_models/: functional losses (inside the model or in the
loop), a hand-written nanoGPT-style loop (``eval_job.py``), evaluation in eval mode, with
no_grad in train mode, with neither, and with no loss at all.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from profiler_agent.activation import start_session, stop_session
from profiler_agent.evaluation import FUNCTIONAL_LOSSES
from profiler_agent.options import AgentOptions
from profiler_agent.runformat import RunStatus, create_run, layout, read_jsonl, read_manifest

from . import eval_job
from .helpers import only_run, torchscope

EVAL_JOB = Path(eval_job.__file__)


def _record(tmp_path: Path, loop: Callable[[], object]) -> tuple[list[dict[str, object]], object]:
    run_dir, _ = create_run(tmp_path, "evaluation")
    session = start_session(run_dir, AgentOptions(profile=False, graph=False))
    try:
        result = loop()
    finally:
        stop_session(session)
    return read_jsonl(run_dir / layout.METRICS).records, result


def _steps(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    return [r for r in rows if "step_time_s" in r]


def _flagged(rows: list[dict[str, object]]) -> list[int]:
    return [int(r["step"]) for r in rows if r.get("evaluation") is True]  # type: ignore[call-overload]


@pytest.mark.parametrize(("style", "loss_in"), [("eval_mode", "model"), ("eval_mode", "loop"),
                                                 ("nograd_train", "model"), ("nograd_train", "loop"),
                                                 ("noloss", "model"), ("grad_train", "loop")])
def test_evaluation_steps_are_flagged_where_the_script_evaluated(tmp_path: Path, style: str,
                                                                 loss_in: str) -> None:
    rows, evals = _record(tmp_path, lambda: eval_job.main(
        ["--iters", "10", "--eval-every", "4", "--eval", style, "--loss-in", loss_in]))
    steps = _steps(rows)
    assert [r["step"] for r in steps] == list(range(10))
    # The loop evaluates at the top of iterations 0, 4 and 8. Iteration 0's evaluation runs
    # before the model is known; a forward with gradients is only known not to be trained
    # once the model's hooks are in place (from step 1 on).
    expected = [0, 4, 8] if style != "grad_train" else [4, 8]
    assert [r["step"] for r in steps if r.get("evaluation")] == expected
    assert all(r.get("evaluation") in (None, True) for r in rows)  # written only when true
    val = {r["step"]: r["val_loss"] for r in rows if "val_loss" in r}
    assert all("step_time_s" not in r for r in rows if "val_loss" in r)
    if style in ("eval_mode", "nograd_train"):  # functional losses, in the model or in the loop
        assert sorted(val) == [0, 4, 8]
        assert [val[k] for k in sorted(val)] == pytest.approx([evals[k] for k in sorted(val)], rel=1e-5)
    else:  # no loss computed; or computed with gradients in train mode (looks like training)
        assert val == {}


def test_an_evaluation_after_the_last_step_gets_its_own_line(tmp_path: Path) -> None:
    rows, evals = _record(tmp_path, lambda: eval_job.main(
        ["--iters", "6", "--eval-every", "4", "--eval", "eval_mode", "--loss-in", "loop", "--final-eval"]))
    assert [r["step"] for r in _steps(rows) if r.get("evaluation")] == [0, 4]
    last = rows[-1]
    assert last["step"] == 6 and last["evaluation"] is True and "step_time_s" not in last
    assert last["val_loss"] == pytest.approx(evals[6], rel=1e-5)


def test_no_evaluation_no_flag_and_wrappers_pass_training_losses_through(tmp_path: Path) -> None:
    originals = {name: getattr(F, name) for name in FUNCTIONAL_LOSSES}
    wrapped: list[bool] = []

    def loop() -> None:
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(6):
            x = torch.randn(5, 4)
            loss = F.mse_loss(model(x), torch.zeros(5, 2))
            wrapped.append(all(getattr(F, n).__wrapped__ is originals[n] for n in FUNCTIONAL_LOSSES))
            loss.backward()
            opt.step()
            opt.zero_grad()

    rows, _ = _record(tmp_path, loop)
    assert len(_steps(rows)) == 6 and _flagged(rows) == []
    assert not [r for r in rows if "val_loss" in r]  # training losses are not evaluation losses
    assert all(wrapped)  # in place for the whole session (a one-line evaluation looks them up first)
    assert all(getattr(F, n) is originals[n] for n in FUNCTIONAL_LOSSES)  # restored by stop_session


def test_a_one_line_functional_evaluation_keeps_its_first_batch(tmp_path: Path) -> None:
    """``F.cross_entropy(model(x), y)`` looks the function up before the model call opens the phase."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    val = [(torch.randn(n, 6), torch.randint(0, 3, (n,))) for n in (7, 2, 5)]  # the first batch is the largest

    def loop() -> dict[int, float]:
        printed: dict[int, float] = {}
        for step in range(6):
            if step % 3 == 0:
                model.eval()
                with torch.no_grad():
                    total = sum(F.cross_entropy(model(x), y, reduction="sum").item() for x, y in val)
                printed[step] = total / sum(len(y) for _, y in val)
                model.train()
            x, y = torch.randn(4, 6), torch.randint(0, 3, (4,))
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        return printed

    rows, printed = _record(tmp_path, loop)
    val_loss = {r["step"]: r["val_loss"] for r in rows if "val_loss" in r}
    assert sorted(val_loss) == [0, 3]
    assert [val_loss[k] for k in (0, 3)] == pytest.approx([printed[k] for k in (0, 3)], rel=1e-5)


def test_two_forwards_with_one_backward_are_training(tmp_path: Path) -> None:
    """A siamese step: both forwards feed the loss, so neither is an evaluation."""
    def loop() -> None:
        model = nn.Linear(4, 3)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(5):
            a, b = model(torch.randn(2, 4)), model(torch.randn(2, 4))
            F.l1_loss(a, b).backward()
            opt.step()
            opt.zero_grad()

    rows, _ = _record(tmp_path, loop)
    assert len(_steps(rows)) == 5 and _flagged(rows) == []


def test_a_pattern_in_every_iteration_is_training(tmp_path: Path) -> None:
    """RL-style: the model picks an action in eval mode every iteration; that is the step itself."""
    def loop() -> None:
        policy = nn.Linear(4, 2)
        opt = torch.optim.SGD(policy.parameters(), lr=0.1)
        for i in range(8):
            if i != 5:  # one iteration without acting: the next ones start a new run of marks
                policy.eval()
                with torch.no_grad():
                    policy(torch.randn(1, 4)).argmax()
                policy.train()
            F.smooth_l1_loss(policy(torch.randn(3, 4)), torch.zeros(3, 2)).backward()
            opt.step()
            opt.zero_grad()

    rows, _ = _record(tmp_path, loop)
    assert _flagged(rows) == [0, 1, 2, 6, 7]


def test_a_loss_module_calling_a_functional_loss_counts_once(tmp_path: Path) -> None:
    criterion = nn.CrossEntropyLoss()  # calls F.cross_entropy inside
    val = [(torch.randn(3, 4), torch.tensor([0, 1, 2])), (torch.randn(5, 4), torch.tensor([1, 1, 0, 2, 2]))]

    def loop() -> float:
        model = nn.Linear(4, 3)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        F.cross_entropy(model(torch.randn(2, 4)), torch.tensor([0, 1])).backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            total = sum(float(criterion(model(x), y)) * len(y) for x, y in val)
        model.train()
        F.cross_entropy(model(torch.randn(2, 4)), torch.tensor([0, 1])).backward()
        opt.step()
        return total / 8

    rows, expected = _record(tmp_path, loop)
    val_rows = [r for r in rows if "val_loss" in r]
    assert len(val_rows) == 1 and "val_loss_1" not in val_rows[0]
    assert val_rows[0]["step"] == 1 and val_rows[0]["val_loss"] == pytest.approx(expected, rel=1e-5)
    assert _flagged(rows) == [1]


def test_scripting_during_an_evaluation_still_compiles(tmp_path: Path) -> None:
    """The functional wrappers are in place during a phase; torch.jit.script must still see torch's code."""
    class WithLoss(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(self.fc(x), y)

    def loop() -> float:
        model = WithLoss()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.randn(4, 4), torch.tensor([0, 1, 2, 0])
        model(x, y).backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            model(x, y)  # opens the phase
            scripted = torch.jit.script(WithLoss())
            value = float(scripted(x, y))
        model.train()
        return value

    rows, value = _record(tmp_path, loop)
    assert value > 0
    assert _flagged(rows) == [1]


def test_nanogpt_style_job_max_steps_group_cpu_and_contention(tmp_path: Path) -> None:
    """Zero-code: a job meant to run 1000 iterations, ended by --max-steps after 10 optimizer steps."""
    proc = torchscope("run", "--root", str(tmp_path), "--name", "nano", "--group", "nano-a",
                      "--max-steps", "10", "--no-profile", "--no-graph", "--system-interval", "0.2", "--",
                      sys.executable, str(EVAL_JOB), "--iters", "1000", "--eval-every", "4",
                      "--loss-in", "model")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "done" not in proc.stdout  # the job did not run to its own end
    run_dir = only_run(tmp_path)
    m = read_manifest(run_dir)
    assert m.status is RunStatus.FINISHED and m.exit_code == 0
    assert m.extra["stopped"] == "max_steps" and m.extra["group"] == "nano-a"
    assert "job_exit_code" not in m.extra
    rows = read_jsonl(run_dir / layout.METRICS).records
    steps = _steps(rows)
    assert [r["step"] for r in steps] == list(range(10))
    assert [r["step"] for r in steps if r.get("evaluation")] == [0, 4, 8]
    printed = {int(line.split()[1]): float(line.split()[2]) for line in proc.stdout.splitlines()
               if line.startswith("eval ")}
    val = {r["step"]: r["val_loss"] for r in rows if "val_loss" in r}
    assert sorted(val) == [0, 4, 8] and sorted(printed) == [0, 4, 8]
    assert [val[k] for k in (0, 4, 8)] == pytest.approx([printed[k] for k in (0, 4, 8)], abs=2e-6)
    assert all(r["cpu_time_s"] >= 0 for r in steps)
    if sys.platform.startswith("linux"):
        measured = [r for r in steps if "contention" in r]
        assert len(measured) >= 9  # every step but possibly the first (before the first job CPU sample)
        assert all(0 <= r["contention"] <= 1 and 0 <= r["steal"] <= 1 for r in measured)
    assert (run_dir / layout.TRACEBACK_LOG).exists() is False


def test_group_is_absent_without_the_flag_and_max_steps_past_the_end_changes_nothing(tmp_path: Path) -> None:
    proc = torchscope("run", "--root", str(tmp_path), "--max-steps", "50", "--no-profile", "--no-graph", "--",
                      sys.executable, str(EVAL_JOB), "--iters", "3", "--eval-every", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "done" in proc.stdout
    m = read_manifest(only_run(tmp_path))
    assert m.status is RunStatus.FINISHED and "group" not in m.extra and "stopped" not in m.extra


def test_bad_max_steps_and_group_are_usage_errors(tmp_path: Path) -> None:
    for args in (["--max-steps", "0"], ["--group", " "]):
        proc = torchscope("run", "--root", str(tmp_path), *args, "--", sys.executable, "-c", "pass")
        assert proc.returncode == 2, (args, proc.stderr)
        assert args[0] in proc.stderr
    assert not list(tmp_path.iterdir())


def test_max_steps_wins_over_the_code_of_a_job_that_swallows_the_exit(tmp_path: Path) -> None:
    script = tmp_path / "stubborn.py"
    script.write_text(
        "import sys, torch\n"
        "model = torch.nn.Linear(3, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "try:\n"
        "    for _ in range(100):\n"
        "        model(torch.randn(2, 3)).sum().backward()\n"
        "        opt.step()\n"
        "except BaseException:\n"
        "    print('interrupted', flush=True)\n"
        "    sys.exit(3)\n")
    proc = torchscope("run", "--root", str(tmp_path / "runs"), "--max-steps", "4", "--no-profile",
                      "--no-graph", "--", sys.executable, str(script))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "interrupted" in proc.stdout and "the job itself exited with 3" in proc.stderr
    run_dir = only_run(tmp_path / "runs")
    m = read_manifest(run_dir)
    assert m.status is RunStatus.FINISHED and m.exit_code == 0
    assert m.extra["stopped"] == "max_steps" and m.extra["job_exit_code"] == 3
    assert [r["step"] for r in _steps(read_jsonl(run_dir / layout.METRICS).records)] == [0, 1, 2, 3]


def test_max_steps_ends_a_job_whose_threads_never_finish(tmp_path: Path) -> None:
    script = tmp_path / "threads.py"
    script.write_text(
        "import threading, time, torch\n"
        "import profiler_agent.max_steps as s\n"
        "s.MAX_STEPS_GRACE_S = 1.0\n"  # shortens the agent's grace period for this test
        "threading.Thread(target=lambda: time.sleep(600)).start()\n"  # non-daemon: Python waits for it
        "model = torch.nn.Linear(3, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for _ in range(100):\n"
        "    model(torch.randn(2, 3)).sum().backward()\n"
        "    opt.step()\n")
    proc = torchscope("run", "--root", str(tmp_path / "runs"), "--max-steps", "2", "--no-profile",
                      "--no-graph", "--", sys.executable, str(script), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "did not exit within" in proc.stderr
    run_dir = only_run(tmp_path / "runs")
    m = read_manifest(run_dir)
    assert m.status is RunStatus.FINISHED and m.extra["stopped"] == "max_steps"
    assert [r["step"] for r in _steps(read_jsonl(run_dir / layout.METRICS).records)] == [0, 1]


def test_evaluation_hooks_read_no_tensor_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """No device sync on the hook path: nothing there reads a tensor's value (each read syncs on CUDA)."""
    from profiler_agent.evaluation import EvalLosses
    from profiler_agent.evaluation_steps import EvaluationSteps
    from profiler_agent.failures import FailureLog

    failures = FailureLog(None)
    losses, steps = EvalLosses(failures), EvaluationSteps()
    model, criterion = nn.Linear(4, 3), nn.CrossEntropyLoss()
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
    reads: list[str] = []
    for name in ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__"):
        original = getattr(torch.Tensor, name)

        def counting(self: torch.Tensor, *a: object, _name: str = name, _orig: object = original,
                     **k: object) -> object:
            reads.append(_name)
            return _orig(self, *a, **k)  # type: ignore[operator]

        monkeypatch.setattr(torch.Tensor, name, counting)
    losses.install()
    losses.begin(0)
    with torch.no_grad():
        F.cross_entropy(model(x), y)
        F.mse_loss(model(x), torch.zeros(5, 3), reduction="sum")
        criterion(model(x), y)
    steps.watch(model(x))
    steps.saw_evaluation()
    held = steps.held()
    values = losses.end()
    losses.uninstall()
    assert reads == [] and failures.count == 0
    monkeypatch.undo()
    assert held and set(values) == {"val_loss", "val_loss_1", "val_loss_2"}


def test_a_compiled_model_is_seen_evaluating(tmp_path: Path) -> None:
    """torch.compile(model): the hooks on the compiled module run outside its graph."""
    import warnings

    torch._dynamo.reset()

    def loop() -> None:
        torch.manual_seed(0)
        model = torch.compile(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)), backend="eager")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(5):
            x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i == 2:
                model.eval()
                with torch.no_grad():
                    logits = model(x)
                    F.cross_entropy(logits, y)
                model.train()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that global hooks also fire for the OptimizedModule
        rows, _ = _record(tmp_path, loop)
    torch._dynamo.reset()
    assert _flagged(rows) == [3]
    assert [r["step"] for r in rows if "val_loss" in r] == [3]
    assert not list(tmp_path.rglob(layout.AGENT_ERRORS))


def test_evaluation_hooks_stand_aside_while_dynamo_traces(tmp_path: Path) -> None:
    """A compiled function calling the model: no graph break or error from the agent's evaluation
    hooks (they do nothing while dynamo traces), at the price of not seeing that evaluation."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()

    def loop() -> None:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        @torch.compile(backend="eager")
        def evaluate(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(model(x), y)

        for i in range(5):
            x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
            F.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            if i in (1, 3):
                model.eval()
                with torch.no_grad():
                    evaluate(x, y)
                model.train()

    counters.clear()
    rows, _ = _record(tmp_path, loop)
    breaks = sum(counters["graph_break"].values())
    torch._dynamo.reset()
    assert breaks == 0, dict(counters["graph_break"])
    assert len(_steps(rows)) == 5 and _flagged(rows) == []
    assert not list(tmp_path.rglob(layout.AGENT_ERRORS))


def test_the_session_long_loss_wrappers_script_compile_and_pickle_as_torch_s_own(tmp_path: Path) -> None:
    """The functional wrappers stay in place in training: scripting, a full-graph compile and
    pickling of ``F.cross_entropy`` must see torch's function, not break on ours."""
    import pickle

    x, y = torch.randn(4, 3), torch.tensor([0, 1, 2, 0])
    expected = float(torch.nn.functional.cross_entropy(x, y))

    def loop() -> tuple[float, float, bool]:
        assert getattr(F.cross_entropy, "__torchscope__", None) is not None  # ours, in training

        def loss(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(a, b)

        scripted = torch.jit.script(loss)
        compiled = torch.compile(loss, backend="eager", fullgraph=True)  # a graph break would raise
        return float(scripted(x, y)), float(compiled(x, y)), pickle.loads(pickle.dumps(F.cross_entropy)) is F.cross_entropy

    _, (scripted, compiled, pickled) = _record(tmp_path, loop)
    assert scripted == pytest.approx(expected) and compiled == pytest.approx(expected) and pickled
