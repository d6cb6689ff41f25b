"""The one dependency rule, checked in fresh interpreters: lower layers never load the UI (or torch)."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import app.analysis
import app.charts
import app.data

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def _modules(package) -> list[str]:  # noqa: ANN001
    return [f"{package.__name__}.{m.name}" for m in pkgutil.iter_modules(package.__path__)]


def _loaded_after_import(modules: list[str]) -> set[str]:
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        "print(json.dumps(sorted({n.split('.')[0] for n in sys.modules})))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_runformat_is_stdlib_only():
    loaded = _loaded_after_import(["profiler_agent.runformat"])
    assert not loaded & {"torch", "pandas", "numpy", "streamlit", "plotly", "app"}


@pytest.mark.parametrize("package", [app.data, app.analysis], ids=["app.data", "app.analysis"])
def test_data_and_analysis_load_no_ui_and_no_torch(package):
    modules = [package.__name__, *_modules(package)]
    if package is app.analysis:
        modules += [m for m in _find_subpackages(package)]
    loaded = _loaded_after_import(modules)
    assert "streamlit" not in loaded
    assert "plotly" not in loaded
    assert "torch" not in loaded


def test_charts_and_cli_load_no_streamlit():
    from app import cli

    modules = [
        *_modules(app.charts),
        *[
            f"app.cli.{n}_cmd"
            for n in cli.COMMANDS
            if (PROJECT_ROOT / "app" / "cli" / f"{n}_cmd.py").is_file()
        ],
    ]
    loaded = _loaded_after_import(modules)
    assert "streamlit" not in loaded


def _find_subpackages(package) -> list[str]:  # noqa: ANN001
    out = []
    for m in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}."):
        out.append(m.name)
    return out


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_only_ui_layers_import_streamlit_and_only_charts_and_pages_plotly():
    app_dir = PROJECT_ROOT / "app"
    for path in app_dir.rglob("*.py"):
        rel = path.relative_to(app_dir).as_posix()
        imported = _imports(path)
        if "streamlit" in imported:
            assert rel.startswith(("app_pages/", "ui/")) or rel == "streamlit_app.py", (
                f"{rel} imports streamlit"
            )
        if "plotly" in imported:
            assert rel.startswith(("charts/", "app_pages/")), f"{rel} imports plotly"


def test_agent_never_imports_app():
    for path in (PROJECT_ROOT / "profiler_agent").rglob("*.py"):
        assert "app" not in _imports(path), f"{path} imports app"


def _app_modules_imported(path: Path) -> set[str]:
    """``app.<layer>`` names a file imports (``from app.analysis.x import y``, ``from app.analysis
    import x``, ``import app.charts.y``), at any depth of the file (function-level imports too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    layers: set[str] = set()
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                 else [])
        layers.update(".".join(n.split(".")[:2]) for n in names if n.startswith("app."))
    return layers


@pytest.mark.parametrize("layer, above", [
    ("data", {"app.analysis", "app.charts", "app.ui", "app.app_pages", "app.cli"}),
    ("analysis", {"app.charts", "app.ui", "app.app_pages", "app.cli"}),
    ("charts", {"app.ui", "app.app_pages", "app.cli"}),
])
def test_lower_layers_never_import_higher_ones(layer, above):  # noqa: ANN001
    """DESIGN.md's arrows: data → analysis → charts → pages; a layer imports only those below it."""
    for path in (PROJECT_ROOT / "app" / layer).rglob("*.py"):
        wrong = _app_modules_imported(path) & above
        assert not wrong, f"app/{path.relative_to(PROJECT_ROOT / 'app').as_posix()} imports {sorted(wrong)}"
