"""Ops by module and the module view, on traces recorded by torch.profiler inside the tests.

The agent's module scopes are simulated with global forward hooks opening
``record_function("nn.Module: <label>")`` ranges (the contract in docs/trace-engine.md).
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from app.analysis.trace.modules import compute_module_table, has_module_ranges
from app.analysis.trace.op_modules import PATH_SEP
from app.analysis.trace.ops import compute_op_events, compute_op_table
from app.data.trace import load_trace
from tests.module_scopes import record_module_trace

torch = pytest.importorskip("torch")

ACTIVE = 2  # profiled steps


def _record(out: Path, *, agent_ranges: bool, with_stack: bool = False) -> dict[str, list[float]]:
    return record_module_trace(out, agent_ranges=agent_ranges, with_stack=with_stack, active=ACTIVE)


pytestmark = pytest.mark.usefixtures("module_trace_cache")  # one trace cache per module (conftest)


@pytest.fixture(scope="module")
def agent_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[float]]]:
    out = tmp_path_factory.mktemp("rec") / "agent.pt.trace.json"
    return out, _record(out, agent_ranges=True)


@pytest.fixture(scope="module")
def stack_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rec") / "stack.pt.trace.json"
    _record(out, agent_ranges=False, with_stack=True)
    return out


# -- the op table -------------------------------------------------------------------------------


def test_module_ranges_are_parents_not_rows_and_self_times_match_torch(agent_trace) -> None:  # noqa: ANN001
    path, expected = agent_trace
    trace = load_trace(path)
    assert any(k.startswith("nn.Module: ") for k in expected)  # torch lists the ranges as rows
    tables = {g: compute_op_table([trace], group_by=g) for g in (None, "shape", "module")}
    for g, table in tables.items():
        assert not table["name"].str.startswith(("nn.Module: ", "ProfilerStep#", "Optimizer.")).any(), g
    by_name = tables[None].set_index("name")
    compared = 0
    for name, (calls, self_us, total_us, is_annotation) in expected.items():
        if name.startswith("ProfilerStep") or is_annotation:
            continue  # user annotations (module ranges, Optimizer.step#…) are not op-table rows
        row = by_name.loc[name]
        assert row["calls"] == calls, name
        assert row["self_us"] == pytest.approx(self_us, abs=1.0), name
        assert row["total_us"] == pytest.approx(total_us, abs=1.0), name
        compared += 1
    assert compared >= 30
    # Grouping by module splits rows, never changes a sum.
    by_module = tables["module"]
    sums = by_module.groupby("name")[["calls", "self_us", "total_us"]].sum()
    np.testing.assert_allclose(sums.loc[by_name.index, "self_us"], by_name["self_us"], atol=1e-6)
    assert (sums.loc[by_name.index, "calls"] == by_name["calls"]).all()
    assert by_module.duplicated(["name", "module"]).sum() == 0


def _rows(ev, name):  # noqa: ANN001, ANN202
    return ev[ev["name"].astype(str) == name]


def test_forward_and_backward_ops_get_their_module(agent_trace) -> None:  # noqa: ANN001
    ev = compute_op_events(load_trace(agent_trace[0]).events)
    mod = ev["module"].astype(str)
    phase = ev["phase"].astype(str)
    addmm = _rows(ev, "aten::addmm")
    assert sorted(set(mod[addmm.index])) == ["0.0", "1"] and set(phase[addmm.index]) == {"forward"}
    assert set(mod[_rows(ev, "aten::relu").index]) == {"0.1"}
    assert set(mod[_rows(ev, "aten::_log_softmax").index]) == {"CrossEntropyLoss"}
    # Backward: the autograd op, its wrapper and everything under it take the forward op's module.
    for name, module in (("AddmmBackward0", None), ("ReluBackward0", "0.1"),
                         ("autograd::engine::evaluate_function: ReluBackward0", "0.1"),
                         ("aten::threshold_backward", "0.1"), ("LogSoftmaxBackward0", "CrossEntropyLoss"),
                         ("aten::nll_loss_backward", "CrossEntropyLoss")):
        rows = _rows(ev, name)
        assert len(rows) == ACTIVE or name == "AddmmBackward0", name
        assert set(phase[rows.index]) == {"backward"}, name
        if module is not None:
            assert set(mod[rows.index]) == {module}, name
    addmm_bwd = _rows(ev, "AddmmBackward0")
    assert sorted(mod[addmm_bwd.index].value_counts().items()) == [("0.0", ACTIVE), ("1", ACTIVE)]
    mm = _rows(ev, "aten::mm")  # only in backward here, under AddmmBackward0
    assert set(phase[mm.index]) == {"backward"} and set(mod[mm.index]) == {"0.0", "1"}
    # Gradient accumulation has no sequence number: backward, no module. Optimizer: neither.
    acc = _rows(ev, "torch::autograd::AccumulateGrad")
    assert len(acc) and set(mod[acc.index]) == {""} and set(phase[acc.index]) == {"backward"}
    opt = _rows(ev, "Optimizer.step#SGD.step")
    assert set(mod[opt.index]) == {""} and set(phase[opt.index]) == {""}
    paths = set(ev["module_path"].astype(str))
    assert f"(model){PATH_SEP}0{PATH_SEP}0.0" in paths and "CrossEntropyLoss" in paths


def test_op_table_by_module(agent_trace) -> None:  # noqa: ANN001
    table = compute_op_table([load_trace(agent_trace[0])], group_by="module")
    assert list(table.columns[-1:]) == ["module"]
    assert has_module_ranges(table)
    pairs = set(zip(table["module"], table["name"]))
    assert {("0.0", "aten::addmm"), ("1", "aten::addmm"), ("0.0", "AddmmBackward0"),
            ("0.1", "ReluBackward0"), ("", "aten::add_")} <= pairs  # optimizer ops: outside every module
    assert "Optimizer.step#SGD.step" not in set(table["name"])  # a record_function range, not an op
    assert list(table["self_us"]) == sorted(table["self_us"], reverse=True)


# -- the module view ------------------------------------------------------------------------------


def test_module_table_hierarchy_and_totals(agent_trace) -> None:  # noqa: ANN001
    trace = load_trace(agent_trace[0])
    table = compute_module_table([trace]).set_index("module")
    assert set(table.index) == {"(model)", "0", "0.0", "0.1", "1", "CrossEntropyLoss"}
    assert table.loc["0.0", "parent"] == "0" and table.loc["0.0", "depth"] == 2
    assert table.loc["0", "parent"] == "(model)" and table.loc["(model)", "parent"] == ""
    assert table.loc["CrossEntropyLoss", "parent"] == ""  # outside the model
    assert (table["calls"] == ACTIVE).all()
    np.testing.assert_allclose(table["forward_self_us"] + table["backward_self_us"], table["self_us"])
    assert (table.loc[["0.0", "0.1", "1", "CrossEntropyLoss"], "backward_self_us"] > 0).all()
    # Totals add up the subtree; self times are those of the ops attributed to the module.
    for parent, kids in (("0", ["0.0", "0.1"]), ("(model)", ["0", "1"])):
        assert table.loc[parent, "total_us"] == pytest.approx(
            table.loc[parent, "self_us"] + table.loc[kids, "total_us"].sum())
    ops = compute_op_table([trace], group_by="module")
    per_module = ops.groupby("module")["self_us"].sum()
    np.testing.assert_allclose(table["self_us"], per_module.reindex(table.index, fill_value=0.0))
    assert table.loc[["(model)", "0"], "self_us"].eq(0).all()  # containers: no op of their own
    assert table["self_us"].sum() + per_module[""] == pytest.approx(ops["self_us"].sum())
    # Sorted by total time; shares are of the profiled steps' time.
    assert list(table["total_us"]) == sorted(table["total_us"], reverse=True)
    np.testing.assert_allclose(table["total_share"] / table["total_us"], table["share"].sum() / table["self_us"].sum())
    assert 0 < table.loc["(model)", "total_share"] < 1


def test_python_function_module_events(stack_trace: Path) -> None:
    trace = load_trace(stack_trace)
    table = compute_module_table([trace]).set_index("module")
    assert {"Sequential_0", "Sequential_1", "Linear_0", "Linear_1", "ReLU_0", "CrossEntropyLoss_0"} <= set(table.index)
    assert table.loc["Linear_0", "parent"] == "Sequential_1"  # the inner Sequential holds the first Linear
    assert table.loc["Sequential_1", "parent"] == "Sequential_0"
    assert (table.loc[["Linear_0", "Linear_1"], "backward_self_us"] > 0).all()
    ops = compute_op_table([trace], group_by="module")
    assert not ops["name"].str.startswith("nn.Module").any()
    assert {"Linear_0", "Linear_1"} == set(ops.loc[ops["name"] == "AddmmBackward0", "module"])


def test_agent_ranges_win_over_python_function_events(tmp_path: Path) -> None:
    out = tmp_path / "both.pt.trace.json"
    _record(out, agent_ranges=True, with_stack=True)
    table = compute_module_table([load_trace(out)])
    assert set(table["module"]) == {"(model)", "0", "0.0", "0.1", "1", "CrossEntropyLoss"}


def test_trace_without_module_ranges(tmp_path: Path) -> None:
    out = tmp_path / "plain.pt.trace.json"
    _record(out, agent_ranges=False)
    trace = load_trace(out)
    assert compute_module_table([trace]).empty
    ops = compute_op_table([trace], group_by="module")
    assert not has_module_ranges(ops) and len(ops)


ROCM = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "traces" / "rocm" / \
    "mi250_minitoy_train_ROCm6_2_kineto.json.gz"


@pytest.mark.skipif(not ROCM.is_file(), reason="../shared/data not present")
def test_backward_on_the_autograd_thread(tmp_path: Path) -> None:
    """A real GPU trace: forward on the main thread, backward on the autograd engine's thread
    (``Fwd thread id`` 1 is RecordFunction's number of the main thread, not its OS id). Module
    ranges are added around its forward ops the way the agent records them."""
    doc = json.loads(gzip.decompress(ROCM.read_bytes()))
    main = next(e for e in doc["traceEvents"] if e.get("name") == "aten::linear")
    mse = next(e for e in doc["traceEvents"] if e.get("name") == "aten::mse_loss")
    relu = next(e for e in doc["traceEvents"] if e.get("name") == "aten::relu")

    def rng(label: str, ts: float, end: float) -> dict:
        return {"ph": "X", "cat": "user_annotation", "name": f"nn.Module: {label}", "pid": main["pid"],
                "tid": main["tid"], "ts": ts, "dur": round(end - ts, 3), "args": {}}

    doc["traceEvents"] += [
        rng("(model)", main["ts"] - 2, relu["ts"] + relu["dur"] + 2),
        rng("0", main["ts"] - 1, main["ts"] + main["dur"] + 1),
        rng("1", relu["ts"] - 1, relu["ts"] + relu["dur"] + 1),
        rng("MSELoss", mse["ts"] - 1, mse["ts"] + mse["dur"] + 1),
    ]
    path = tmp_path / "rocm_modules.json"
    path.write_text(json.dumps(doc))
    ev = compute_op_events(load_trace(path).events)
    mod, phase = ev["module"].astype(str), ev["phase"].astype(str)
    backward_tid = {str(t) for t in ev.loc[ev["name"].astype(str) == "MseLossBackward0", "tid"]}
    assert backward_tid and str(main["tid"]) not in backward_tid
    for name, module in (("MseLossBackward0", "MSELoss"), ("ReluBackward0", "1"), ("AddmmBackward0", "0"),
                         ("TBackward0", "0"), ("aten::mm", "0"), ("aten::mse_loss_backward", "MSELoss")):
        rows = ev["name"].astype(str) == name
        assert set(mod[rows]) == {module}, name
        assert set(phase[rows]) == {"backward"}, name
    # aten::to before the first Linear carries the same sequence number as its TBackward0 node;
    # the node belongs to the later op that created it (aten::t, in module 0).
    to = ev["name"].astype(str) == "aten::to"
    assert set(mod[to]) == {""}
    table = compute_module_table([load_trace(path)]).set_index("module")
    assert table.loc["0", "parent"] == "(model)" and table.loc["0", "backward_self_us"] > 0
    assert table.loc["(model)", "device_total_us"] > 0  # kernels of the ops in its submodules


NCCL = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "traces" / "nccl_distributed" / \
    "nccl_data.json.gz"


@pytest.mark.skipif(not NCCL.is_file(), reason="../shared/data not present")
def test_every_backward_op_of_a_gpu_trace_finds_the_forward_op_that_created_it() -> None:
    """On a real GPU trace (backward on the autograd thread), the forward op found for each
    autograd op by sequence number is the one its node is named after (AddmmBackward0 ← addmm)."""
    from app.analysis.trace import op_modules
    from app.analysis.trace.categories import cat_in
    from app.analysis.trace.ops import HOST_CATS

    ev = load_trace(NCCL).events
    host = np.flatnonzero(cat_in(ev, HOST_CATS))
    seq = ev["sequence"].to_numpy(dtype=np.int64, na_value=-1)
    ftid = ev["fwd_tid"].to_numpy(dtype=np.int64, na_value=0)
    fwd = host[(seq[host] >= 0) & (ftid[host] <= 0)]
    roots = host[(seq[host] >= 0) & (ftid[host] >= 1)]
    keys = op_modules._thread_keys(ev)
    assert len(set(keys[fwd])) == 1 and set(keys[fwd]) != set(keys[roots])  # two threads
    found = op_modules._backward_labels(ev, keys, fwd, np.arange(len(fwd)), roots)
    assert (found >= 0).all() and len(found) > 1000
    names = ev["name"].astype(str).to_numpy()
    pairs = {(names[r].split(": ")[-1], names[fwd[f]]) for r, f in zip(roots, found)}
    assert {("AddmmBackward0", "aten::addmm"), ("LogSoftmaxBackward0", "aten::_log_softmax"),
            ("NegBackward0", "aten::neg")} <= pairs
    # Nodes named after an aten op (MulBackward0, MmBackward0, …) match that op, up to underscores.
    import re

    named = [(node, op) for node, op in pairs if re.fullmatch(r"[A-Za-z]+Backward\d+", node) and op.startswith("aten::")]
    same = [1 for node, op in named if op[6:].replace("_", "").lower() in node.lower()]
    assert len(named) >= 10 and len(same) >= 0.8 * len(named), sorted(named)
