"""The run format v1: the on-disk contract between the agent and every reader (stdlib only).

Public surface: names of files (``layout``), the manifest schema (``schema``), the atomic
writer (``writer``), the tolerant reader (``reader``) and the error hierarchy (``errors``).
Nothing here imports torch, pandas or streamlit.
"""
from __future__ import annotations

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
]
