"""The one dependency rule: lower layers never load the UI (or torch), analysis touches no file, no import cycles.

Checked in fresh interpreters (what a layer loads) and on the source with ast (what it imports,
at module level and inside functions, and which calls it makes).
"""

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
from tests.module_graph import import_graph, strongly_connected

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
        modules += list(_find_subpackages(package))
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


_FRONT = {"app.ui", "app.app_pages", "app.cli"}


@pytest.mark.parametrize("layer, above", [
    ("data", {"app.analysis", "app.workspace", "app.presentation", "app.charts", *_FRONT}),
    ("analysis", {"app.workspace", "app.presentation", "app.charts", *_FRONT}),
    ("workspace", {"app.presentation", "app.charts", *_FRONT}),
    ("presentation", {"app.workspace", "app.charts", *_FRONT}),
    ("charts", {"app.workspace", *_FRONT}),
])
def test_lower_layers_never_import_higher_ones(layer, above):  # noqa: ANN001
    """DESIGN.md's arrows: runformat ◄ data ◄ analysis ◄ workspace ◄ front ends, with charts and
    presentation beside the front ends (they take analysis results and never load); a layer
    imports only those below it. The one exception: the advisor may use app.presentation.units
    (a leaf without project imports) for the numbers in its finding texts (docs/architecture.md)."""
    for path in (PROJECT_ROOT / "app" / layer).rglob("*.py"):
        rel = path.relative_to(PROJECT_ROOT / "app").as_posix()
        wrong = _app_modules_imported(path) & above
        presentation = {m for m in _full_app_imports(path) if m.startswith("app.presentation")}
        if rel.startswith("analysis/advisor/") and presentation <= {"app.presentation.units"}:
            wrong.discard("app.presentation")
        assert not wrong, f"app/{rel} imports {sorted(wrong)}"


def _full_app_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("app."))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("app."):
            folder = PROJECT_ROOT.joinpath(*node.module.split("."))
            for a in node.names:  # `from app.presentation import units` imports the module units
                out.add(f"{node.module}.{a.name}" if (folder / f"{a.name}.py").is_file() else node.module)
    return out


def test_presentation_units_is_a_leaf():
    """The advisor's one way into presentation must not bring the rest of it along."""
    units = PROJECT_ROOT / "app" / "presentation" / "units.py"
    if units.is_file():
        assert not _full_app_imports(units), f"app/presentation/units.py imports {sorted(_full_app_imports(units))}"


# Path methods that touch the file system, module functions that do, and loaders by name.
_PATH_IO = {"read_text", "read_bytes", "write_text", "write_bytes", "iterdir", "glob", "rglob", "exists",
            "is_file", "is_dir", "stat", "lstat", "mkdir", "unlink", "rmdir", "touch", "open"}
_OS_IO = {"listdir", "scandir", "walk", "remove", "makedirs", "replace", "rename", "stat"}
_IO_MODULES = {"glob", "shutil", "tempfile", "fsspec"}
_LOADER_PREFIXES = ("load_", "read_", "list_", "find_", "scan_", "mirror_", "write_", "is_run_dir")
_LOADER_SOURCES = ("app.data", "profiler_agent.runformat", "profiler_agent")


def _io_calls(path: Path) -> list[str]:
    """Every place in ``path`` that reads or writes files, as "line: what"."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    io_aliases: set[str] = set()  # names bound to app.data / runformat modules (their loaders are I/O)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in _IO_MODULES:
                    found.append(f"{node.lineno}: import {a.name}")
                if a.name.startswith(_LOADER_SOURCES):
                    io_aliases.add(a.asname or a.name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in _IO_MODULES:
                found.append(f"{node.lineno}: from {node.module} import ...")
            if node.module.startswith(_LOADER_SOURCES):
                for a in node.names:
                    if a.name.startswith(_LOADER_PREFIXES):
                        found.append(f"{node.lineno}: from {node.module} import {a.name}")
                    io_aliases.add(a.asname or a.name)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id == "open":
            found.append(f"{node.lineno}: open(")
        elif isinstance(f, ast.Attribute):
            owner = ast.unparse(f.value)
            path_io = f.attr in _PATH_IO
            os_io = owner in {"os", "os.path"} and f.attr in _OS_IO | {"exists", "isfile", "isdir", "getmtime"}
            loader = owner.split(".")[0] in io_aliases and f.attr.startswith(_LOADER_PREFIXES)
            if path_io or os_io or loader:
                found.append(f"{node.lineno}: {owner}.{f.attr}(")
    return found


@pytest.mark.parametrize("layer", ["analysis", "presentation", "charts"])
def test_analysis_and_presentation_touch_no_file(layer: str):
    """Analysis takes typed tables and returns typed results, presentation and charts turn results
    into text and figures: no open(), no pathlib or os file calls, no glob/shutil/tempfile, no
    loader of app.data or the run format (the workspace loads)."""
    offenders = {}
    for path in sorted((PROJECT_ROOT / "app" / layer).rglob("*.py")):
        calls = _io_calls(path)
        if calls:
            offenders[path.relative_to(PROJECT_ROOT).as_posix()] = calls
    assert not offenders, f"file I/O in app/{layer}: {offenders}"


def test_the_io_check_sees_io(tmp_path: Path):
    """The check above is not vacuous: it finds each kind of file access it claims to."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import shutil\nfrom pathlib import Path\nfrom app.data.trace import load_traces\n"
        "from app.data import runs as runs_data\nimport os\n"
        "def f(p):\n    open(p)\n    Path(p).read_text()\n    os.listdir(p)\n    runs_data.load_run(p)\n",
        encoding="utf-8")
    calls = " ".join(_io_calls(sample))
    for needle in ("import shutil", "import load_traces", "open(", ".read_text(", "os.listdir(", "runs_data.load_run("):
        assert needle in calls, (needle, calls)


def test_no_import_cycles_among_app_modules():
    """No strongly connected component of more than one module in app's import graph (imports at
    module level and inside functions; ``if TYPE_CHECKING:`` blocks excluded)."""
    graph = import_graph(PROJECT_ROOT, "app")
    cycles = [c for c in strongly_connected(graph) if len(c) > 1]
    assert not cycles, f"import cycles: {[sorted(c) for c in cycles]}"


def test_the_cycle_check_sees_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert [sorted(c) for c in strongly_connected(graph) if len(c) > 1] == [["a", "b", "c"]]


_UI_CACHES = ("cache.py", "compare_cache.py", "deep_cache.py", "store.py")


@pytest.mark.parametrize("name", _UI_CACHES)
def test_ui_caches_wrap_the_workspace(name: str):
    """app/ui's cache modules wrap workspace functions: from app.data they take types only, never
    a loader or a module (the workspace is the one way in)."""
    path = PROJECT_ROOT / "app" / "ui" / name
    tree = ast.parse(path.read_text(encoding="utf-8"))
    data_dir = PROJECT_ROOT / "app" / "data"
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("app.data"):
            for a in node.names:
                is_module = node.module == "app.data" and (data_dir / f"{a.name}.py").is_file()
                assert not is_module and not a.name.startswith(_LOADER_PREFIXES), (
                    f"app/ui/{name}: from {node.module} import {a.name} (go through app.workspace)")
        elif isinstance(node, ast.Import):
            assert not any(a.name.startswith("app.data") for a in node.names), f"app/ui/{name} imports app.data"


_LOADER = ("load_", "read_", "write_", "archive_", "delete_", "ingest", "parse_", "import_")


def test_front_ends_reach_app_data_loaders_only_through_the_workspace():
    """app/ui, app/app_pages and app/cli take types, constants and pure helpers from app.data, never
    a loader (load_*, read_*, archive_*, …) or a cache module: those go through app/workspace."""
    wrong = []
    for folder in ("ui", "app_pages", "cli"):
        for path in (PROJECT_ROOT / "app" / folder).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            modules: set[str] = set()  # local names of app.data modules (`from app.data import runs as r`)
            for node in ast.walk(tree):
                if not (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("app.data")):
                    continue
                for alias in node.names:
                    module = node.module if node.module != "app.data" else f"app.data.{alias.name}"
                    if node.module == "app.data":
                        modules.add(alias.asname or alias.name)
                    if alias.name.startswith(_LOADER) or module.endswith(("trace_cache", "trace_analysis_cache")):
                        wrong.append(f"{path.relative_to(PROJECT_ROOT)}: {node.module}.{alias.name}")
            for node in ast.walk(tree):
                if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                        and node.value.id in modules and node.attr.startswith(_LOADER)):
                    wrong.append(f"{path.relative_to(PROJECT_ROOT)}:{node.lineno}: {node.value.id}.{node.attr}")
    assert not wrong, wrong
