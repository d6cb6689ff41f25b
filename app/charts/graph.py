"""Figures of the model's structure: a zoomable view of the graph's SVG, an icicle of the module
tree, and the two runs' module trees as one highlighted graph (charts layer: tables → figures,
no Streamlit)."""
from __future__ import annotations

import base64
import html

import pandas as pd
import plotly.graph_objects as go

from app.analysis.model.graph_diff import ROOT_PATH, module_parent
from app.analysis.model.tree import ROOT_LABEL

__all__ = ["make_svg_figure", "make_module_icicle_figure", "make_module_diff_dot", "MODULE_DIFF_STYLES"]

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


def make_svg_figure(svg: str, width_pt: float, height_pt: float, *, height_px: int = 700) -> go.Figure:
    """Return a figure showing ``svg`` as an image on fixed-ratio axes, so plotly's zoom (drag a
    box, scroll) and pan work on it. The SVG is passed as a data-URI image, never as HTML, so
    nothing in it runs."""
    uri = "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")
    fig = go.Figure()
    # An invisible trace gives the axes their extent (plotly needs data to autorange).
    fig.add_trace(go.Scatter(x=[0, width_pt], y=[0, height_pt], mode="markers", marker={"opacity": 0},
                             hoverinfo="skip", showlegend=False))
    fig.add_layout_image(source=uri, xref="x", yref="y", x=0, y=height_pt, sizex=width_pt, sizey=height_pt,
                         sizing="stretch", layer="below")
    fig.update_xaxes(visible=False, range=[0, width_pt], constrain="domain")
    fig.update_yaxes(visible=False, range=[0, height_pt], scaleanchor="x", scaleratio=1, constrain="domain")
    fig.update_layout(height=height_px, margin={"l": 0, "r": 0, "t": 0, "b": 0}, dragmode="pan",
                      plot_bgcolor="white")
    return fig


def make_module_icicle_figure(table: pd.DataFrame, *, value: str = "params", height: int = 520) -> go.Figure:
    """Return an icicle of the module tree (the table of ``compute_module_table``), each module
    sized by ``value`` ("params" or "flops", children included). Click a module to zoom into it."""
    if value not in ("params", "flops"):
        raise ValueError(f"value must be 'params' or 'flops', got {value!r}")
    rows = table
    values = rows[value].clip(lower=0)
    # branchvalues="total" needs each parent to be at least the sum of its children, which holds
    # for params and flops as the agent writes them (children included).
    labels = [html.escape(p.rsplit(".", 1)[-1]) if p != ROOT_LABEL else ROOT_LABEL for p in rows["path"]]
    custom = list(zip(rows["type"], rows["params"], rows["flops"], rows["path"]))
    fig = go.Figure(go.Icicle(
        ids=rows["path"], parents=rows["parent"], labels=labels, values=values, branchvalues="total",
        customdata=[[html.escape(str(t)), p, f, html.escape(str(path))] for t, p, f, path in custom],
        hovertemplate="<b>%{customdata[3]}</b> (%{customdata[0]})<br>params %{customdata[1]:,}<br>"
                      "FLOPs %{customdata[2]:,}<br>%{percentRoot:.1%} of the model<extra></extra>",
        root={"color": "lightgrey"}, tiling={"orientation": "v"}, maxdepth=4,
    ))
    fig.update_layout(height=height, margin={"l": 0, "r": 0, "t": 10, "b": 0})
    return fig


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
