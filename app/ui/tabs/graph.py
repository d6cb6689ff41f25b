"""Run page tab "Graph": the first backward graph (zoomable) and the module tree with parameter
counts and FLOPs (UI layer). Its charts are Vega-Lite: the tab loads no plotly.js (issue 16)."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from app.analysis.model.tree import (
    compute_graph_size,
    compute_module_partition,
    compute_module_table,
    svg_size_pt,
)
from app.charts.graph import module_icicle_chart, svg_graph_chart
from app.errors import TorchscopeError
from app.ui.deep_cache import cached_module_tree
from app.ui.tabs import RunContext
from app.workspace.artifacts import read_run_bytes, read_run_text
from profiler_agent.runformat import layout

__all__ = ["TITLE", "render", "MAX_DRAWN_NODES", "format_flops", "graph_height_px"]

TITLE = "Graph"

# Above this many nodes a drawn graph is an unreadable hairball in a browser tab; the module
# tree says more, and the file can still be opened in a dedicated viewer.
MAX_DRAWN_NODES = 400
_MAX_TEXT_BYTES = 50 * 1024 * 1024

_NO_GRAPH_HELP = (
    "No computation graph in this run. `torchscope run` writes the autograd graph of the first "
    "loss (and an SVG when graphviz's `dot` is installed) once the first backward pass has run; "
    "it needs the `torchviz` package in the job's environment and `graph=True` (the default)."
)
_NO_TREE_HELP = (
    "No module tree in this run. The agent writes it at the first optimizer step, from the "
    "top-level module called in training that holds the optimizer's parameters; a job without "
    "an optimizer step, or a run imported from a trace, has none."
)


_MODULE_COLUMNS = {
    "module": st.column_config.TextColumn("Module", help="Attribute path in the model; (model) is the whole model"),
    "type": st.column_config.TextColumn("Type"),
    "params": st.column_config.NumberColumn("Parameters", format="localized",
                                            help="Parameters of the module and its children"),
    "trainable_params": st.column_config.NumberColumn("Trainable", format="localized",
                                                      help="Parameters with requires_grad"),
    "param_share": st.column_config.ProgressColumn("Share of parameters", format="percent",
                                                   min_value=0.0, max_value=1.0),
    "mflops": st.column_config.NumberColumn(
        "Forward MFLOPs", format="%.2f",
        help="Millions of floating-point operations of one forward pass (convolutions and linear layers; "
        "other layers count 0)"),
    "output_shape": st.column_config.TextColumn("Output shape", help="Shape of the first forward's output"),
    "extra_repr": st.column_config.TextColumn("Settings", help="The module's extra_repr(): sizes, strides…"),
}


def _read_text(ctx: RunContext, path: Path) -> str | None:
    """The graph file's text; None when too large to draw. Raises UnsafePath for a link out of the run."""
    if path.stat().st_size > _MAX_TEXT_BYTES:
        return None
    return read_run_text(ctx.run.path, path)


def _render_downloads(ctx: RunContext, dot: Path | None, svg: Path | None) -> None:
    cols = st.columns(3)
    for col, path, mime in ((cols[0], dot, "text/vnd.graphviz"), (cols[1], svg, "image/svg+xml")):
        if path is not None:
            col.download_button(f"Download {path.suffix[1:].upper()}", data=lambda p=path: read_run_bytes(ctx.run.path, p),
                                file_name=path.name, mime=mime, key=ctx.key(f"graph_dl_{path.suffix}"),
                                on_click="ignore")
    cols[2].caption("Open the SVG in a browser tab, or the DOT with `xdot` / `dot -Tpdf`.")


def graph_height_px(width_pt: float, height_pt: float, *, page_px: int = 1000) -> int:
    """Figure height that shows a ``width_pt`` × ``height_pt`` graph as wide as the page allows,
    between 500 and 1400 px."""
    if width_pt <= 0:
        return 700
    return int(min(1400, max(500, page_px * height_pt / width_pt)))


def _draw(ctx: RunContext, dot: str | None, svg: str | None) -> None:
    """The SVG as a zoomable Vega-Lite image; without one, the DOT through st.graphviz_chart."""
    if svg is not None and (dims := svg_size_pt(svg)) is not None:
        # A backward graph is tall and narrow: at a fixed 700 px it is drawn a third of the page
        # wide with unreadable labels. Give it the height its shape needs on a ~1000 px wide page.
        height = graph_height_px(*dims)
        st.vega_lite_chart(svg_graph_chart(svg, *dims, height_px=height), width="stretch", key=ctx.key("graph_svg"))
        st.caption("Scroll over the graph to zoom, drag to pan, double-click to reset.")
    elif dot is not None:
        st.graphviz_chart(dot, width="stretch")
    else:
        st.info("The graph file is too large to show here; download it instead.")


def _render_graph(ctx: RunContext) -> None:
    st.subheader("Backward graph")
    dot_path, svg_path = ctx.run.graph_dot, ctx.run.graph_svg
    if dot_path is None and svg_path is None:
        st.info(_NO_GRAPH_HELP)
        return
    skipped = ctx.run.manifest.extra.get(layout.GRAPH_SVG_SKIPPED)
    if svg_path is None and isinstance(skipped, str):
        st.caption(f"No SVG picture: {skipped}. Install graphviz (`apt-get install graphviz`) for the next run.")
    dot = _read_text(ctx, dot_path) if dot_path is not None else None
    svg = _read_text(ctx, svg_path) if svg_path is not None else None
    size = compute_graph_size(dot) if dot is not None else None
    if size is not None:
        st.caption(f"{size.nodes:,} nodes, {size.edges:,} edges: the autograd functions, tensors saved for "
                   "backward (orange) and parameters (blue) behind the first loss.")
    too_big = size is not None and size.nodes > MAX_DRAWN_NODES
    if too_big and size is not None:
        st.info(f"The graph has {size.nodes:,} nodes, more than the {MAX_DRAWN_NODES} that stay readable "
                "here. The module tree below summarises the model; download the graph to explore it.")
        too_big = not st.toggle("Draw it anyway (slow to render, hard to read)", key=ctx.key("graph_force"))
    if not too_big:
        _draw(ctx, dot, svg)
    _render_downloads(ctx, dot_path, svg_path)


def _render_tree(ctx: RunContext) -> None:
    st.subheader("Modules")
    tree = cached_module_tree(ctx.run_dir)
    if tree is None:
        st.info(_NO_TREE_HELP)
        return
    table = compute_module_table(tree)
    root = table.iloc[0]
    c = st.columns(4)
    c[0].metric("Parameters", f"{int(root['params']):,}")
    c[1].metric("Trainable", f"{int(root['trainable_params']):,}")
    c[2].metric("Forward FLOPs", format_flops(root["flops"]) if root["flops"] else "–",
                help=(f"{int(root['flops']):,} FLOPs. " if root["flops"] else "")
                + "Counted for convolutions and linear layers from the first forward's output shapes; "
                "other layers count 0.")
    c[3].metric("Modules", f"{len(table):,}")
    if tree.get("truncated"):
        st.warning(f"The agent cut this tree at {tree.get('nodes', len(table)):,} modules.")
    deepest = int(table["depth"].max())
    depth = st.slider("Depth shown", 1, max(deepest, 1), min(3, max(deepest, 1)),
                      key=ctx.key("graph_depth")) if deepest > 1 else deepest
    shown = table[table["depth"] <= depth]
    value = "flops" if root["flops"] and st.toggle("Size by FLOPs", key=ctx.key("graph_by_flops")) else "params"
    if int(root[value]) > 0:
        st.vega_lite_chart(module_icicle_chart(compute_module_partition(shown, value=value), value=value),
                           width="stretch", key=ctx.key("graph_icicle"))
        what = "FLOPs" if value == "flops" else "parameters"
        st.caption(f"Each module is as wide as its share of its parent's {what}; what its children leave empty "
                   f"on its right is its own {what}. Scroll over it to zoom across, drag to pan, double-click to "
                   "reset; hover a module for its numbers.")
    rows = shown[["module", "type", "params", "trainable_params", "param_share", "flops", "output_shape",
                  "extra_repr"]].copy()
    rows["flops"] = rows["flops"] / 1e6
    st.dataframe(rows.rename(columns={"flops": "mflops"}), hide_index=True, width="stretch",
                 key=ctx.key("graph_modules"), column_config=_MODULE_COLUMNS)


def format_flops(n: float) -> str:
    """1_102_094_336 → '1.10 GFLOP' (a ten-digit count is unreadable at a glance)."""
    value = float(n)
    for unit in ("FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP"):
        if abs(value) < 1000 or unit == "TFLOP":
            return f"{value:.0f} {unit}" if unit == "FLOP" else f"{value:.2f} {unit}"
        value /= 1000
    return f"{value:.2f} PFLOP"  # pragma: no cover


def render(ctx: RunContext) -> None:
    """The graph (or why it is not drawn), then the module tree; each explains missing data."""
    for section in (_render_graph, _render_tree):
        try:
            section(ctx)
        except TorchscopeError as e:
            st.error(str(e))
