"""A job that logs only through SummaryWriter: its tags land in metrics.jsonl (with tb_step), its
tfevents are written as before, the Run page lists them, and importing its log folder gives the same
curves."""
from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from profiler_agent import tensorboard as agent_tb
from profiler_agent.activation import start_session, stop_session
from profiler_agent.options import AgentOptions
from profiler_agent.runformat import create_run, layout, list_runs, read_jsonl
from profiler_agent.runformat.metric_keys import TB_STEP_KEY
from tests.agent.helpers import PROJECT_ROOT, env, only_run, torchscope

JOB = Path(__file__).with_name("tb_job.py")
TAGS = ("Loss/train", "Accuracy/val", "Eval/acc", "Eval/err")


@pytest.fixture(scope="module")
def tb_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[float]]:
    """(run folder, the job's log dir, the losses the job printed) of one wrapped run of tb_job.py."""
    base = tmp_path_factory.mktemp("tb")
    logs, root = base / "logs", base / "runs"
    proc = torchscope("run", "--root", str(root), "--no-profile", "--no-graph", "--",
                      sys.executable, str(JOB), str(logs / "exp"), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = [float(line.split()[-1]) for line in proc.stdout.splitlines() if line.startswith("step ")]
    return only_run(root), logs, printed


@pytest.fixture(scope="module")
def imported(tb_job, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: ANN001
    """The run ``torchscope import`` makes of the job's log folder."""
    _, logs, _ = tb_job
    proc = torchscope("import", str(logs), "--root", str(tmp_path_factory.mktemp("imported")), "--json",
                      timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # nothing skipped: add_scalars folders are part of the run
    (created,) = json.loads(proc.stdout)["runs"]
    assert created["name"] == "exp"
    return Path(created["path"])


def _series(rows: list[dict[str, object]], key: str) -> list[tuple[int, float]]:
    return [(int(r[TB_STEP_KEY]), float(r[key])) for r in rows if key in r]  # type: ignore[arg-type]


def test_tags_land_in_metrics_with_the_writers_step(tb_job) -> None:  # noqa: ANN001
    run_dir, _, printed = tb_job
    rows = read_jsonl(run_dir / layout.METRICS).records
    assert not (run_dir / layout.AGENT_ERRORS).exists()
    train = _series(rows, "Loss/train")
    assert [s for s, _ in train] == list(range(9))
    assert [v for _, v in train] == pytest.approx(printed, abs=1e-6)  # the job's own numbers
    assert [s for s, _ in _series(rows, "Accuracy/val")] == [2, 5, 8]
    for r in rows:
        if "Eval/acc" in r:  # add_scalars: one line, main_tag/tag keys
            assert r["Eval/acc"] + r["Eval/err"] == pytest.approx(1.0)
    # Logged right after optimizer step k: the agent's step is the iteration in progress, k + 1.
    assert all(r["step"] == r[TB_STEP_KEY] + 1 for r in rows if "Loss/train" in r)
    # The agent's own loss is untouched, and equals what the script logged.
    losses = [r["loss"] for r in rows if "loss" in r]
    assert losses == pytest.approx(printed, abs=1e-6)


def test_tfevents_are_written_unchanged(tb_job) -> None:  # noqa: ANN001
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, logs, printed = tb_job
    acc = EventAccumulator(str(logs / "exp")).Reload()
    assert {"Loss/train", "Accuracy/val"} <= set(acc.Tags()["scalars"])
    assert [e.step for e in acc.Scalars("Loss/train")] == list(range(9))
    assert [e.value for e in acc.Scalars("Loss/train")] == pytest.approx(printed, rel=1e-6)
    assert {p.name for p in (logs / "exp").iterdir() if p.is_dir()} == {"Eval_acc", "Eval_err"}


def test_import_of_the_log_folder_gives_the_same_curves(tb_job, imported: Path) -> None:  # noqa: ANN001
    run_dir, _, _ = tb_job
    recorded = read_jsonl(run_dir / layout.METRICS).records
    lines = read_jsonl(imported / layout.METRICS).records
    for tag in TAGS:
        # tfevents hold float32: the same curve to float32 precision
        steps, values = zip(*_series(lines, tag))
        assert (steps, values) == (tuple(s for s, _ in _series(recorded, tag)),
                                   pytest.approx(tuple(v for _, v in _series(recorded, tag)), rel=1e-6)), tag
    assert all(r["step"] == r[TB_STEP_KEY] for r in lines)  # an import's step is the writer's


@pytest.mark.parametrize("which", ["recorded", "imported"])
def test_run_page_lists_the_tags(which: str, tb_job, imported: Path, monkeypatch) -> None:  # noqa: ANN001
    from tests.app.helpers import assert_clean, open_app, show_tab

    run_dir = tb_job[0] if which == "recorded" else imported
    at = open_app(monkeypatch, run_dir.parent, run=run_dir.name)
    assert_clean(at)
    metrics_tab = show_tab(at, "Metrics")  # only the open tab is built
    (curves,) = [m for m in metrics_tab.multiselect if m.label == "Curves"]
    assert set(TAGS) <= set(curves.options)
    assert TB_STEP_KEY not in curves.options  # a coordinate, not a curve
    curves.set_value(["Loss/train", "Accuracy/val"]).run()
    assert_clean(at)
    (metrics_tab,) = [t for t in at.tabs if t.label == "Metrics"]
    charts = metrics_tab.get("vega_lite_chart")  # the Metrics tab draws Vega-Lite (no plotly.js to load)
    titles = [json.loads(c.proto.spec)["title"]["text"] for c in charts]
    assert titles == ["Loss/train", "Accuracy/val"]


# -- the hook on its own ---------------------------------------------------------------------


class _Writer:
    """Stands in for SummaryWriter: records what reached the original methods."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []

    def add_scalar(self, tag, scalar_value, global_step=None, walltime=None,  # noqa: ANN001, ANN201
                   new_style=False):  # noqa: ANN001
        self.calls.append(("add_scalar", tag, scalar_value, global_step, walltime, new_style))
        return "original"

    def add_scalars(self, main_tag, tag_scalar_dict, global_step=None, walltime=None):  # noqa: ANN001, ANN201
        self.calls.append(("add_scalars", main_tag, dict(tag_scalar_dict), global_step, walltime))


@pytest.fixture
def patched(tmp_path: Path):  # noqa: ANN201
    module = types.SimpleNamespace(SummaryWriter=type("SummaryWriter", (_Writer,), {}))
    assert agent_tb.patch_summary_writer(module)  # type: ignore[arg-type]
    run_dir, _ = create_run(tmp_path, "hook")
    session = start_session(run_dir, AgentOptions(profile=False, graph=False))
    try:
        yield module.SummaryWriter(), session, run_dir
    finally:
        stop_session(session)


def test_hook_calls_the_original_and_reads_no_tensor(patched, monkeypatch) -> None:  # noqa: ANN001
    writer, session, _ = patched
    logged: list[dict[str, object]] = []
    monkeypatch.setattr(session, "log", logged.append)
    reads = []
    for name in ("item", "cpu", "tolist", "__float__", "numpy"):
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name,
                            lambda self, *a, _o=original, _n=name, **k: reads.append(_n) or _o(self, *a, **k))
    value = torch.tensor(0.25)
    assert writer.add_scalar("Loss/train", value, 7, walltime=1.0, new_style=True) == "original"
    writer.add_scalars("Eval", {"acc": value, "err": 0.75}, global_step=7)
    assert reads == []  # nothing read on the hook path: the metrics log reads tensors in its batch
    value.fill_(9.0)  # the job may reuse its tensor: the logged value is a copy
    assert writer.calls[0] == ("add_scalar", "Loss/train", value, 7, 1.0, True)
    assert writer.calls[1][:2] == ("add_scalars", "Eval")
    assert isinstance(logged[0]["Loss/train"], torch.Tensor) and float(logged[0]["Loss/train"]) == 0.25
    assert logged[0][TB_STEP_KEY] == 7
    assert set(logged[1]) == {"Eval/acc", "Eval/err", TB_STEP_KEY}


def test_hook_failure_never_reaches_the_job(patched, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    writer, session, run_dir = patched

    def broken(values: object) -> None:
        raise RuntimeError("disk gone")

    monkeypatch.setattr(session, "log", broken)
    assert writer.add_scalar("Loss/train", 1.0, 0) == "original"
    assert writer.calls  # the tfevents side still ran
    errors = read_jsonl(run_dir / layout.AGENT_ERRORS).records
    assert errors[0]["where"] == "tensorboard scalars" and "disk gone" in errors[0]["error"]


def test_agent_keys_are_kept_and_odd_values_skipped(patched, monkeypatch) -> None:  # noqa: ANN001
    import numpy as np

    writer, session, _ = patched
    logged: list[dict[str, object]] = []
    monkeypatch.setattr(session, "log", logged.append)
    writer.add_scalar("loss", 0.5, 3)
    writer.add_scalar("step", np.float32(2.0))
    writer.add_scalar("blob", "caffe2_blob_name", 1)
    writer.add_scalar("vector", torch.ones(3), 1)
    assert logged == [{"tb/loss": 0.5, TB_STEP_KEY: 3}, {"tb/step": 2.0}]


def test_watching_imports_no_tensorboard_until_the_job_does() -> None:
    code = (
        "import sys, torch\n"
        "from profiler_agent.tensorboard import watch_tensorboard\n"
        "watch_tensorboard()\n"
        "assert 'tensorboard' not in sys.modules and 'torch.utils.tensorboard' not in sys.modules\n"
        "from torch.utils.tensorboard import SummaryWriter\n"
        "assert SummaryWriter.add_scalar.__torchscope__ and SummaryWriter.add_scalars.__torchscope__\n"
        "import torch.utils.tensorboard.writer as w\n"
        "loaders = {type(w.__spec__.loader).__name__, type(w.__loader__).__name__}\n"
        "assert loaders == {'SourceFileLoader'}, loaders  # the module keeps its own loader\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(),
                         cwd=PROJECT_ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


def test_a_writer_loaded_before_the_session_is_patched_at_once(tmp_path: Path) -> None:
    import torch.utils.tensorboard.writer as writer_module

    run_dir, _ = create_run(tmp_path, "late")
    session = start_session(run_dir, AgentOptions(profile=False, graph=False))
    try:
        assert getattr(writer_module.SummaryWriter.add_scalar, "__torchscope__", False)
        with writer_module.SummaryWriter(str(tmp_path / "logs")) as w:
            w.add_scalar("Loss/train", 0.5, 3)
        session.metrics.flush()
        (line,) = read_jsonl(run_dir / layout.METRICS).records
        assert line["Loss/train"] == 0.5 and line[TB_STEP_KEY] == 3
    finally:
        stop_session(session)


def test_no_run_no_lines(tmp_path: Path) -> None:
    module = types.SimpleNamespace(SummaryWriter=type("SummaryWriter", (_Writer,), {}))
    agent_tb.patch_summary_writer(module)  # type: ignore[arg-type]
    assert module.SummaryWriter().add_scalar("x", 1.0) == "original"  # no session: the original only
    assert not list_runs(tmp_path).runs
