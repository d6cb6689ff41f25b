"""Every command of COMMANDS is built from its module; a missing module fails loudly; `run` stays light."""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

import app.cli
from app.cli import COMMAND_MODULES, COMMANDS, build_parser, load_command

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_imports_and_keeps_the_protocol(name: str) -> None:
    module = load_command(name)
    assert module.__name__ == f"app.cli.{name}_cmd"
    assert isinstance(module.HELP, str) and module.HELP
    assert callable(module.add_arguments) and callable(module.run)


def test_every_command_module_is_listed() -> None:
    files = {p.stem for p in (PROJECT_ROOT / "app" / "cli").glob("*_cmd.py")}
    assert {m.rsplit(".", 1)[-1] for m in COMMAND_MODULES.values()} == files


def test_full_parser_has_every_command() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert tuple(sub.choices) == COMMANDS


def test_a_missing_command_module_is_an_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(app.cli.COMMAND_MODULES, "ls", "app.cli.no_such_cmd")
    with pytest.raises(ModuleNotFoundError, match="no_such_cmd"):
        build_parser()


def test_run_parser_does_not_import_pandas() -> None:
    code = ("import sys, app.cli; app.cli.build_parser('run'); "
            "print(sorted(m for m in ('pandas', 'numpy', 'app.analysis', 'app.data') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT_ROOT,
                         timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout
