"""A tiny Lightning job and a tiny Hugging Face Trainer job under ``torchscope run``, with no code change.

Each job runs once per module (a fixture) and the tests read its run: steps, loss, learning
rate, val_loss at each evaluation, a trace, the model tree, the framework's config, and the
framework's own logs (Lightning's CSVLogger, the Trainer's log history) still written.
"""
from __future__ import annotations

import csv
import gzip
import json
import math
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from profiler_agent import frameworks
from profiler_agent.runformat import layout, read_jsonl, read_manifest
from tests.agent.helpers import PROJECT_ROOT, only_run, torchscope

JOBS = PROJECT_ROOT / "tests" / "agent" / "jobs"
MAX_STEPS = 30  # both jobs: 30 optimizer steps, an evaluation every 10
EVAL_STEPS = [10, 20, 30]
# A small window (steps 3-4 recorded) and no backward graph: the tests stay short on 2 cores.
FAST = ["--wait", "1", "--warmup", "1", "--active", "2", "--no-graph", "--system-interval", "0.5"]


class Run:
    """A finished wrapped job: its run folder, metrics lines and manifest."""

    def __init__(self, run_dir: Path, out: Path, stdout: str) -> None:
        self.dir = run_dir
        self.out = out
        self.stdout = stdout
        self.rows = read_jsonl(run_dir / layout.METRICS).records
        self.steps = [r for r in self.rows if "step_time_s" in r]
        self.manifest = read_manifest(run_dir)

    def val_loss(self) -> dict[int, float]:
        return {r["step"]: r["val_loss"] for r in self.rows if "val_loss" in r}


def _wrapped(tmp: Path, job: str, monkeypatch: pytest.MonkeyPatch) -> Run:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing may be downloaded
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    out = tmp / "out"
    proc = torchscope("run", "--root", str(tmp / "runs"), "--name", job, *FAST, "--",
                      sys.executable, str(JOBS / f"{job}.py"), str(out), timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = only_run(tmp / "runs")
    errors = read_jsonl(run_dir / layout.AGENT_ERRORS).records
    assert not errors, errors
    return Run(run_dir, out, (run_dir / layout.STDOUT_LOG).read_text())


@pytest.fixture(scope="module")
def lightning_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    pytest.importorskip("lightning", reason="lightning is a test dependency (requirements.txt)")
    with pytest.MonkeyPatch.context() as mp:
        yield _wrapped(tmp_path_factory.mktemp("lightning"), "lightning_job", mp)


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    pytest.importorskip("transformers", reason="transformers is a test dependency (requirements.txt)")
    pytest.importorskip("accelerate", reason="transformers' Trainer needs accelerate")
    with pytest.MonkeyPatch.context() as mp:
        yield _wrapped(tmp_path_factory.mktemp("hf"), "hf_trainer_job", mp)


def _assert_training_curves(run: Run) -> None:
    assert len(run.steps) == MAX_STEPS, len(run.steps)  # the optimizer hooks fire once per step, not more
    assert [r["step"] for r in run.steps] == list(range(len(run.steps)))  # one line per optimizer step
    with_loss = [r for r in run.steps if isinstance(r.get("loss"), float) and math.isfinite(r["loss"])]
    assert len(with_loss) >= 0.95 * len(run.steps)
    assert all(r.get("backward_calls", 1) == 1 for r in run.steps)  # one backward per step, seen once
    assert all(isinstance(r.get("lr"), float) for r in run.steps)


def _assert_trace_and_tree(run: Run, root_type: str) -> None:
    traces = layout.list_trace_files(run.dir)
    assert traces, "no trace"
    with gzip.open(traces[0], "rt") as f:
        names = {e.get("name", "") for e in json.load(f)["traceEvents"]}
    assert any(n.startswith("ProfilerStep#") for n in names)
    assert any(n.startswith("aten::") for n in names)
    profiled = [r["step"] for r in run.steps if r.get("profiled")]
    assert profiled and min(profiled) >= 1
    tree = json.loads((run.dir / layout.MODULE_TREE).read_text())
    assert tree["root"]["type"] == root_type
    assert tree["root"]["params"] > 0


def _assert_evaluations_marked(run: Run, also: tuple[int, ...] = ()) -> None:
    if not (PROJECT_ROOT / "profiler_agent" / "evaluation_steps.py").is_file():  # this checkout's agent
        pytest.skip("this agent does not mark evaluation steps yet (issue 11's evaluation_steps.py)")
    marked = {r["step"] for r in run.rows if r.get("evaluation")}
    assert set(EVAL_STEPS) <= marked <= {*EVAL_STEPS, *also}, marked


# -- Lightning --------------------------------------------------------------------------------

@pytest.mark.slow
def test_lightning_job_gives_steps_loss_and_lr(lightning_run: Run) -> None:
    _assert_training_curves(lightning_run)
    # Lightning's StepLR (interval "step", every 10 steps, gamma 0.5) is what the optimizer used.
    lrs = [lightning_run.steps[i]["lr"] for i in (0, 9, 10, 20)]
    assert lrs == pytest.approx([0.05, 0.05, 0.025, 0.0125])


@pytest.mark.slow
def test_lightning_val_loss_is_lightnings_own_at_each_validation(lightning_run: Run) -> None:
    lines = [line.split() for line in lightning_run.stdout.splitlines() if line.startswith("val_loss ")]
    printed = {int(step): float(value) for _, step, value in lines}
    assert sorted(printed) == EVAL_STEPS  # the job's own record; the sanity check before step 0 is left out
    assert lightning_run.val_loss() == pytest.approx(printed, abs=1e-5)


@pytest.mark.slow
def test_lightning_validation_steps_are_marked(lightning_run: Run) -> None:
    _assert_evaluations_marked(lightning_run, also=(0,))  # step 0: the sanity check ran before it


@pytest.mark.slow
def test_lightning_trace_module_tree_and_hparams(lightning_run: Run) -> None:
    _assert_trace_and_tree(lightning_run, "TinyClassifier")
    config = lightning_run.manifest.config
    hparams = {"hidden": 16, "lr": 0.05, "classes": 3,  # the module's
               "batch_size": 16, "train_size": 160}  # the datamodule's
    assert {k: config.get(k) for k in hparams} == hparams
    assert config["lightning_trainer"]["max_steps"] == 30
    assert config["lightning_trainer"]["val_check_interval"] == 10


@pytest.mark.slow
def test_lightning_csv_logger_still_writes_its_metrics(lightning_run: Run) -> None:
    files = list((lightning_run.out / "lightning").glob("version_*/metrics.csv"))
    assert len(files) == 1
    with open(files[0], newline="") as f:
        rows = list(csv.DictReader(f))
    val = {int(r["step"]): float(r["val_loss"]) for r in rows if r.get("val_loss")}
    train = {int(r["step"]): float(r["train_loss"]) for r in rows if r.get("train_loss")}
    assert len(val) == len(EVAL_STEPS) and train
    # A training row's "step" is the optimizer steps done before that batch: the agent's step number.
    agent_loss = {r["step"]: r["loss"] for r in lightning_run.steps}
    for step, loss in train.items():
        assert agent_loss[step] == pytest.approx(loss, rel=1e-6)
    # A validation row's "step" is one less than the agent's: the validation runs after that step.
    assert val == pytest.approx({s - 1: v for s, v in lightning_run.val_loss().items()}, abs=1e-6)


# -- Hugging Face Trainer ---------------------------------------------------------------------

def _history(run: Run) -> list[dict[str, Any]]:
    return json.loads((run.out / "log_history.json").read_text())


@pytest.mark.slow
def test_hf_trainer_job_gives_steps_loss_and_lr_as_the_trainer_logs_them(hf_run: Run) -> None:
    _assert_training_curves(hf_run)
    assert [r.get("samples") for r in hf_run.steps] == [8] * MAX_STEPS  # step 0 too: model(**batch)
    assert [r.get("tokens") for r in hf_run.steps] == [8 * 16] * MAX_STEPS
    logged = [h for h in _history(hf_run) if "loss" in h and "learning_rate" in h]
    assert [h["step"] for h in logged] == [5, 10, 15, 20, 25, 30]
    by_step = {r["step"]: r for r in hf_run.steps}
    for h in logged:  # the Trainer logs the mean loss since its last log, and the rate of its last step
        window = [by_step[s]["loss"] for s in range(h["step"] - 5, h["step"])]
        assert sum(window) / len(window) == pytest.approx(h["loss"], abs=1e-3)
        assert by_step[h["step"] - 1]["lr"] == pytest.approx(h["learning_rate"], rel=1e-6)


@pytest.mark.slow
def test_hf_val_loss_is_the_trainers_eval_loss_at_each_evaluation(hf_run: Run) -> None:
    evals = {h["step"]: h["eval_loss"] for h in _history(hf_run) if "eval_loss" in h}
    assert sorted(evals) == EVAL_STEPS
    assert hf_run.val_loss() == pytest.approx(evals, abs=1e-6)
    eval_lines = [r for r in hf_run.rows if "val_loss" in r]
    assert not any(k.endswith(("_runtime", "_per_second")) for r in eval_lines for k in r)


@pytest.mark.slow
def test_hf_evaluation_steps_are_marked(hf_run: Run) -> None:
    _assert_evaluations_marked(hf_run)


@pytest.mark.slow
def test_hf_trace_module_tree_and_training_arguments(hf_run: Run) -> None:
    _assert_trace_and_tree(hf_run, "GPT2LMHeadModel")
    config = hf_run.manifest.config
    expected = {"max_steps": 30, "learning_rate": 5e-3, "eval_steps": 10, "logging_steps": 5,
                "per_device_train_batch_size": 8, "eval_strategy": "steps", "lr_scheduler_type": "linear"}
    assert {k: config.get(k) for k in expected} == expected
    assert config["model_config"]["n_layer"] == 1 and config["model_config"]["n_embd"] == 32
    assert all(v == f"<{k.upper()}>" for k, v in config.items() if k.endswith("_token"))  # redacted


# -- the capture's parts, without any framework --------------------------------------------

def test_agent_modules_import_no_framework() -> None:
    import subprocess

    code = ("import sys, profiler_agent.autoinstrument, profiler_agent.activation, profiler_agent.frameworks;"
            "print(sorted(m for m in ('lightning', 'pytorch_lightning', 'transformers', 'accelerate')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT_ROOT,
                         check=True).stdout
    assert out.strip() == "[]"


def test_watcher_patches_a_trainer_module_right_after_it_executes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tsfake_trainer.py").write_text(textwrap.dedent("""
        class Trainer:
            def __init__(self):
                self.callbacks = []
    """))
    seen: list[object] = []
    monkeypatch.setitem(frameworks._PATCHES, "tsfake_trainer", lambda m: seen.append(m.Trainer))
    monkeypatch.syspath_prepend(str(tmp_path))
    frameworks.install_framework_capture()
    try:
        import tsfake_trainer  # type: ignore[import-not-found]

        assert seen == [tsfake_trainer.Trainer]  # patched once, when the class existed
        assert type(tsfake_trainer.__loader__).__name__ != "_PatchingLoader"  # its own loader is back
        assert type(tsfake_trainer.__spec__.loader).__name__ != "_PatchingLoader"
    finally:
        sys.modules.pop("tsfake_trainer", None)
        frameworks._patched.discard("tsfake_trainer")
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, frameworks.FrameworkWatcher)]


def test_lightning_validation_values_are_the_metrics_this_validation_produced() -> None:
    import torch

    train_loss = torch.tensor(0.7)
    before = {"train_loss": train_loss, "val/loss": torch.tensor(0.4)}  # the metrics when validation began
    metrics = {"train_loss": train_loss, "val/loss": torch.tensor(0.5), "val_acc": torch.tensor(0.9),
               "hist": torch.ones(3)}
    values = frameworks.lightning_validation_values(metrics, before)
    assert set(values) == {"val_loss", "val_acc"}  # the only loss produced is named val_loss
    assert float(values["val_loss"]) == pytest.approx(0.5)
    two = frameworks.lightning_validation_values(
        {"val_loss/dataloader_idx_0": 1.0, "val_loss/dataloader_idx_1": 2.0}, {})
    assert two == {"val_loss/dataloader_idx_0": 1.0, "val_loss/dataloader_idx_1": 2.0}


def test_returned_losses_are_averaged_per_sample() -> None:
    import torch

    returned = frameworks.ReturnedLosses()
    assert returned.mean() is None
    returned.add(torch.tensor(1.0), (torch.zeros(4, 2), torch.zeros(4)))
    returned.add({"loss": torch.tensor(4.0), "logits": torch.zeros(2, 3)}, {"x": torch.zeros(2, 5)})
    returned.add({"acc": 0.5}, (torch.zeros(3, 1),))  # no loss returned: not counted
    assert float(returned.mean()) == pytest.approx((1.0 * 4 + 4.0 * 2) / 6)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*LeafSpec.*")  # lightning 2.6 on torch 2.13, at import
def test_lightning_val_loss_from_validation_step_returns_when_not_logged(tmp_path: Path) -> None:
    L = pytest.importorskip("lightning", reason="a test dependency (requirements.txt)")  # noqa: N806
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from profiler_agent.activation import start_session, stop_session
    from profiler_agent.options import AgentOptions
    from profiler_agent.runformat import create_run

    sizes = [5, 5, 2]  # unequal batches: a mean per sample, not per batch
    returned: dict[int, list[tuple[float, int]]] = {}

    class Quiet(L.LightningModule):  # logs nothing; validation_step returns its loss
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 3)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])

        def validation_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])
            if not self.trainer.sanity_checking:
                returned.setdefault(self.global_step, []).append((float(loss), len(batch[1])))
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    g = torch.Generator().manual_seed(0)
    train = TensorDataset(torch.randn(24, 4, generator=g), torch.randint(0, 3, (24,), generator=g))
    val = [(torch.randn(n, 4, generator=g), torch.randint(0, 3, (n,), generator=g)) for n in sizes]
    run_dir, _ = create_run(tmp_path, "quiet")
    session = start_session(run_dir, AgentOptions(profile=False, graph=False))
    try:
        trainer = L.Trainer(max_steps=8, val_check_interval=4, check_val_every_n_epoch=None, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                            accelerator="cpu", devices=1)
        trainer.fit(Quiet(), DataLoader(train, batch_size=4), DataLoader(val, batch_size=None))
    finally:
        stop_session(session)
    rows = read_jsonl(run_dir / layout.METRICS).records
    expected = {step: sum(v * n for v, n in batches) / sum(n for _, n in batches)
                for step, batches in returned.items()}
    assert sorted(expected) == [4, 8]
    assert {r["step"]: r["val_loss"] for r in rows if "val_loss" in r} == pytest.approx(expected, rel=1e-6)


def test_hf_eval_values_name_the_loss_val_loss_and_drop_timings() -> None:
    metrics = {"eval_loss": 2.5, "eval_accuracy": 0.25, "eval_runtime": 0.1, "eval_samples_per_second": 9.0,
               "eval_steps_per_second": 1.0, "epoch": 1.0}
    assert frameworks.hf_eval_values(metrics) == {"val_loss": 2.5, "eval_accuracy": 0.25}


def test_a_failing_capture_is_recorded_and_the_job_goes_on(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from profiler_agent.activation import start_session, stop_session
    from profiler_agent.options import AgentOptions
    from profiler_agent.runformat import create_run

    run_dir, _ = create_run(tmp_path, "broken")
    session = start_session(run_dir, AgentOptions(profile=False, graph=False))
    try:
        def boom(_session: object) -> None:
            raise KeyError("hparams")

        frameworks._with_session("lightning config", boom)  # a callback body: caught
        frameworks._PATCHES["tsfake_no_trainer"] = frameworks._patch_lightning
        try:  # a trainer module of an unknown shape (no Trainer class): caught at patch time
            frameworks._apply("tsfake_no_trainer", type(sys)("tsfake_no_trainer"))
        finally:
            del frameworks._PATCHES["tsfake_no_trainer"]
            frameworks._patched.discard("tsfake_no_trainer")
    finally:
        stop_session(session)
    where = [e["where"] for e in read_jsonl(run_dir / layout.AGENT_ERRORS).records]
    assert where == ["lightning config", "tsfake_no_trainer patch"]
    assert "the job continues" in capsys.readouterr().err
