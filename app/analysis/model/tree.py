"""The model's module tree as a table, its partition layout (an icicle's cells), and the size of its
backward graph (analysis layer).

Input is the parsed graph/modules.json written by ``profiler_agent.graph.describe_module_tree``
(format 1): ``{"format": 1, "root": node, "nodes": n, "truncated": bool}`` where each node has
``name`` (dotted path, "" for the model), ``type``, ``params`` and ``flops`` (children
included), ``own_params``, ``trainable_params``, ``output_shape``, ``extra_repr``, ``children``.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import pandas as pd

from app.errors import AnalysisError

__all__ = [
    "MODULE_COLUMNS",
    "ROOT_LABEL",
    "GraphSize",
    "compute_module_table",
    "PARTITION_COLUMNS",
    "compute_module_partition",
    "compute_graph_size",
    "svg_size_pt",
]

ROOT_LABEL = "(model)"
MODULE_COLUMNS = ["path", "parent", "depth", "module", "type", "params", "own_params", "trainable_params",
                  "flops", "param_share", "output_shape", "extra_repr"]
_KNOWN_FORMATS = (1,)


def compute_module_table(tree: dict[str, Any], *, max_depth: int | None = None) -> pd.DataFrame:
    """Return one row per module in depth-first order (MODULE_COLUMNS).

    ``path`` is the dotted module name (ROOT_LABEL for the model itself), ``parent`` the parent's
    path ("" for the root), ``module`` the last name component indented by depth (for reading
    as a tree), ``param_share`` the module's parameters over the model's. ``max_depth`` keeps
    modules down to that depth (the root is depth 0).

    Raises AnalysisError when the document is not a module tree of a known format.
    """
    if not isinstance(tree, dict) or not isinstance(tree.get("root"), dict):
        raise AnalysisError("module tree: expected an object with a 'root' module (graph/modules.json, format 1)")
    fmt = tree.get("format", 1)
    if fmt not in _KNOWN_FORMATS:
        raise AnalysisError(f"module tree: format {fmt!r} is newer than this Torchscope understands "
                            f"(known: {', '.join(map(str, _KNOWN_FORMATS))})")
    root = tree["root"]
    total = _int(root.get("params")) or 1
    rows: list[dict[str, Any]] = []
    stack: list[tuple[dict[str, Any], str, int]] = [(root, "", 0)]
    while stack:
        node, parent, depth = stack.pop()
        if not isinstance(node, dict):
            raise AnalysisError(f"module tree: a child of {parent or ROOT_LABEL!r} is not an object")
        path = str(node.get("name") or "") or ROOT_LABEL
        last = path.rsplit(".", 1)[-1]
        shape = node.get("output_shape")
        rows.append({
            "path": path, "parent": parent, "depth": depth, "module": "\u2003" * depth + last,
            "type": str(node.get("type", "?")), "params": _int(node.get("params")),
            "own_params": _int(node.get("own_params")), "trainable_params": _int(node.get("trainable_params")),
            "flops": _int(node.get("flops")), "param_share": _int(node.get("params")) / total,
            "output_shape": "×".join(str(s) for s in shape) if isinstance(shape, list) else "",
            "extra_repr": str(node.get("extra_repr") or ""),
        })
        children = node.get("children") or []
        if max_depth is None or depth < max_depth:
            stack.extend((c, path, depth + 1) for c in reversed(children))
    return pd.DataFrame(rows, columns=MODULE_COLUMNS)


PARTITION_COLUMNS = ["path", "parent", "depth", "type", "params", "flops", "value", "share", "x0", "x1", "branch"]


def compute_module_partition(table: pd.DataFrame, *, value: str = "params") -> pd.DataFrame:
    """Return the icicle layout of a module table (``compute_module_table``, maybe cut to a depth):
    one row per module in the table's order (PARTITION_COLUMNS), ``x0``–``x1`` its span on [0, 1]
    and ``depth`` its row (0 for the model).

    A module's children share its span in proportion to their ``value`` ("params" or "flops",
    children included), left to right in tree order; what they leave of it on the right is the
    module's own part (its own parameters, its own FLOPs), as plotly's icicle left it. Children
    that add up to more than their parent (a hand-edited or inconsistent tree) are squeezed into
    its span rather than drawn past it. A module whose value is 0 (or negative, or missing) gets an
    empty span. ``share`` is the module's value over the model's, ``branch`` the path of its
    top-level ancestor (the model's own row: the model), to colour each branch alike.

    Raises ValueError for another ``value``.
    """
    if value not in ("params", "flops"):
        raise ValueError(f"value must be 'params' or 'flops', got {value!r}")
    paths = [str(p) for p in table["path"]]
    parents = [str(p) for p in table["parent"]]
    values = [_nonnegative(v) for v in table[value]]
    first: dict[str, int] = {}
    for i, p in enumerate(paths):
        first.setdefault(p, i)
    # A row hangs under the first earlier row of its parent's path: a tree by construction, even
    # for a malformed table (no cycles, no row counted twice). Rows without one are top level.
    parent_of = [j if (j := first.get(parents[i], -1)) < i else -1 for i in range(len(paths))]
    children: list[list[int]] = [[] for _ in paths]
    for i, j in enumerate(parent_of):
        if j >= 0:
            children[j].append(i)
    size = values[:]
    for i in reversed(range(len(paths))):  # children come after their parent
        size[i] = max(values[i], sum(size[c] for c in children[i]))
    x0, x1 = [0.0] * len(paths), [0.0] * len(paths)
    tops = [i for i, j in enumerate(parent_of) if j < 0]

    def lay_out(rows: list[int], start: float, unit: float) -> None:
        for r in rows:
            x0[r], x1[r] = start, start + size[r] * unit
            start = x1[r]

    lay_out(tops, 0.0, 1.0 / s if (s := sum(size[t] for t in tops)) > 0 else 0.0)
    for i in range(len(paths)):  # parents first: each one's span is set before its children's
        if children[i]:
            lay_out(children[i], x0[i], (x1[i] - x0[i]) / size[i] if size[i] > 0 else 0.0)
    total = sum(values[t] for t in tops)
    branch, depth = [""] * len(paths), [0] * len(paths)
    for i, j in enumerate(parent_of):
        branch[i] = paths[i] if j < 0 or parent_of[j] < 0 else branch[j]
        depth[i] = depth[j] + 1 if j >= 0 else 0
    return pd.DataFrame({
        "path": paths, "parent": parents, "depth": depth,
        "type": [str(t) for t in table["type"]], "params": [_int(v) for v in table["params"]],
        "flops": [_int(v) for v in table["flops"]], "value": values,
        "share": [v / total if total > 0 else 0.0 for v in values], "x0": x0, "x1": x1, "branch": branch,
    }, columns=PARTITION_COLUMNS)


def _nonnegative(value: Any) -> float:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return 0.0
    return f if math.isfinite(f) and f > 0 else 0.0


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


@dataclass(frozen=True)
class GraphSize:
    """Node and edge statements of a DOT graph."""

    nodes: int
    edges: int


# A node statement starts a line with an id (number, word or quoted) followed by attributes;
# "node [", "edge [" and "graph [" are defaults, not nodes.
_NODE_RE = re.compile(r'^\s*(?:"[^"]*"|[\w.]+)\s*\[', re.MULTILINE)
_DEFAULTS_RE = re.compile(r"^\s*(?:node|edge|graph)\s*\[", re.MULTILINE)
_EDGE_RE = re.compile(r"->|--")


def compute_graph_size(dot: str) -> GraphSize:
    """Count the node and edge statements of a DOT source (as torchviz writes it)."""
    nodes = len(_NODE_RE.findall(dot)) - len(_DEFAULTS_RE.findall(dot))
    edges = sum(1 for line in dot.splitlines() if _EDGE_RE.search(line.split("[", 1)[0]))
    return GraphSize(nodes=max(nodes, 0), edges=edges)


_SVG_SIZE_RE = re.compile(r'<svg[^>]*?\bwidth="([\d.]+)(pt|px)?"[^>]*?\bheight="([\d.]+)(pt|px)?"', re.DOTALL)


def svg_size_pt(svg: str) -> tuple[float, float] | None:
    """Return (width, height) of an SVG's root element in points, or None when absent."""
    m = _SVG_SIZE_RE.search(svg[:4000])
    if not m:
        return None
    def scale(unit: str) -> float:
        return 0.75 if unit == "px" else 1.0

    return float(m.group(1)) * scale(m.group(2)), float(m.group(3)) * scale(m.group(4))
