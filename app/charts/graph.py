"""Charts of the model's structure: a zoomable view of the graph's SVG and an icicle of the module
tree (Vega-Lite specs), and the two runs' module trees as one highlighted graph (DOT) (charts
layer: tables → specs, no Streamlit, no plotly: the Graph tab then loads no plotly.js, issue 16)."""
from __future__ import annotations

import base64
from typing import Any

import pandas as pd

from app.analysis.model.graph_diff import ROOT_PATH, module_parent
from app.analysis.model.tree import ROOT_LABEL

__all__ = ["svg_graph_chart", "module_icicle_chart", "ICICLE_ROW_PX", "make_module_diff_dot", "MODULE_DIFF_STYLES"]

# change → (fill colour, border colour, border style, legend text)
MODULE_DIFF_STYLES = {
    "added": ("#d9f2dd", "#2e7d32", "solid", "added in the candidate"),
    "removed": ("#fbe0e0", "#c62828", "dashed", "removed in the candidate"),
    "type": ("#fff1cc", "#b26a00", "solid", "changed type"),
    "shape": ("#fff1cc", "#b26a00", "solid", "changed output shape"),
    "params": ("#fff1cc", "#b26a00", "solid", "changed parameter count"),
    "config": ("#fff1cc", "#b26a00", "solid", "changed settings"),
    "same": ("#ffffff", "#9e9e9e", "solid", "unchanged"),
}

# The model's own cell is grey; each top-level branch takes a light colour (ColorBrewer's Set3 less
# its grey), cycling, so the dark labels stay readable on every cell.
_ROOT_COLOR = "#d9d9d9"
_BRANCH_COLORS = ("#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5",
                  "#bc80bd", "#ccebc5", "#ffed6f")
ICICLE_ROW_PX = 44  # height of one level of the icicle


def svg_graph_chart(svg: str, width_pt: float, height_pt: float, *, height_px: int = 700) -> dict[str, Any]:
    """Return a Vega-Lite chart of ``svg`` (``width_pt`` × ``height_pt`` points) as one image mark on
    x/y scales of its points, ``height_px`` tall, kept to its aspect ratio and centred. The mouse
    wheel zooms both axes alike (the picture keeps its shape), dragging pans, a double-click resets
    (an interval selection bound to the scales).

    The SVG comes from a run folder, so it is untrusted: it is only ever the ``data:`` URI of an
    image, which browsers draw without running its scripts or event handlers, never markup put into
    the page."""
    uri = "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")
    w, h = float(width_pt), float(height_pt)
    return {
        "data": {"values": [{"x": 0.0, "x2": w, "y": 0.0, "y2": h}]},
        # no tooltip: Streamlit's theme would show the image's corners
        "mark": {"type": "image", "url": uri, "aspect": True, "clip": True, "tooltip": None},
        "encoding": {
            "x": {"field": "x", "type": "quantitative", "axis": None,
                  "scale": {"domain": [0.0, w], "nice": False, "zero": False}},
            "x2": {"field": "x2"},
            # y grows downwards, as in the SVG: its top at the chart's top
            "y": {"field": "y", "type": "quantitative", "axis": None,
                  "scale": {"domain": [0.0, h], "nice": False, "zero": False, "reverse": True}},
            "y2": {"field": "y2"},
        },
        "params": [{"name": "zoom", "select": {"type": "interval", "encodings": ["x", "y"]}, "bind": "scales"}],
        "height": int(height_px),
        "padding": 0,
        "view": {"stroke": None},
    }


def module_icicle_chart(partition: pd.DataFrame, *, value: str = "params") -> dict[str, Any]:
    """Return a Vega-Lite icicle of the module tree: one row of cells per depth, the model on top,
    each module's cell as wide as its share of its parent's (``partition`` is
    ``compute_module_partition``; modules of empty span are left out), coloured by top-level branch
    and labelled with its name where it is wide enough. The tooltip gives the module's path, type,
    parameters, FLOPs and share of the model's ``value`` ("params" or "flops"). The mouse wheel
    zooms across, dragging pans, a double-click resets.

    Raises ValueError for another ``value``."""
    if value not in ("params", "flops"):
        raise ValueError(f"value must be 'params' or 'flops', got {value!r}")
    drawn = partition[partition["x1"] > partition["x0"]]
    branches = list(dict.fromkeys(str(b) for b in drawn["branch"]))
    top = {str(p) for p, d in zip(drawn["path"], drawn["depth"]) if d == 0}
    colors, k = [], 0
    for b in branches:
        colors.append(_ROOT_COLOR if b in top else _BRANCH_COLORS[k % len(_BRANCH_COLORS)])
        k += b not in top
    rows = [{"path": str(r.path), "name": str(r.path) if r.path == ROOT_LABEL else str(r.path).rsplit(".", 1)[-1],
             "type": str(r.type), "params": int(r.params), "flops": int(r.flops), "share": float(r.share),
             "x0": float(r.x0), "x1": float(r.x1), "depth": int(r.depth), "branch": str(r.branch)}
            for r in drawn.itertuples(index=False)]
    levels = int(drawn["depth"].max()) + 1 if len(drawn) else 1
    what = "parameters" if value == "params" else "FLOPs"
    x = {"field": "x0", "type": "quantitative", "axis": None, "scale": {"domain": [0, 1], "nice": False, "zero": False}}
    y = {"field": "depth", "type": "ordinal", "axis": None, "scale": {"domain": list(range(levels)), "padding": 0}}
    tooltip = [{"field": "path", "title": "module"}, {"field": "type", "title": "type"},
               {"field": "params", "title": "parameters", "format": ","},
               {"field": "flops", "title": "forward FLOPs", "format": ","},
               {"field": "share", "title": f"share of the model's {what}", "format": ".1%"}]
    # A label starts at its cell's left edge, or at the chart's when the cell is zoomed past it,
    # and is cut to the cell's visible width (pixels, at the current zoom); none on a narrow cell.
    left = "max(scale('x', datum.x0), 0)"
    room = f"(min(scale('x', datum.x1), width) - {left})"
    return {
        "data": {"values": rows},
        "encoding": {"y": y, "tooltip": tooltip},  # the label's tooltip is its cell's
        "layer": [
            {"mark": {"type": "rect", "stroke": "white", "strokeWidth": 1, "clip": True},
             "encoding": {
                 "x": x, "x2": {"field": "x1"},
                 "color": {"field": "branch", "type": "nominal", "legend": None,
                           "scale": {"domain": branches, "range": colors}}},
             "params": [{"name": "zoom", "select": {"type": "interval", "encodings": ["x"]}, "bind": "scales"}]},
            # SVG text: shown as written, no markup
            {"mark": {"type": "text", "align": "left", "baseline": "middle", "dx": 4, "fontSize": 11,
                      "color": "#212121", "clip": True, "limit": {"expr": f"max(1, {room} - 8)"}},
             "encoding": {"x": {"value": {"expr": left}},
                          "text": {"condition": {"test": f"{room} >= 30", "field": "name", "type": "nominal"},
                                   "value": ""}}},
        ],
        "height": ICICLE_ROW_PX * levels,
        "view": {"stroke": None},
    }


def _dot_text(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _diff_label(row: pd.Series) -> str:
    path = str(row["path"])
    name = path if path == ROOT_PATH else path.rsplit(".", 1)[-1]
    b_type, c_type = str(row["baseline_type"]), str(row["candidate_type"])
    change = row["change"]
    if change == "type":
        kind = f"{b_type} → {c_type}"
    else:
        kind = c_type or b_type
    lines = [name, kind]
    if change == "shape":
        lines.append(f"out {row['baseline_shape']} → {row['candidate_shape']}")
    delta = int(row["params_delta"])
    if (delta and change != "same") or (path == ROOT_PATH and delta):
        lines.append(f"params {delta:+,}")
    return "\n".join(lines)


def make_module_diff_dot(table: pd.DataFrame, *, max_nodes: int = 150) -> tuple[str, int]:
    """Return (DOT source, modules not drawn) for the union of two module trees, each module
    coloured by its change (MODULE_DIFF_STYLES).

    ``table`` is ``diff_module_trees(a, b, include_same=True)``. Small trees are drawn whole;
    beyond ``max_nodes`` modules only the changed ones and their ancestors are drawn (the first
    ``max_nodes`` changed ones in tree order), and each drawn module's hidden descendants are
    summed into one grey "N unchanged" node (which also says how many changed ones the cap left
    out), so the picture stays readable on big models.
    """
    if len(table) == 0:
        return "digraph modules {}", 0
    paths = [str(p) for p in table["path"]]
    rows = {str(r["path"]): r for _, r in table.iterrows()}
    if len(paths) <= max_nodes:
        keep = set(paths)
    else:
        keep = {ROOT_PATH} if ROOT_PATH in rows else set()
        for p in paths:
            if rows[p]["change"] == "same" or len(keep) >= max_nodes:
                continue
            q: str | None = p
            while q is not None and q not in keep:
                keep.add(q)
                q = module_parent(q)
    hidden: dict[str, list[int]] = {}  # drawn module → [unchanged, changed] descendants not drawn
    for p in paths:
        if p in keep:
            continue
        q = module_parent(p)
        while q is not None and q not in keep:
            q = module_parent(q)
        if q is not None:
            hidden.setdefault(q, [0, 0])[rows[p]["change"] != "same"] += 1
    lines = ["digraph modules {", "  rankdir=LR;", '  graph [fontsize=10, nodesep=0.15, ranksep=0.35];',
             '  node [shape=box, style="rounded,filled", fontsize=10, fontname="Helvetica", margin="0.08,0.03"];',
             '  edge [color="#9e9e9e", arrowsize=0.5];']
    ids = {p: f"m{i}" for i, p in enumerate(paths)}
    for p in paths:
        if p not in keep:
            continue
        row = rows[p]
        fill, border, style, legend = MODULE_DIFF_STYLES.get(row["change"], MODULE_DIFF_STYLES["same"])
        lines.append(f'  {ids[p]} [label="{_dot_text(_diff_label(row))}", fillcolor="{fill}", color="{border}", '
                     f'style="rounded,filled,{style}", tooltip="{_dot_text(p)}: {legend}"];')
        parent = module_parent(p)
        if parent is not None and parent in keep:
            lines.append(f"  {ids[parent]} -> {ids[p]};")
    for k, (p, (same, changed)) in enumerate(hidden.items()):
        text = f"{same:,} unchanged" if not changed else f"{same + changed:,} more ({changed:,} changed, not drawn)"
        lines.append(f'  h{k} [label="{text}", shape=plaintext, style="", fontcolor="#757575"];')
        lines.append(f'  {ids[p]} -> h{k} [style=dotted];')
    lines.append("}")
    return "\n".join(lines), sum(s + c for s, c in hidden.values())
