"""Streamlit's "magic" (a bare expression written to the page) is off for the app: no page script relies
on it, and both ways of starting the app say so (.streamlit/config.toml and `torchscope ui`'s flags)."""
from __future__ import annotations

import argparse
import ast
import tomllib
from pathlib import Path

from app.cli import build_parser
from app.cli.ui_cmd import build_command

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = [ROOT / "app" / "streamlit_app.py", *sorted((ROOT / "app" / "app_pages").glob("*.py"))]


def _bare_expressions(code: str) -> list[int]:
    """Lines of the statements magic would write with st.write (its rule: not a call, a yield or an
    await, and not a docstring)."""
    found = []
    for node in ast.walk(ast.parse(code)):
        for attr in ("body", "orelse", "finalbody"):
            body = getattr(node, attr, None)
            if not isinstance(body, list):
                continue
            for i, stmt in enumerate(body):
                if not isinstance(stmt, ast.Expr) or isinstance(stmt.value, (ast.Call, ast.Yield, ast.YieldFrom,
                                                                             ast.Await)):
                    continue
                if i == 0 and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
                    continue  # a docstring
                found.append(stmt.lineno)
    return found


def test_no_page_writes_a_bare_expression() -> None:
    assert len(SCRIPTS) > 2
    found = {str(p.relative_to(ROOT)): _bare_expressions(p.read_text()) for p in SCRIPTS}
    assert {k: v for k, v in found.items() if v} == {}
    assert _bare_expressions('"""doc"""\nx = 1\nx\n"text"\nprint(x)\n') == [3, 4]  # what magic would write


def test_magic_is_off_in_the_config_and_in_torchscope_ui(tmp_path: Path) -> None:
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["runner"]["magicEnabled"] is False
    args: argparse.Namespace = build_parser().parse_args(["ui", "--root", str(tmp_path)])
    cmd, _ = build_command(args)
    assert cmd[cmd.index("--runner.magicEnabled") + 1] == "false"
