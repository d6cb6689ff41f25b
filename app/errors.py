"""Errors of the app layers (data, analysis, CLI), rooted in the run format's TorchscopeError.

    TorchscopeError                      (profiler_agent.runformat.errors)
     ├── RunFormatError ...              run store / run folder problems
     ├── TraceError                      a trace file cannot be read (names the file and problem)
     ├── AnalysisError                   an analysis cannot be computed from the data given
     └── UsageError                      a CLI argument or input path is wrong
"""
from __future__ import annotations

from profiler_agent.runformat.errors import TorchscopeError

__all__ = ["TorchscopeError", "TraceError", "AnalysisError", "UsageError"]


class TraceError(TorchscopeError):
    """A profiler trace cannot be read; the message names the file and what is wrong."""


class AnalysisError(TorchscopeError):
    """An analysis cannot be computed from the data it was given."""


class UsageError(TorchscopeError):
    """A command-line argument or input path is wrong."""
