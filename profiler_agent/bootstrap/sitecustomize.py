"""Torchscope's bootstrap: put on PYTHONPATH by ``torchscope run`` so every Python process of the job is instrumented.

Python imports ``sitecustomize`` at start-up. This one arms the agent (which waits for
``import torch``) and then runs any other ``sitecustomize`` further down sys.path, so a
site's own customisation keeps working. It never raises: a broken agent leaves the job as is.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _arm_agent() -> None:
    home = os.environ.get("TORCHSCOPE_AGENT_HOME")
    if importlib.util.find_spec("profiler_agent") is None and home and home not in sys.path:
        sys.path.append(home)  # last: the job's own modules always win
    from profiler_agent.autoinstrument import install

    install()


def _chain_sitecustomize() -> None:
    this = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    try:
        if importlib.util.find_spec("sitecustomize") is not None:
            importlib.import_module("sitecustomize")
    finally:
        sys.path[:] = saved
        if "sitecustomize" not in sys.modules and this is not None:
            sys.modules["sitecustomize"] = this


try:
    _arm_agent()
except Exception as _e:  # noqa: BLE001 - never break the job's interpreter start-up
    print(f"torchscope agent: bootstrap failed ({type(_e).__name__}: {_e}); the job runs uninstrumented",
          file=sys.stderr)
try:
    _chain_sitecustomize()
except Exception as _e:  # noqa: BLE001
    print(f"torchscope agent: the site's sitecustomize failed ({type(_e).__name__}: {_e})", file=sys.stderr)
