"""A run's artifacts as the front ends open them: the run, its module tree, allocator snapshots, memory timelines (workspace layer).

The loaders are app.data's (files → typed tables); the front ends reach them only through here,
so that the workspace stays the one way in (app/ui wraps these in bounded st.cache_*).
"""
from __future__ import annotations

from app.data.runs import RunData, load_module_tree, load_run, read_text_artifact
from app.data.snapshot import load_memory_timeline_raw, load_snapshot, parse_memory_timeline_raw

__all__ = ["RunData", "load_run", "load_module_tree", "read_text_artifact", "load_snapshot", "load_memory_timeline_raw",
           "parse_memory_timeline_raw"]
