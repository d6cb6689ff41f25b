"""app/analysis imports at module level and has no import cycle (read from the source, no import)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ANALYSIS = ROOT / "app" / "analysis"
# The workspace stream's files, which still load from disk inside functions until the
# workspace layer takes that over (issue 12).
_NOT_YET = {"trace/summary.py", "advisor/evidence.py", "compare/json_doc.py", "compare/memory_categories.py"}
_PROJECT = ("app", "profiler_agent")


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:  # relative: from .x import y
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        prefix = ".".join(base + ([node.module] if node.module else []))
    else:
        prefix = node.module or ""
    return [prefix] + [f"{prefix}.{a.name}" for a in node.names]


def _sources() -> dict[str, tuple[Path, ast.Module]]:
    return {_module(p): (p, ast.parse(p.read_text(encoding="utf-8"))) for p in sorted(ANALYSIS.rglob("*.py"))}


def test_no_project_import_inside_a_function() -> None:
    found = []
    for module, (path, tree) in _sources().items():
        if path.relative_to(ANALYSIS).as_posix() in _NOT_YET:
            continue
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    names = _imported(node, module, path.name == "__init__.py")
                    if any(n.split(".")[0] in _PROJECT for n in names):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, f"in-function project imports: {found}"


def test_no_import_cycle_inside_analysis() -> None:
    sources = _sources()
    graph: dict[str, set[str]] = {}
    for module, (path, tree) in sources.items():
        deps: set[str] = set()
        for node in tree.body:  # module level only: what runs at import time
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                deps |= {n for n in _imported(node, module, path.name == "__init__.py") if n in sources}
        graph[module] = deps - {module}
    # A package imports its own submodules (advisor/__init__ registers its rules): an edge from a
    # submodule to its package's __init__ would then be a cycle, and is one.
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state and (cycle := visit(d)):
                return cycle
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            cycle = visit(m)
            assert cycle is None, " → ".join(cycle)
