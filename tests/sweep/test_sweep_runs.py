"""Real sweeps of tests/sweep/trial_job.py: every trial a torchscope run (grid, random, Optuna with
pruning, SIGKILL then resume, the sweep view). Small on purpose (2-4 trials of ~0.4 s of CPU);
the issue's full sizes are ``python -m benchmarks.sweeps``."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from app.cli import main
from app.workspace.sweep_state import SWEEP_FIELD, list_sweeps, read_sweep
from app.workspace.sweep_view import load_sweep_view
from profiler_agent import runformat as rf

PROJECT = Path(__file__).resolve().parents[2]
JOB = [sys.executable, str(Path(__file__).with_name("trial_job.py"))]
RUN_ARGS = ["--run-args", "--no-profile --no-graph"]
WAIT_S = 60  # an upper bound for a loaded machine; every wait ends as soon as the thing is there


@pytest.fixture(autouse=True)
def _project_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # The trial job imports profiler_agent.runformat from this tree.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(PROJECT), os.environ.get("PYTHONPATH", "")]))


def _sweep(root: Path, *args: str, job: tuple[str, ...] = ("--epochs", "3")) -> int:
    return main(["sweep", "--root", str(root), *RUN_ARGS, *args, "--", *JOB, "--lr", "{lr}", *job])


def _runs(root: Path) -> dict[str, rf.Manifest]:
    return {m.id: m for _, m in rf.list_runs(root).runs}


def _only_sweep(root: Path) -> Any:
    (state,) = list_sweeps(root)
    return state


def test_grid_sweep_runs_every_point_and_rerunning_it_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    args = ["--grid", "lr=0.3,0.01", "--grid", "batch_size=32,64"]
    job = ("--batch-size", "{batch_size}", "--epochs", "3")
    assert _sweep(root, *args, job=job) == 0
    state = _only_sweep(root)
    assert [t.state for t in state.trials] == ["complete"] * 4 and state.state == "complete"
    runs = _runs(root)
    assert len(runs) == 4
    for t in state.trials:
        m = runs[t.run_id]
        assert m.status is rf.RunStatus.FINISHED and f"sweep:{state.id}" in m.tags
        assert m.extra[SWEEP_FIELD] == {"id": state.id, "trial": t.number, "params": dict(t.params),
                                        "objective_key": "val_loss", "objective": t.objective, "state": "complete"}
    view = load_sweep_view(root, state.id)
    assert view.trials.best is not None and view.trials.best["param.lr"] == 0.3  # the fast learning rate wins
    assert view.importance is None and "grid sweep" in view.importance_note  # never faked
    assert "best trial" in capsys.readouterr().err
    # The same command again: the finished trials are not rerun.
    assert _sweep(root, *args, job=job) == 0
    assert len(_runs(root)) == 4 and "resuming sweep" in capsys.readouterr().err


def test_random_sweep_two_at_a_time_and_a_failing_trial(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    assert _sweep(root, "--random", "3", "--parallel", "2", "--param", "lr=loguniform:1e-3:0.5",
                  "--param", "fail=choice:0,3", "--json", job=("--fail", "{fail}", "--epochs", "2")) in (0, 1)
    out = json.loads(capsys.readouterr().out)
    states = {t["number"]: t for t in out["trials"]}
    assert sorted(states) == [0, 1, 2]
    for t in states.values():
        assert 1e-3 <= t["params"]["lr"] <= 0.5
        assert t["state"] == ("failed" if t["params"]["fail"] == 3 else "complete")
        if t["state"] == "failed":
            assert t["reason"] == "exit code 3" and _runs(root)[t["run_id"]].status is rf.RunStatus.FAILED
    starts = sorted((t["started_at"], t["ended_at"]) for t in states.values())
    assert starts[1][0] < starts[0][1]  # two at a time: the second started before the first ended


@pytest.mark.slow
def test_optuna_sweep_prunes_and_the_view_shows_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("optuna")
    root = tmp_path / "runs"
    # Trial 0 is enqueued at the space's best first-epoch val_loss, and one startup trial lets the
    # median pruner judge the next ones against it: any other point is worse at evaluation 0 and
    # is stopped there, whatever the seed (benchmarks/sweep_pruning.py: 2 of 3 pruned in each of
    # seeds 0-49; without the enqueued trial, 12 of those 50 seeds prune none).
    code = _sweep(root, "--optuna", "3", "--seed", "0", "--prune-startup-trials", "1",
                  "--param", "lr=loguniform:1e-3:3", "--param", "batch_size=choice:16,64",
                  "--enqueue", "lr=0.185,batch_size=16",
                  job=("--batch-size", "{batch_size}", "--epochs", "6", "--epoch-s", "0.1"))
    assert code == 0
    state = _only_sweep(root)
    assert [t.state for t in state.trials] == ["complete", "pruned", "pruned"]
    assert dict(state.trials[0].params) == {"lr": 0.185, "batch_size": 16}
    runs = _runs(root)
    for t in state.trials[1:]:
        assert runs[t.run_id].status is rf.RunStatus.PRUNED and t.reason.startswith("pruned at evaluation 0 ")
        # Its objective is the value the pruner judged, not one logged while the job was being stopped.
        assert t.reason.endswith(f"val_loss={t.objective:.4g})") and t.objective > state.trials[0].objective
    assert main(["ls", "--root", str(root), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    rows = listed["runs"] if isinstance(listed, dict) else listed
    assert "pruned" in {r["status"] for r in rows}
    view = load_sweep_view(root, state.id)
    # One complete trial: Optuna's importance needs two, and the view says so rather than invent one.
    assert view.importance is None and "at least 2 complete trials" in view.importance_note
    # The view: Compare with ?sweep=<id>.
    from streamlit.testing.v1 import AppTest

    from tests.app.helpers import APP, assert_clean, texts

    monkeypatch.setenv(rf.layout.ROOT_ENV, str(root))
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["sweep"] = state.id
    at.switch_page("app_pages/compare.py")
    at.run()
    assert_clean(at)
    best = view.trials.best
    assert best is not None
    assert f"Sweep {state.id}" in texts(at.title)
    assert f"Best trial {best['trial']}" in texts(at.success)
    assert any(best["id"] in str(getattr(e, "proto", "")) for e in at.get("page_link"))
    charts = at.get("plotly_chart")
    assert len(charts) == 3  # parallel coordinates + one scatter per parameter
    # The log-uniform learning rate on log axes: log10 values labelled with the values themselves.
    lr_axis = json.loads(charts[0].proto.spec)["data"][0]["dimensions"][0]
    assert lr_axis["label"] == "lr (log)" and lr_axis["ticktext"] == ["0.001", "0.01", "0.1", "1"]
    assert lr_axis["values"] == pytest.approx([math.log10(t.params["lr"]) for t in state.trials])
    assert json.loads(charts[1].proto.spec)["layout"]["xaxis"]["type"] == "log"
    assert "Parameter importance is not available: Optuna needs at least 2" in texts(at.info)
    at.query_params["sweep"] = "grid-00000000"
    at.run()
    assert "no sweep 'grid-00000000'" in texts(at.error)


@pytest.mark.slow
def test_a_killed_sweep_resumes_without_rerunning_finished_trials(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    cmd = [sys.executable, "-m", "app.cli", "sweep", "--root", str(root), *RUN_ARGS,
           "--grid", "lr=0.02,0.3", "--", *JOB, "--lr", "{lr}", "--epochs", "6", "--epoch-s", "0.1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=PROJECT)
    try:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:  # wait for one trial finished and the next one's run
            states = list_sweeps(root) if root.is_dir() else []
            trials = states[0].trials if states else ()
            if any(t.state == "complete" for t in trials) and any(t.state == "running" and t.run_id for t in trials):
                break
            time.sleep(0.02)
        else:
            pytest.fail(f"the sweep never had a finished and a running trial: {trials}")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    before = read_sweep(root, states[0].id)
    kept = {t.number: t.run_id for t in before.trials if t.state == "complete"}
    cut = next(t for t in before.trials if t.state == "running")
    # The trial's launcher got SIGTERM when the sweep died (PR_SET_PDEATHSIG): its run ends killed.
    deadline = time.monotonic() + WAIT_S
    while rf.read_manifest(root / str(cut.run_id)).status is rf.RunStatus.RUNNING and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rf.read_manifest(root / str(cut.run_id)).status is rf.RunStatus.KILLED
    assert main(["sweep", "--root", str(root), "--resume", before.id]) == 0
    after = read_sweep(root, before.id)
    assert after.state == "complete" and [t.state for t in after.trials] == ["complete"] * 2
    assert all(after.trial(n).run_id == run_id for n, run_id in kept.items())  # type: ignore[union-attr]
    assert after.trial(cut.number).run_id != cut.run_id  # type: ignore[union-attr]
    assert after.extra["interrupted_runs"] == [{"trial": cut.number, "run_id": cut.run_id}]
    assert len(_runs(root)) == 3  # 2 trials + the interrupted one, kept and marked
    assert rf.read_manifest(root / str(cut.run_id)).extra[SWEEP_FIELD]["state"] == "interrupted"
    view = load_sweep_view(root, before.id)
    assert view.trials.best is not None and view.trials.best["param.lr"] == 0.3


def test_missing_optuna_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna raises ImportError
    assert _sweep(tmp_path, "--optuna", "2", "--param", "lr=uniform:0:1") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["torchscope sweep: error: --optuna needs Optuna: pip install 'torchscope[sweep]' (or pip install optuna)"]
    assert _sweep(tmp_path, "--grid", "lr=0.1", "--grid", "seed=1,2") == 2
    assert "'seed' is not used in the command" in capsys.readouterr().err
    assert _sweep(tmp_path, "--grid", "lr=0.1,0.2", "--enqueue", "lr=0.1") == 2
    assert "--enqueue is for --optuna sweeps" in capsys.readouterr().err


def test_importance_comes_from_the_sweeps_optuna_study(tmp_path: Path) -> None:
    optuna = pytest.importorskip("optuna")
    from app.workspace.sweep_state import (
        SweepSpec,
        SweepState,
        Trial,
        study_storage_url,
        sweep_id,
        write_sweep,
    )

    spec = SweepSpec(command=("python", "t.py", "{lr}", "{n}"), method="optuna", trials=6, params=(
        {"name": "lr", "kind": "uniform", "low": 0.0, "high": 1.0, "choices": []},
        {"name": "n", "kind": "int", "low": 1.0, "high": 4.0, "choices": []}))
    sid = sweep_id(spec)
    (tmp_path / ".torchscope" / "sweeps").mkdir(parents=True)
    study = optuna.create_study(study_name=sid, storage=study_storage_url(tmp_path, sid),
                                sampler=optuna.samplers.RandomSampler(seed=1))
    study.optimize(lambda t: (t.suggest_float("lr", 0.0, 1.0) - 0.3) ** 2 + 0.001 * t.suggest_int("n", 1, 4),
                   n_trials=6)
    trials = tuple(Trial(t.number, t.params, state="complete", objective=t.value) for t in study.trials)  # type: ignore[arg-type]
    write_sweep(tmp_path, SweepState(id=sid, spec=spec, created_at=time.time(), trials=trials, state="complete"))
    view = load_sweep_view(tmp_path, sid)
    assert view.importance == pytest.approx(optuna.importance.get_param_importances(study))
    assert max(view.importance, key=view.importance.get) == "lr"  # type: ignore[arg-type]
