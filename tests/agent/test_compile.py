"""torch.compile under the agent: compile steps marked and left out of steady state, graph breaks
and recompiles counted in run.json and shown by ``torchscope diff``."""
from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from app.analysis.run.step_time import DropReason, steady_step_time
from profiler_agent.compilation import COMPILE_KEY, COMPILE_S_KEY, CompileWatch
from profiler_agent.runformat import layout, read_jsonl, read_manifest
from tests.agent.helpers import PROJECT_ROOT, env, only_run, torchscope

JOB = Path(__file__).with_name("jobs") / "compile_job.py"
STEPS = 16
RECOMPILE_STEP = 10  # compile_job.py grows the batch here


@pytest.fixture(scope="module")
def compiled_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run folder of one wrapped compile_job.py (backend "eager", a graph break, a recompile)."""
    root = tmp_path_factory.mktemp("compile") / "runs"
    proc = torchscope("run", "--root", str(root), "--no-profile", "--no-graph", "--",
                      sys.executable, str(JOB), "--steps", str(STEPS), timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return only_run(root)


def _steps(run_dir: Path) -> list[dict]:
    return [r for r in read_jsonl(run_dir / layout.METRICS).records if "step_time_s" in r]


def test_compile_steps_are_marked(compiled_run: Path) -> None:
    steps = _steps(compiled_run)
    assert len(steps) == STEPS
    marked = {r["step"] for r in steps if r.get(COMPILE_KEY) is True}
    # the first forward compiles; the batch change at RECOMPILE_STEP recompiles
    assert {0, RECOMPILE_STEP} <= marked
    assert not marked & {3, 4, 5, 6, 7, 8, 9, 12, 13, 14, 15}
    for r in steps:
        if r["step"] in marked:
            assert 0 < r[COMPILE_S_KEY] <= r["step_time_s"]
        else:
            assert COMPILE_S_KEY not in r


def test_compile_counts_in_manifest(compiled_run: Path) -> None:
    counts = read_manifest(compiled_run).extra["compile"]
    assert counts["graph_breaks"] >= 1  # the .item() in forward
    assert counts["recompiles"] >= 1  # the batch change
    assert counts["frames"] >= 1
    assert counts["compilations"] >= counts["recompiles"] + counts["frames"] - 1
    assert counts["compile_s"] > 0


def test_compile_steps_left_out_of_steady_state(compiled_run: Path) -> None:
    records = read_jsonl(compiled_run / layout.METRICS).records
    st = steady_step_time(records)
    assert st.dropped[RECOMPILE_STEP] == DropReason.COMPILE
    kept = set(st.steps) - set(st.dropped)
    assert not kept & {r["step"] for r in _steps(compiled_run) if r.get(COMPILE_KEY)}
    assert "compile" in st.describe_dropped()


def test_diff_shows_compile_counts(compiled_run: Path) -> None:
    text = torchscope("diff", str(compiled_run), str(compiled_run), timeout=120)
    assert text.returncode == 0, text.stderr[-2000:]
    line = next(x for x in text.stdout.splitlines() if x.startswith("torch.compile:"))
    counts = read_manifest(compiled_run).extra["compile"]
    assert f"baseline {counts['graph_breaks']} graph breaks, {counts['recompiles']} recompiles" in line
    assert "compile (final)" not in text.stdout  # the marks are not compared as metrics
    out = torchscope("diff", "--json", str(compiled_run), str(compiled_run), timeout=120)
    doc = json.loads(out.stdout)
    for side in ("baseline", "candidate"):
        assert doc[side]["compile"]["graph_breaks"] == counts["graph_breaks"]
        assert doc[side]["compile"]["recompiles"] == counts["recompiles"]
        assert doc[side]["steps_compile_excluded"] >= 1


def test_watch_counts_recompiles_and_resets_per_step() -> None:
    watch = CompileWatch()
    assert watch.take_step() == {} and watch.summary() is None
    for compile_id in ("0/0", "1/0", "0/1"):
        watch.on_start(types.SimpleNamespace(compile_id=compile_id))
        watch.on_end(types.SimpleNamespace(compile_id=compile_id))
    step = watch.take_step()
    assert step[COMPILE_KEY] is True and step[COMPILE_S_KEY] >= 0
    assert watch.take_step() == {}
    summary = watch.summary()
    assert summary is not None
    assert (summary["recompiles"], summary["frames"], summary["compilations"]) == (1, 2, 3)


@pytest.mark.slow
def test_a_job_that_does_not_compile_never_loads_dynamo(tmp_path: Path) -> None:
    code = ("import sys; from profiler_agent.compilation import CompileWatch, watch_compilation; "
            "import torch; watch_compilation(CompileWatch()); "
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(),
                         cwd=PROJECT_ROOT, timeout=120)
    assert out.stdout.strip() == "False", out.stderr[-2000:]
