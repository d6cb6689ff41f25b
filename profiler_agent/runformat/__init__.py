"""The run format v1: the on-disk contract between the agent and every reader (stdlib only).

Public surface: names of files (``layout``), the manifest schema (``schema``), the atomic
writer (``writer``), the tolerant reader (``reader``) and the error hierarchy (``errors``).
Nothing here imports torch, pandas or streamlit.

The names are loaded on first use (PEP 562): ``from profiler_agent.runformat import read_manifest``
imports the reader and what it needs, no more. A process that only needs the errors or the layout
(``torchscope ls --json`` on an indexed store, the agent's launcher) does not pay for the writer,
the schema or the liveness checks. ``_SUBMODULE_OF`` maps each public name to its module;
``tests/runformat/test_lazy_init.py`` imports every name of ``__all__``.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what mypy and readers see; at run time the names come from __getattr__
    from . import layout
    from .errors import (
        CorruptFileError,
        NotARunError,
        RunFormatError,
        RunNotFoundError,
        RunStoreNotFoundError,
        SchemaVersionError,
        TorchscopeError,
    )
    from .reader import (
        HEARTBEAT_INTERVAL_S,
        HEARTBEAT_STALE_S,
        JsonlRead,
        StoreListing,
        effective_status,
        find_run,
        is_run_dir,
        list_runs,
        not_a_run_problem,
        read_jsonl,
        read_manifest,
        read_samples,
    )
    from .schema import (
        SCHEMA_VERSION,
        Artifact,
        ArtifactKind,
        Manifest,
        RunStatus,
        manifest_from_dict,
        manifest_to_dict,
    )
    from .writer import (
        JsonlWriter,
        add_artifact,
        atomic_write_bytes,
        atomic_write_json,
        atomic_write_text,
        create_run,
        new_run_id,
        note_run_changed,
        release_status_space,
        remove_orphaned_temp_files,
        remove_temp_files,
        reserve_status_space,
        update_manifest,
        update_manifest_final,
        write_manifest,
    )

__all__ = [
    "layout",
    "SCHEMA_VERSION",
    "HEARTBEAT_INTERVAL_S",
    "HEARTBEAT_STALE_S",
    "Artifact",
    "ArtifactKind",
    "Manifest",
    "RunStatus",
    "JsonlRead",
    "StoreListing",
    "JsonlWriter",
    "TorchscopeError",
    "RunFormatError",
    "RunStoreNotFoundError",
    "NotARunError",
    "CorruptFileError",
    "SchemaVersionError",
    "RunNotFoundError",
    "manifest_from_dict",
    "manifest_to_dict",
    "read_manifest",
    "read_jsonl",
    "read_samples",
    "effective_status",
    "is_run_dir",
    "list_runs",
    "not_a_run_problem",
    "find_run",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_json",
    "create_run",
    "new_run_id",
    "write_manifest",
    "update_manifest",
    "add_artifact",
    "reserve_status_space",
    "release_status_space",
    "remove_orphaned_temp_files",
    "remove_temp_files",
    "update_manifest_final",
    "note_run_changed",
]

_ERRORS = ("TorchscopeError", "RunFormatError", "RunStoreNotFoundError", "NotARunError", "CorruptFileError",
           "SchemaVersionError", "RunNotFoundError")
_READER = ("HEARTBEAT_INTERVAL_S", "HEARTBEAT_STALE_S", "JsonlRead", "StoreListing", "effective_status", "find_run",
           "is_run_dir", "list_runs", "not_a_run_problem", "read_jsonl", "read_manifest", "read_samples")
_SCHEMA = ("SCHEMA_VERSION", "Artifact", "ArtifactKind", "Manifest", "RunStatus", "manifest_from_dict",
           "manifest_to_dict")
_WRITER = ("JsonlWriter", "add_artifact", "atomic_write_bytes", "atomic_write_json", "atomic_write_text",
           "create_run", "new_run_id", "note_run_changed", "release_status_space", "remove_orphaned_temp_files",
           "remove_temp_files", "reserve_status_space", "update_manifest", "update_manifest_final", "write_manifest")
# Public name -> the submodule that defines it ("layout" is a submodule itself).
_SUBMODULE_OF: dict[str, str] = {
    "layout": "",
    **dict.fromkeys(_ERRORS, "errors"),
    **dict.fromkeys(_READER, "reader"),
    **dict.fromkeys(_SCHEMA, "schema"),
    **dict.fromkeys(_WRITER, "writer"),
}


def __getattr__(name: str) -> Any:  # Any: one of the public names above, of many types
    where = _SUBMODULE_OF.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if where:
        value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    else:
        value = importlib.import_module(f"{__name__}.{name}")
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
