"""Tests of app.analysis.model.graph_diff: module-tree and backward-graph structural diffs."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from app.analysis.model.graph_diff import (
    ROOT_PATH,
    count_graph_nodes,
    diff_backward_graphs,
    diff_module_trees,
    flatten_module_tree,
)
from profiler_agent.graph import describe_module_tree, make_backward_dot


class Plain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.act = nn.ReLU()
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act(self.conv(x)).mean((2, 3)))


class Separable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.Conv2d(8, 8, 1))
        self.act = nn.ReLU(inplace=True)
        self.head = nn.Linear(8, 2)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.drop(self.act(self.conv(x)).mean((2, 3))))


def tree(model: nn.Module) -> dict:
    return describe_module_tree(model)


def test_flatten_counts_every_module() -> None:
    flat = flatten_module_tree(tree(Separable()))
    assert flat.iloc[0]["path"] == ROOT_PATH
    assert set(flat["path"]) == {ROOT_PATH, "conv", "conv.0", "conv.1", "act", "head", "drop"}
    assert flat.set_index("path").loc["conv.0", "depth"] == 2


def test_diff_finds_type_config_added_and_param_delta() -> None:
    a, b = tree(Plain()), tree(Separable())
    d = diff_module_trees(a, b).set_index("path")
    pa = sum(p.numel() for p in Plain().parameters())
    pb = sum(p.numel() for p in Separable().parameters())
    assert d.loc[ROOT_PATH, "params_delta"] == pb - pa
    assert d.loc["conv", "change"] == "type"
    assert (d.loc["conv", "baseline_type"], d.loc["conv", "candidate_type"]) == ("Conv2d", "Sequential")
    assert d.loc["conv.0", "change"] == "added" and d.loc["drop", "change"] == "added"
    assert d.loc["act", "change"] == "config"  # ReLU → ReLU(inplace=True)
    assert "head" not in d.index  # unchanged modules are not listed


def test_diff_is_antisymmetric() -> None:
    a, b = tree(Plain()), tree(Separable())
    ab = diff_module_trees(a, b).set_index("path")
    ba = diff_module_trees(b, a).set_index("path")
    assert set(ab.index) == set(ba.index)
    swap = {"added": "removed", "removed": "added"}
    for path in ab.index:
        assert ab.loc[path, "params_delta"] == -ba.loc[path, "params_delta"]
        assert swap.get(ab.loc[path, "change"], ab.loc[path, "change"]) == ba.loc[path, "change"]


def test_same_tree_has_only_the_root_row_and_none_is_empty() -> None:
    d = diff_module_trees(tree(Plain()), tree(Plain()))
    assert list(d["path"]) == [ROOT_PATH] and d.iloc[0]["change"] == "same"
    assert diff_module_trees(None, None).empty
    one_sided = diff_module_trees(None, tree(Plain()))
    assert (one_sided["change"] == "added").all()


def test_backward_graph_node_counts() -> None:
    def dot(model: nn.Module) -> str:
        loss = model(torch.randn(2, 8, 6, 6)).sum()
        return make_backward_dot(loss, dict(model.named_parameters()))

    da, db = dot(Plain()), dot(Separable())
    ca = count_graph_nodes(da)
    assert ca["ConvolutionBackward0"] == 1 and ca["parameter"] >= 4
    d = diff_backward_graphs(da, db).set_index("node")
    assert d.loc["ConvolutionBackward0", "delta"] == 1
    assert diff_backward_graphs(da, da).empty


def test_real_sample_models_tree(sample_store: Path) -> None:
    from app.data.runs import load_module_tree
    from profiler_agent.runformat import find_run

    a = load_module_tree(find_run("baseline", sample_store))
    b = load_module_tree(find_run("optimized", sample_store))
    d = diff_module_trees(a, b)
    assert d.iloc[0]["path"] == ROOT_PATH and d.iloc[0]["params_delta"] < 0
    assert ((d["baseline_type"] == "Conv2d") & (d["change"] == "type")).sum() >= 4


@pytest.mark.parametrize("bad", [{}, {"root": {}}, {"root": {"name": "", "children": ["junk", 3]}}])
def test_odd_documents_do_not_crash(bad: dict) -> None:
    assert len(flatten_module_tree(bad)) <= 1


def test_include_same_gives_the_union_tree() -> None:
    a, b = tree(Plain()), tree(Separable())
    union = diff_module_trees(a, b, include_same=True).set_index("path")
    paths_a = set(flatten_module_tree(a)["path"])
    paths_b = set(flatten_module_tree(b)["path"])
    assert set(union.index) == paths_a | paths_b
    assert union.loc["act", "change"] == "config"  # ReLU() → ReLU(inplace=True)
    assert union.loc["head", "change"] == "same"
    changed = diff_module_trees(a, b)
    assert set(changed["path"]) == set(union.index[union["change"] != "same"]) | {ROOT_PATH}


def test_module_parent() -> None:
    from app.analysis.model.graph_diff import module_parent

    assert module_parent(ROOT_PATH) is None
    assert module_parent("layer1") == ROOT_PATH
    assert module_parent("layer1.0.conv1") == "layer1.0"
