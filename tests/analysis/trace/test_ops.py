"""Op table against torch's own numbers: a tiny model profiled on CPU inside the test."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.analysis.trace.ops import compute_annotation_table, compute_op_table, step_total_us
from app.data.trace import load_trace

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[float]]]:
    """A 3-step profile (schedule, record_shapes, profile_memory) and torch's key_averages of it."""
    from torch.profiler import ProfilerActivity, profile, schedule
    from torch.utils.data import DataLoader, TensorDataset

    out = tmp_path_factory.mktemp("rec") / "rank0.1.pt.trace.json"
    expected: dict[str, list[float]] = {}

    def on_ready(p: object) -> None:
        p.export_chrome_trace(str(out))  # type: ignore[attr-defined]
        for e in p.key_averages():  # type: ignore[attr-defined]
            expected[e.key] = [e.count, e.self_cpu_time_total, e.cpu_time_total, bool(e.is_user_annotation)]

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = DataLoader(TensorDataset(torch.randn(128, 16), torch.randint(0, 4, (128,))), batch_size=16)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3),
                 record_shapes=True, profile_memory=True, on_trace_ready=on_ready) as prof:
        for i, (x, y) in enumerate(data):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            prof.step()
            if i >= 5:
                break
    return out, expected


pytestmark = pytest.mark.usefixtures("module_trace_cache")  # one trace cache per module (conftest)


def test_calls_self_and_total_match_key_averages(recorded: tuple[Path, dict[str, list[float]]]) -> None:
    """The op table is key_averages() without its user annotations (``is_user_annotation``:
    record_function ranges such as ``Optimizer.step#SGD.step``, and ``ProfilerStep#N``), which
    torch-tb-profiler's operator view leaves out too; the annotation table has them."""
    path, expected = recorded
    trace = load_trace(path)
    ops = compute_op_table([trace]).set_index("name")
    annotations = compute_annotation_table([trace]).set_index("name")
    compared, ranges = 0, set()
    for name, (calls, self_us, total_us, is_annotation) in expected.items():
        if name.startswith("ProfilerStep"):
            continue  # steps are not ops (they are parents in the tree)
        if is_annotation:
            assert name not in ops.index, name
            ranges.add(name)
            row = annotations.loc[name]
        else:
            row = ops.loc[name]
        assert row["calls"] == calls, name
        assert row["self_us"] == pytest.approx(self_us, abs=1.0), name
        assert row["total_us"] == pytest.approx(total_us, abs=1.0), name
        compared += 1
    assert compared >= 30
    assert {"Optimizer.step#SGD.step", "Optimizer.zero_grad#SGD.zero_grad"} <= ranges
    assert any(n.startswith("enumerate(DataLoader)#") for n in ranges)
    assert set(ops.index) == {k for k, v in expected.items() if not v[3]}
    assert set(annotations.index) == ranges


def test_table_is_sorted_and_shares_are_of_step_time(recorded: tuple[Path, dict[str, list[float]]]) -> None:
    trace = load_trace(recorded[0])
    ops = compute_op_table([trace])
    assert list(ops["self_us"]) == sorted(ops["self_us"], reverse=True)
    assert (ops["self_us"] <= ops["total_us"] + 1e-6).all()
    assert (ops["mean_us"] * ops["calls"] - ops["total_us"]).abs().max() < 1e-6
    # share = self time / summed step time; on one thread the ops' self times fit in the steps
    # (how much of a step they cover depends on the Python time between ops, i.e. on load)
    steps = step_total_us(trace)
    assert steps > 0 and ops["share"].to_numpy() == pytest.approx(ops["self_us"].to_numpy() / steps)
    assert 0 < ops["share"].sum() <= 1.0 + 1e-9
    assert (ops["device_self_us"] == 0).all()  # CPU only


def test_group_by_shape_splits_calls(recorded: tuple[Path, dict[str, list[float]]]) -> None:
    trace = load_trace(recorded[0])
    by_name = compute_op_table([trace]).set_index("name")
    by_shape = compute_op_table([trace], group_by="shape")
    assert "input_shapes" in by_shape.columns
    sums = by_shape.groupby("name")["calls"].sum()
    assert (sums == by_name.loc[sums.index, "calls"]).all()
    addmm = by_shape[by_shape["name"] == "aten::addmm"]
    assert len(addmm) == 2 and all(s.startswith("[[") for s in addmm["input_shapes"])
    with pytest.raises(ValueError, match="group_by"):
        compute_op_table([trace], group_by="stack")


SHARED = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "traces"


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present")
def test_gpu_trace_device_time_goes_to_launching_ops() -> None:
    trace = load_trace(SHARED / "nccl_distributed" / "nccl_data.json.gz")
    ops = compute_op_table([trace]).set_index("name")
    kernels = trace.events[trace.events["cat"] == "kernel"]["dur_us"].sum()
    attributed = ops["device_self_us"].sum()
    assert ops.loc["aten::mm", "device_self_us"] > 0
    assert ops.loc["cudaLaunchKernel", "device_self_us"] == 0
    assert 0.9 * kernels < attributed  # kernels + copies, nearly all linked to an op
    # NCCL kernels belong to record_param_comms (the runtime call carries its External id), not to
    # the nccl:* annotation nested inside it; torch-tb-profiler reports 46,876.49 µs too.
    assert ops.loc["record_param_comms", "device_self_us"] == pytest.approx(46876.49, abs=0.1)


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present")
@pytest.mark.parametrize("name", ["nccl_distributed/nccl_data.json.gz", "gpu_before_after/control.json.gz",
                                  "gpu_before_after/test.json.gz", "two_ranks/sampled_rank-0.json.gz"])
def test_gpu_trace_shares_stay_below_the_steps(name: str) -> None:
    """User annotations whose work runs on another thread (``## backward ##``) were rows with
    their waiting as self time: the shares summed to 104-140% of the steps on these traces."""
    trace = load_trace(SHARED / name)
    ops = compute_op_table([trace])
    assert ops["share"].sum() < 1.0
    assert not ops["name"].isin(["## forward ##", "## backward ##", "## optimizer ##"]).any()
    assert (ops["category"] != "user_annotation").all() or ops.loc[
        ops["category"] == "user_annotation", "name"].str.startswith(("nccl:", "gloo:")).all()
    annotations = compute_annotation_table([trace])
    assert "## backward ##" in set(annotations["name"])
    assert not set(annotations["name"]) & set(ops["name"])
    for g in ("shape", "module"):
        assert not compute_op_table([trace], group_by=g)["name"].str.startswith("## ").any(), g


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present")
def test_collectives_recorded_as_annotations_stay_ops() -> None:
    ops = compute_op_table([load_trace(SHARED / "nccl_distributed" / "nccl_data.json.gz")]).set_index("name")
    for name in ("nccl:all_reduce", "nccl:broadcast"):
        assert ops.loc[name, "category"] == "user_annotation" and ops.loc[name, "calls"] > 0
    gloo = compute_op_table([load_trace(SHARED / "cpu_only" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")])
    assert "gloo:all_reduce" in set(gloo["name"])


def test_ops_are_cut_to_the_profiled_steps(tmp_path: Path) -> None:
    """The profiler stops inside the last step's enclosing ranges (the agent's step hook runs in
    ``Optimizer.step#…``): such a range must not count the stop and export as its own time, and
    ops after the last step are not part of the steps' table."""
    def x(name: str, ts: float, dur: float, cat: str = "cpu_op") -> dict:
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}

    events = [x("ProfilerStep#1", 0, 100, "user_annotation"), x("ProfilerStep#2", 100, 100, "user_annotation"),
              x("aten::mm", 10, 50), x("Optimizer.step#SGD.step", 190, 710, "user_annotation"),
              x("aten::add_", 195, 3), x("aten::mul", 250, 10)]
    path = tmp_path / "cut.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = load_trace(path)
    ops = compute_op_table([trace]).set_index("name")
    assert set(ops.index) == {"aten::mm", "aten::add_"}  # aten::mul ran after the last step
    assert ops.loc["aten::add_", "self_us"] == pytest.approx(3) and ops.loc["aten::mm", "self_us"] == pytest.approx(50)
    ranges = compute_annotation_table([trace]).set_index("name")
    assert ranges.loc["Optimizer.step#SGD.step", "total_us"] == pytest.approx(10)  # 190-200, not 710
    assert ranges.loc["Optimizer.step#SGD.step", "self_us"] == pytest.approx(7)
