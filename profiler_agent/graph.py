"""The model's structure: module tree with parameters and FLOPs, and the first backward graph (agent layer).

``write_module_tree`` writes graph/modules.json; ``write_backward_graph`` writes the torchviz
DOT (always) and SVG (when graphviz's ``dot`` is on PATH) of the graph behind the first loss.
FLOPs are counted analytically for convolutions and linear layers from the output shapes seen
in the first training forward (the rest count 0), so comparing two architectures needs no
extra forward pass.
"""
from __future__ import annotations

import math
import shutil
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from .failures import FailureLog
from .runformat import (
    Artifact,
    ArtifactKind,
    add_artifact,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    layout,
    update_manifest,
)

__all__ = ["compute_module_flops", "describe_module_tree", "make_backward_dot", "render_svg", "start_backward_graph",
           "write_backward_graph", "write_module_tree"]

MODULE_TREE_FORMAT = 1
GRAPH_SVG_SKIPPED = layout.GRAPH_SVG_SKIPPED  # run.json: why graph/backward.svg is missing


def compute_module_flops(module: torch.nn.Module, output_shape: tuple[int, ...] | None) -> int:
    """Forward FLOPs (multiply + add = 2) of one conv / linear call with that output shape; else 0."""
    if output_shape is None:
        return 0
    out_numel = math.prod(output_shape)
    if isinstance(module, torch.nn.modules.conv._ConvNd):
        per_output = (module.in_channels // module.groups) * math.prod(module.kernel_size)
        return 2 * out_numel * per_output
    if isinstance(module, torch.nn.Linear):
        return 2 * out_numel * module.in_features
    return 0


def describe_module_tree(
    root: torch.nn.Module,
    output_shapes: Mapping[int, tuple[int, ...]] | None = None,
    *,
    max_nodes: int = 20_000,
) -> dict[str, Any]:
    """Return the module tree as nested dicts: name, type, params, FLOPs, output shape, children.

    ``params``/``flops`` include the children; ``own_params`` counts only direct parameters.
    Trees larger than ``max_nodes`` are cut (``truncated``) to keep the file readable.
    """
    shapes = output_shapes or {}
    count = 0

    def node(name: str, module: torch.nn.Module) -> dict[str, Any]:
        nonlocal count
        count += 1
        own = sum(p.numel() for p in module.parameters(recurse=False))
        trainable_own = sum(p.numel() for p in module.parameters(recurse=False) if p.requires_grad)
        shape = shapes.get(id(module))
        children = []
        for child_name, child in module.named_children():
            if count >= max_nodes:
                break
            children.append(node(f"{name}.{child_name}" if name else child_name, child))
        flops = compute_module_flops(module, shape) + sum(c["flops"] for c in children)
        return {
            "name": name,
            "type": type(module).__name__,
            "params": own + sum(c["params"] for c in children),
            "trainable_params": trainable_own + sum(c["trainable_params"] for c in children),
            "own_params": own,
            "flops": flops,
            "output_shape": list(shape) if shape is not None else None,
            "extra_repr": module.extra_repr()[:200],
            "children": children,
        }

    tree = node("", root)
    return {"format": MODULE_TREE_FORMAT, "root": tree, "nodes": count, "truncated": count >= max_nodes}


def write_module_tree(
    run_dir: Path, root: torch.nn.Module, output_shapes: Mapping[int, tuple[int, ...]] | None = None,
    *, record: bool = True,
) -> Artifact:
    """Write graph/modules.json for ``root``; return its artifact, also recorded in the manifest
    unless ``record`` is False (the caller puts it in a manifest rewrite of its own)."""
    path = run_dir / layout.MODULE_TREE
    atomic_write_json(path, describe_module_tree(root, output_shapes))
    artifact = Artifact(ArtifactKind.MODULE_TREE, layout.MODULE_TREE, bytes=path.stat().st_size)
    if record:
        add_artifact(run_dir, artifact)
    return artifact


def make_backward_dot(loss: torch.Tensor, params: Mapping[str, torch.Tensor]) -> str:
    """Return the DOT source of the autograd graph behind ``loss`` (torchviz), parameters named."""
    from torchviz import make_dot  # imported late: only the first step pays for it

    return make_dot(loss, params=dict(params)).source


def render_svg(dot_source: str, *, timeout_s: float = 60.0) -> bytes | None:
    """Render DOT to SVG with graphviz's ``dot``; None when it is not installed."""
    exe = shutil.which("dot")
    if exe is None:
        return None
    out = subprocess.run([exe, "-Tsvg"], input=dot_source.encode("utf-8"), capture_output=True,
                         timeout=timeout_s, check=True)
    return out.stdout


def write_backward_graph(run_dir: Path, dot_source: str, *, svg: bool = True) -> None:
    """Write graph/backward.dot (and .svg when possible), recording both in the manifest."""
    dot_path = run_dir / layout.GRAPH_DOT
    atomic_write_text(dot_path, dot_source)
    add_artifact(run_dir, Artifact(ArtifactKind.GRAPH_DOT, layout.GRAPH_DOT, bytes=dot_path.stat().st_size))
    if not svg:
        return
    data = render_svg(dot_source)
    if data is None:
        # Not an error of the job's: say why the picture is missing (run.json "graph_svg_skipped").
        note = "graphviz's `dot` was not found on PATH: the graph is kept as DOT only"
        update_manifest(run_dir, lambda m: m.replace(extra={**m.extra, GRAPH_SVG_SKIPPED: note}))
        return
    svg_path = run_dir / layout.GRAPH_SVG
    atomic_write_bytes(svg_path, data)
    add_artifact(run_dir, Artifact(ArtifactKind.GRAPH_SVG, layout.GRAPH_SVG, bytes=len(data)))


def start_backward_graph(run_dir: Path, failures: FailureLog, loss: torch.Tensor,
                         params: Mapping[str, torch.Tensor]) -> threading.Thread:
    """Take the DOT of ``loss``'s graph now (before its backward frees it) and write it, with its
    SVG, in a daemon thread (graphviz can take seconds); return the started thread."""
    dot = make_backward_dot(loss, params)

    def write() -> None:
        with failures.guard("backward graph"):
            write_backward_graph(run_dir, dot)

    thread = threading.Thread(target=write, name="torchscope-graph", daemon=True)
    thread.start()
    return thread
