"""Tests of app.charts.graph.make_module_diff_dot: the highlighted union of two module trees."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from torch import nn

from app.analysis.model.graph_diff import diff_module_trees
from app.charts.graph import MODULE_DIFF_STYLES, make_module_diff_dot
from profiler_agent.graph import describe_module_tree


def _union(a: nn.Module, b: nn.Module):
    return diff_module_trees(describe_module_tree(a), describe_module_tree(b), include_same=True)


def _nodes(dot: str) -> dict[str, str]:
    return dict(re.findall(r'^\s*(m\d+) \[label="([^"]*)"', dot, re.MULTILINE))


def test_small_tree_drawn_whole_with_colours() -> None:
    a = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Sequential(nn.Linear(8, 2), nn.Dropout()))
    b = nn.Sequential(nn.Conv2d(3, 8, 1), nn.GELU(), nn.Sequential(nn.Linear(8, 2)), nn.Linear(2, 2))
    dot, hidden = make_module_diff_dot(_union(a, b))
    assert hidden == 0
    labels = list(_nodes(dot).values())
    assert len(labels) == 7  # (model), 0, 1, 2, 2.0, 2.1 (removed), 3 (added)
    assert any("ReLU → GELU" in lab for lab in labels)
    line = next(ln for ln in dot.splitlines() if "Dropout" in ln)
    assert MODULE_DIFF_STYLES["removed"][0] in line and "dashed" in line
    line = next(ln for ln in dot.splitlines() if 'label="3\\nLinear' in ln)
    assert MODULE_DIFF_STYLES["added"][0] in line and "params +6" in line
    assert dot.count("->") == 6  # a tree: one edge per non-root module


def test_big_tree_draws_changed_modules_and_ancestors_only() -> None:
    blocks = [nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(100)]
    changed = [nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(100)]
    changed[57] = nn.Sequential(nn.Linear(4, 4), nn.GELU())
    dot, hidden = make_module_diff_dot(_union(nn.Sequential(*blocks), nn.Sequential(*changed)), max_nodes=50)
    labels = _nodes(dot)
    assert len(labels) == 3  # (model) → 57 → 57.1 (ReLU → GELU)
    assert hidden == 301 - 3
    assert re.search(r'label="\d+ unchanged"', dot)
    assert any("ReLU → GELU" in v for v in labels.values())


def test_cap_on_changed_modules_is_reported() -> None:
    a = nn.Sequential(*[nn.Linear(4, 4) for _ in range(30)])
    b = nn.Sequential(*[nn.Linear(4, 5) for _ in range(30)])
    dot, hidden = make_module_diff_dot(_union(a, b), max_nodes=10)
    assert len(_nodes(dot)) == 10
    assert hidden == 21 and "(21 changed, not drawn)" in dot


def test_empty_and_hostile_names() -> None:
    assert make_module_diff_dot(diff_module_trees(None, None, include_same=True)) == ("digraph modules {}", 0)

    class Odd(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.add_module('we"ird\\name', nn.Linear(2, 2))

    dot, _ = make_module_diff_dot(_union(Odd(), nn.Sequential()))
    if shutil.which("dot") is None:
        pytest.skip("graphviz not installed")
    done = subprocess.run(["dot", "-Tsvg"], input=dot.encode(), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
