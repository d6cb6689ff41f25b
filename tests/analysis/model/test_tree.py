"""Tests of app.analysis.model.tree (and the graph figures) on trees written by the agent's own code."""
from __future__ import annotations

import pytest
import torch

from app.analysis.model.tree import (
    MODULE_COLUMNS,
    ROOT_LABEL,
    compute_graph_size,
    compute_module_table,
    svg_size_pt,
)
from app.charts.graph import make_module_icicle_figure, make_svg_figure
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
    fig = make_svg_figure(svg.decode(), w, h)
    assert fig.layout.images[0].source.startswith("data:image/svg+xml;base64,")
    assert fig.layout.yaxis.scaleanchor == "x"


def test_icicle_by_params_and_flops(tree: dict) -> None:
    table = compute_module_table(tree)
    fig = make_module_icicle_figure(table)
    icicle = fig.data[0]
    assert list(icicle.ids) == table["path"].tolist() and icicle.branchvalues == "total"
    assert list(make_module_icicle_figure(table, value="flops").data[0].values) == table["flops"].tolist()
    with pytest.raises(ValueError):
        make_module_icicle_figure(table, value="bytes")
