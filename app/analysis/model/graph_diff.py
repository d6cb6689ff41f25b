"""Structural diff of two models: module trees (graph/modules.json) and backward graphs (analysis layer).

Modules are matched by their dotted path (``features.0.conv``); a module is ``added`` or
``removed`` when its path exists on one side only, ``type`` when the class changed, ``shape``
when its output shape changed, ``params`` when its own parameter count changed and ``config``
when only its ``extra_repr`` (kernel size, channels, ...) changed. The backward graphs are
compared as multisets of autograd node types (``ConvolutionBackward0`` x 12 → x 4).
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pandas as pd

__all__ = [
    "module_parent",
    "MODULE_COLUMNS",
    "MODULE_DIFF_COLUMNS",
    "ROOT_PATH",
    "flatten_module_tree",
    "diff_module_trees",
    "count_graph_nodes",
    "diff_backward_graphs",
]

ROOT_PATH = "(model)"
MODULE_COLUMNS = ["path", "type", "params", "own_params", "flops", "output_shape", "extra_repr", "depth"]
MODULE_DIFF_COLUMNS = ["path", "change", "baseline_type", "candidate_type", "baseline_params", "candidate_params",
                       "params_delta", "baseline_shape", "candidate_shape", "baseline_flops", "candidate_flops",
                       "baseline_config", "candidate_config"]


def flatten_module_tree(tree: Mapping[str, Any] | None) -> pd.DataFrame:
    """One row per module of a modules.json document (format 1), depth-first, columns MODULE_COLUMNS."""
    if not tree:
        return pd.DataFrame(columns=MODULE_COLUMNS)
    root = tree.get("root", tree)
    rows: list[dict[str, Any]] = []
    stack: list[tuple[Mapping[str, Any], int]] = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        shape = node.get("output_shape")
        rows.append({
            "path": node.get("name") or ROOT_PATH,
            "type": str(node.get("type", "?")),
            "params": int(node.get("params") or 0),
            "own_params": int(node.get("own_params") or 0),
            "flops": int(node.get("flops") or 0),
            "output_shape": "" if shape is None else "x".join(str(s) for s in shape),
            "extra_repr": str(node.get("extra_repr") or ""),
            "depth": depth,
        })
        children = node.get("children") or []
        stack.extend((c, depth + 1) for c in reversed(children) if isinstance(c, Mapping))
    return pd.DataFrame(rows, columns=MODULE_COLUMNS)


def module_parent(path: str) -> str | None:
    """The dotted path of a module's parent (``layer1.0`` → ``layer1``, ``layer1`` → ``(model)``);
    None for the root."""
    if path == ROOT_PATH:
        return None
    return path.rsplit(".", 1)[0] if "." in path else ROOT_PATH


def _change(a: pd.Series | None, b: pd.Series | None) -> str:
    if a is None:
        return "added"
    if b is None:
        return "removed"
    if a["type"] != b["type"]:
        return "type"
    if a["output_shape"] and b["output_shape"] and a["output_shape"] != b["output_shape"]:
        return "shape"
    if a["own_params"] != b["own_params"]:
        return "params"
    if a["extra_repr"] != b["extra_repr"]:
        return "config"
    if a["path"] == ROOT_PATH and a["params"] != b["params"]:
        return "params"
    return ""


def diff_module_trees(baseline: Mapping[str, Any] | None, candidate: Mapping[str, Any] | None, *,
                      include_same: bool = False) -> pd.DataFrame:
    """Return the modules that differ, columns MODULE_DIFF_COLUMNS, in tree order (baseline order,
    then added modules in candidate order). The ``(model)`` row always comes first when either
    side has a tree: it carries the total parameter count delta. Empty when neither has a tree.
    With ``include_same`` every module of either tree is a row (unchanged ones as ``same``): the
    union tree the highlighted graph view draws."""
    fa, fb = flatten_module_tree(baseline), flatten_module_tree(candidate)
    if len(fa) == 0 and len(fb) == 0:
        return pd.DataFrame(columns=MODULE_DIFF_COLUMNS)
    ia, ib = fa.set_index("path", drop=False), fb.set_index("path", drop=False)
    ia = ia[~ia.index.duplicated()]
    ib = ib[~ib.index.duplicated()]
    order = list(ia.index) + [p for p in ib.index if p not in ia.index]
    rows = []
    for path in order:
        a = ia.loc[path] if path in ia.index else None
        b = ib.loc[path] if path in ib.index else None
        change = _change(a, b)
        if not change and path != ROOT_PATH and not include_same:
            continue
        rows.append({
            "path": path, "change": change or "same",
            "baseline_type": a["type"] if a is not None else "", "candidate_type": b["type"] if b is not None else "",
            "baseline_params": int(a["params"]) if a is not None else 0,
            "candidate_params": int(b["params"]) if b is not None else 0,
            "baseline_shape": a["output_shape"] if a is not None else "",
            "candidate_shape": b["output_shape"] if b is not None else "",
            "baseline_flops": int(a["flops"]) if a is not None else 0,
            "candidate_flops": int(b["flops"]) if b is not None else 0,
            "baseline_config": a["extra_repr"] if a is not None else "",
            "candidate_config": b["extra_repr"] if b is not None else "",
        })
    out = pd.DataFrame(rows)
    out["params_delta"] = out["candidate_params"] - out["baseline_params"]
    return out[MODULE_DIFF_COLUMNS]


# torchviz node statements: `140231 [label=ConvolutionBackward0]` (bare) or, for parameters and
# tensors, a quoted label whose second line is the shape (`label="conv.weight\n (16, 3, 3, 3)"`,
# with a real newline); those count as "parameter" / "tensor".
_NODE_RE = re.compile(r'^\s*\w+\s*\[label=(?:"((?:[^"\\]|\\.)*)"|([^\s\]]+))', re.MULTILINE)


def count_graph_nodes(dot_source: str | None) -> Counter[str]:
    """Count the autograd node types of a torchviz DOT graph (leaf parameters as ``parameter``,
    other tensors such as the output as ``tensor``)."""
    counts: Counter[str] = Counter()
    for quoted, bare in _NODE_RE.findall(dot_source or ""):
        label = (quoted or bare).replace("\\n", "\n")
        if "\n" in label:
            counts["parameter" if label.split("\n")[0].strip() else "tensor"] += 1
        else:
            counts[label.strip()] += 1
    return counts


def diff_backward_graphs(baseline_dot: str | None, candidate_dot: str | None) -> pd.DataFrame:
    """Autograd node types whose count differs: ``node``, ``baseline_count``, ``candidate_count``,
    ``delta``; sorted by |delta| descending then name. Empty when neither graph exists."""
    a, b = count_graph_nodes(baseline_dot), count_graph_nodes(candidate_dot)
    rows = [{"node": k, "baseline_count": a.get(k, 0), "candidate_count": b.get(k, 0)}
            for k in sorted(set(a) | set(b)) if a.get(k, 0) != b.get(k, 0)]
    out = pd.DataFrame(rows, columns=["node", "baseline_count", "candidate_count"])
    out["delta"] = out["candidate_count"] - out["baseline_count"]
    if len(out):
        out = out.iloc[sorted(range(len(out)), key=lambda i: (-abs(int(out["delta"].iat[i])), out["node"].iat[i]))]
    return out.reset_index(drop=True)
