"""Every page of the navigation and every tab of the Run page exists and imports (no AppTest: fast)."""
from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

from app.ui.layout import PAGES, PageSpec
from app.ui.run_view import RUN_TABS

TABS_DIR = Path(__file__).resolve().parents[2] / "app" / "ui" / "tabs"


@pytest.mark.parametrize("page", PAGES, ids=[p.url_path for p in PAGES])
def test_page_script_exists_and_its_imports_resolve(page: PageSpec) -> None:
    path = Path(page.path)
    assert path.is_file(), path
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name) or importlib.util.find_spec(f"{node.module}.{alias.name}"), (
                    f"{path.name}: {node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                importlib.import_module(alias.name)


def test_one_default_page() -> None:
    assert [p.url_path for p in PAGES if p.default] == ["runs"]
    assert len({p.url_path for p in PAGES}) == len(PAGES)


def test_every_tab_module_is_on_the_run_page() -> None:
    listed = {m.__name__.rsplit(".", 1)[-1] for m in RUN_TABS}
    assert listed == {p.stem for p in TABS_DIR.glob("*.py") if p.stem != "__init__"}
    for tab in RUN_TABS:
        assert isinstance(tab.TITLE, str) and tab.TITLE and callable(tab.render)
    assert len({t.TITLE for t in RUN_TABS}) == len(RUN_TABS)
