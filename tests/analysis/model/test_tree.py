"""Tests of app.analysis.model.tree (and the graph charts) on trees written by the agent's own code."""
from __future__ import annotations

import base64
import json

import pandas as pd
import pytest
import torch

from app.analysis.model.tree import (
    MODULE_COLUMNS,
    PARTITION_COLUMNS,
    ROOT_LABEL,
    compute_graph_size,
    compute_module_partition,
    compute_module_table,
    svg_size_pt,
)
from app.charts.graph import svg_graph_chart
from app.errors import AnalysisError
from profiler_agent.graph import describe_module_tree, make_backward_dot, render_svg


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.norm = torch.nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.norm(self.conv(x))) + x


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), Block(), Block(), torch.nn.Flatten(),
                               torch.nn.Linear(4 * 8 * 8, 10))


@pytest.fixture(scope="module")
def tree() -> dict:
    model = _model()
    shapes = {id(model[0]): (2, 4, 8, 8), id(model[4]): (2, 10)}
    return describe_module_tree(model, shapes)


def test_table_rows_in_depth_first_order_with_counts(tree: dict) -> None:
    t = compute_module_table(tree)
    assert list(t.columns) == MODULE_COLUMNS
    assert t["path"].tolist() == [ROOT_LABEL, "0", "1", "1.conv", "1.norm", "2", "2.conv", "2.norm", "3", "4"]
    assert t["parent"].tolist()[:5] == ["", ROOT_LABEL, ROOT_LABEL, "1", "1"]
    assert t["depth"].tolist() == [0, 1, 1, 2, 2, 1, 2, 2, 1, 1]
    total = sum(p.numel() for p in _model().parameters())
    root = t.iloc[0]
    assert root["params"] == total and root["param_share"] == 1.0
    block = t.set_index("path").loc["1"]
    assert block["params"] == (4 * 4 * 9 + 4) + 2 * 4 and block["own_params"] == 0
    assert t.set_index("path").loc["4", "flops"] == 2 * 2 * 10 * 256
    assert t.set_index("path").loc["0", "output_shape"] == "2×4×8×8"
    assert t.set_index("path").loc["1.conv", "module"].endswith("conv")
    assert t.set_index("path").loc["1.conv", "module"].startswith("\u2003\u2003")
    # Children's params add up to the parent's (what the icicle's "total" mode needs).
    for path, group in t.groupby("parent"):
        if path:
            parent = t.set_index("path").loc[path]
            assert group["params"].sum() + parent["own_params"] == parent["params"]


def test_max_depth_and_bad_documents(tree: dict) -> None:
    assert compute_module_table(tree, max_depth=1)["depth"].max() == 1
    assert len(compute_module_table(tree, max_depth=0)) == 1
    with pytest.raises(AnalysisError, match="'root'"):
        compute_module_table({"modules": []})
    with pytest.raises(AnalysisError, match="format 9"):
        compute_module_table({**tree, "format": 9})
    with pytest.raises(AnalysisError, match="not an object"):
        compute_module_table({"root": {"name": "", "children": [3]}})


def test_graph_size_and_svg_of_a_real_torchviz_graph() -> None:
    model = _model()
    loss = model(torch.randn(2, 3, 8, 8)).sum()
    dot = make_backward_dot(loss, dict(model.named_parameters()))
    size = compute_graph_size(dot)
    params = len(list(model.parameters()))
    assert size.nodes > 2 * params  # each parameter has a node and an AccumulateGrad node
    assert size.edges >= size.nodes - 1
    assert compute_graph_size('digraph {\n node [shape=box]\n "a b" [label=x]\n c [label=y]\n "a b" -> c\n}') \
        .nodes == 2
    svg = render_svg(dot)
    if svg is None:
        pytest.skip("graphviz dot not installed")
    w, h = svg_size_pt(svg.decode())
    assert w > 0 and h > 0
    assert svg_size_pt('<svg width="300px" height="150px">') == (225.0, 112.5)
    assert svg_size_pt("<svg viewBox='0 0 1 1'>") is None
    spec = svg_graph_chart(svg.decode(), w, h)
    uri = spec["mark"]["url"]
    assert base64.b64decode(uri.removeprefix("data:image/svg+xml;base64,")) == svg
    assert spec["data"]["values"] == [{"x": 0.0, "x2": w, "y": 0.0, "y2": h}]


def _hand_tree(**values: list[int]) -> pd.DataFrame:
    """(model) → a (→ a.x, a.y), b, c: a module table as compute_module_table writes it."""
    return pd.DataFrame({"path": [ROOT_LABEL, "a", "a.x", "a.y", "b", "c"],
                         "parent": ["", ROOT_LABEL, "a", "a", ROOT_LABEL, ROOT_LABEL],
                         "depth": [0, 1, 2, 2, 1, 1], "type": ["Net", "Block", "Linear", "ReLU", "Linear", "Dropout"],
                         "params": [100, 60, 30, 0, 40, 0], "flops": [0] * 6} | values)


def _spans(part: pd.DataFrame) -> dict[str, tuple[float, float]]:
    return {p: (a, b) for p, a, b in zip(part["path"], part["x0"], part["x1"])}


def test_partition_spans_follow_each_parents_value() -> None:
    part = compute_module_partition(_hand_tree())
    assert list(part.columns) == PARTITION_COLUMNS
    spans = _spans(part)
    assert spans[ROOT_LABEL] == (0.0, 1.0)
    assert spans["a"] == pytest.approx((0.0, 0.6)) and spans["b"] == pytest.approx((0.6, 1.0))
    # a's 30 of its 60 are its own: its children fill half its span, the rest is left empty
    assert spans["a.x"] == pytest.approx((0.0, 0.3))
    assert spans["a.y"][0] == spans["a.y"][1] and spans["c"][0] == spans["c"][1]  # 0 parameters: no width
    assert part["share"].tolist() == pytest.approx([1.0, 0.6, 0.3, 0.0, 0.4, 0.0])
    assert part["depth"].tolist() == [0, 1, 2, 2, 1, 1]
    assert part["branch"].tolist() == [ROOT_LABEL, "a", "a", "a", "b", "c"]


def test_partition_keeps_children_inside_their_parent() -> None:
    # children adding up to more than the parent (an edited or inconsistent tree): squeezed in
    part = compute_module_partition(_hand_tree(params=[100, 10, 30, 10, 40, 0]))
    spans = _spans(part)
    assert spans["a"] == pytest.approx((0.0, 0.4)) and spans["b"] == pytest.approx((0.4, 0.8))
    assert spans["a.x"] == pytest.approx((0.0, 0.3)) and spans["a.y"] == pytest.approx((0.3, 0.4))
    assert part.loc[part["path"] == "a", "share"].item() == pytest.approx(0.1)  # its real share, not its width
    # everything at 0 (a model without FLOPs), negative or missing values: empty spans, no error
    for flops in ([0] * 6, [-5, 3, None, "x", float("nan"), 0]):
        part = compute_module_partition(_hand_tree(flops=flops), value="flops")
        assert all(0.0 <= a <= b <= 1.0 for a, b in _spans(part).values())
        assert part["share"].between(0, 1).all()
    with pytest.raises(ValueError, match="'params' or 'flops'"):
        compute_module_partition(_hand_tree(), value="bytes")


def test_partition_of_a_real_tree_cut_to_a_depth(tree: dict) -> None:
    table = compute_module_table(tree)
    part = compute_module_partition(table)
    spans = _spans(part)
    total = table["params"].iloc[0]
    for path, params in zip(table["path"], table["params"]):
        if path in ("0", "1", "2", "3", "4"):  # the model's children: their width is their share
            assert spans[path][1] - spans[path][0] == pytest.approx(params / total)
    assert spans["1.conv"][0] == spans["1"][0] and spans["1.norm"][1] == pytest.approx(spans["1"][1])
    assert spans["4"][1] == pytest.approx(1.0)
    shallow = compute_module_partition(table[table["depth"] <= 1], value="flops")
    assert set(shallow["path"]) == {ROOT_LABEL, "0", "1", "2", "3", "4"}
    assert json.dumps(shallow.to_dict("records"))  # plain numbers, as a chart's rows need
