"""A two-rank DDP job (torchrun, gloo on CPU) under `torchscope run`: one run, per-rank files."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from profiler_agent.runformat import RunStatus, layout, read_jsonl, read_manifest
from tests.conftest import DDP_STEPS, torchrun_path

from .helpers import only_run, torchscope

DDP_JOB = Path(__file__).with_name("ddp_job.py")


@pytest.mark.slow
def test_torchrun_ranks_write_into_one_run(ddp_store: tuple[Path, Path]) -> None:
    _, run_dir = ddp_store  # 4 ranks, DDP_STEPS steps, --lr 0.2, one rank slowed (tests/conftest.py)
    m = read_manifest(run_dir)
    assert m.status is RunStatus.FINISHED and m.world_size == 4
    assert m.config["lr"] == 0.2 and "nproc_per_node" not in m.config  # the job's args, not torchrun's
    rows = [r for r in read_jsonl(run_dir / layout.METRICS).records if "loss" in r]
    for rank in range(4):
        assert [r["step"] for r in rows if r["rank"] == rank] == list(range(DDP_STEPS))
    assert all(r["samples"] == 6 for r in rows)
    traces = layout.list_trace_files(run_dir)
    ranks = sorted(layout.rank_from_worker(layout.TRACE_FILE_RE.match(t.name)["worker"]) for t in traces)
    assert ranks == [0, 1, 2, 3]
    with gzip.open(traces[0], "rt") as f:
        doc = json.load(f)
    assert doc.get("distributedInfo", {}).get("world_size") == 4
    assert json.loads((run_dir / layout.MODULE_TREE).read_text())["root"]["type"] == "DistributedDataParallel"


@pytest.mark.slow
def test_torchrun_ranks_stop_at_max_steps(tmp_path: Path) -> None:
    torchrun = torchrun_path()
    proc = torchscope("run", "--root", str(tmp_path), "--name", "ddp", "--group", "ddp", "--max-steps", "3",
                      "--no-profile", "--no-graph", "--", torchrun, "--standalone", "--nproc_per_node", "2",
                      str(DDP_JOB), "--steps", "50")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = only_run(tmp_path)
    m = read_manifest(run_dir)
    assert m.status is RunStatus.FINISHED and m.exit_code == 0
    assert m.extra["stopped"] == "max_steps" and m.extra["group"] == "ddp"
    rows = [r for r in read_jsonl(run_dir / layout.METRICS).records if "step_time_s" in r]
    for rank in (0, 1):
        assert [r["step"] for r in rows if r["rank"] == rank] == [0, 1, 2]
    assert all("cpu_time_s" in r for r in rows)
