"""profiler_agent.runformat loads its names on first use (PEP 562): every public name still imports."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import profiler_agent.runformat as rf

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", rf.__all__)
def test_every_public_name_imports(name: str) -> None:
    module = importlib.import_module("profiler_agent.runformat")
    value = getattr(module, name)
    assert value is not None
    where = rf._SUBMODULE_OF[name]
    if where:  # the same object as the defining module's
        assert value is getattr(importlib.import_module(f"profiler_agent.runformat.{where}"), name)
    assert name in dir(module)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        rf.no_such_name  # noqa: B018


def test_the_errors_alone_load_no_reader_or_writer() -> None:
    code = ("import sys\nfrom profiler_agent.runformat.errors import TorchscopeError\n"
            "from profiler_agent.runformat import layout, TorchscopeError as T\n"
            "from profiler_agent.runformat import *\n"  # every name of __all__, through __getattr__
            "print(sorted(m for m in sys.modules if m.startswith('profiler_agent.runformat.')))")
    code_lazy = code.replace("from profiler_agent.runformat import *\n", "")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    lazy = subprocess.run([sys.executable, "-c", code_lazy], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert lazy.returncode == 0, lazy.stderr[-2000:]
    loaded = eval(lazy.stdout)  # noqa: S307 - a list of module names printed by the child above
    assert not {"profiler_agent.runformat.reader", "profiler_agent.runformat.writer",
                "profiler_agent.runformat.schema", "profiler_agent.runformat.liveness"} & set(loaded)
    every = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=60)
    assert every.returncode == 0, every.stderr[-2000:]
    assert "profiler_agent.runformat.writer" in eval(every.stdout)  # noqa: S307
