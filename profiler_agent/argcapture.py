"""Capturing a job's hyperparameters from argparse, installed before torch loads (agent layer, stdlib only).

``ArgumentParser.parse_known_args`` (which ``parse_args`` calls) is wrapped; each top-level
result is handed to the sink (the session) or kept until one is set, because scripts often
parse their arguments before importing torch. Once a session has ended (its sink is unset),
nothing is kept until the next one: a later parse in the same process (a tool's own command
line, a test's) belongs to no run.
"""
from __future__ import annotations

import argparse
import functools
import threading
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["install_argparse_capture", "set_config_sink"]

_pending: dict[str, Any] = {}
_sink: Callable[[Mapping[str, Any]], None] | None = None
_keep_pending = True  # False between a session's end and the next one's start
_state = threading.local()


def set_config_sink(sink: Callable[[Mapping[str, Any]], None] | None) -> None:
    """Send parsed arguments to ``sink`` from now on, starting with any parsed before.

    ``None`` (a session ended): arguments parsed from now on are dropped until a sink is set."""
    global _sink, _keep_pending
    if sink is None and _sink is not None:
        _keep_pending = False
        _pending.clear()
    elif sink is not None:
        _keep_pending = True
    _sink = sink
    if sink is not None and _pending:
        values = dict(_pending)
        _pending.clear()
        sink(values)


def _record(namespace: Any) -> None:
    values = {k: v for k, v in vars(namespace).items() if not k.startswith("_")}
    if _sink is not None:
        _sink(values)
    elif _keep_pending:
        _pending.update(values)


def install_argparse_capture() -> None:
    """Wrap ``parse_known_args`` once per process; the job's parsing is never disturbed."""
    original = argparse.ArgumentParser.parse_known_args
    if getattr(original, "__torchscope__", False):
        return

    @functools.wraps(original)
    def parse_known_args(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        depth = getattr(_state, "depth", 0)
        _state.depth = depth + 1
        try:
            result = original(self, *args, **kwargs)
        finally:
            _state.depth = depth
        if depth == 0:  # sub-parsers re-enter; the outer namespace holds everything
            try:
                _record(result[0])
            except Exception:  # noqa: BLE001, S110 - never break the job's argument parsing
                pass
        return result

    parse_known_args.__torchscope__ = True  # type: ignore[attr-defined]
    argparse.ArgumentParser.parse_known_args = parse_known_args  # type: ignore[method-assign]
