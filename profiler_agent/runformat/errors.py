"""Torchscope's exception hierarchy (run-format layer, stdlib only).

Every error Torchscope raises on purpose derives from :class:`TorchscopeError`, so callers
(the CLI, the app's pages) can catch one class and show its message::

    TorchscopeError
     ├── RunFormatError            a run store or run folder is not what the format says
     │    ├── RunStoreNotFoundError   the store folder does not exist
     │    ├── NotARunError            a folder has no readable run.json
     │    ├── CorruptFileError        a file exists but cannot be parsed (names file and problem)
     │    ├── SchemaVersionError      a manifest is newer than this reader understands
     │    └── RunNotFoundError        a run reference (id, name prefix) matches no run, or several
     └── (app layer) TraceError, AnalysisError, ... defined in app/errors.py

Messages always name the file (or reference) and say what was expected.
"""
from __future__ import annotations

__all__ = [
    "TorchscopeError",
    "RunFormatError",
    "RunStoreNotFoundError",
    "NotARunError",
    "CorruptFileError",
    "SchemaVersionError",
    "RunNotFoundError",
]


class TorchscopeError(Exception):
    """Root of every error Torchscope raises deliberately."""


class RunFormatError(TorchscopeError):
    """A run store or a run folder does not follow the run format."""


class RunStoreNotFoundError(RunFormatError):
    """The run store folder does not exist."""


class NotARunError(RunFormatError):
    """A folder is not a run: it has no run.json."""


class CorruptFileError(RunFormatError):
    """A run file exists but cannot be read; the message names the file and the problem."""


class SchemaVersionError(RunFormatError):
    """A manifest was written by a newer Torchscope than this one."""


class RunNotFoundError(RunFormatError):
    """A run reference matches no run, or more than one."""
