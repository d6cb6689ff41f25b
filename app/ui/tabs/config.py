"""Run page tab "Config": hyperparameters and the environment the run was recorded in (UI layer)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

import pandas as pd
import streamlit as st

from app.data.tbprofiler import IMPORTED_TAG
from app.ui.tabs import RunContext
from profiler_agent import runformat as rf

__all__ = ["TITLE", "render", "flatten_config", "table_height", "device_table"]

TITLE = "Config"


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """Nested config as (dotted key, value as text) rows, sorted by key, so two runs diff line by line."""
    rows: list[tuple[str, str]] = []
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            rows += flatten_config(value, prefix=f"{name}.")
        else:
            rows.append((name, value if isinstance(value, str) else json.dumps(value, default=str)))
    return sorted(rows)


def _kv(d: Mapping[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(flatten_config(d), columns=["Key", "Value"])


_DEVICE_COLUMNS = {
    "type": "Type", "index": "Index", "name": "Name", "count": "Cores", "threads": "Torch threads",
    "total_memory_gib": "Memory (GiB)", "capability": "Compute capability",
    "multi_processor_count": "Multiprocessors",
}


def device_table(devices: list[Mapping[str, Any]]) -> pd.DataFrame:
    """The manifest's devices with readable headers, memory in GiB instead of bytes; fields this
    table does not know keep their names."""
    df = pd.DataFrame([dict(d) for d in devices])
    if "total_memory_bytes" in df.columns:
        gib = pd.to_numeric(df.pop("total_memory_bytes"), errors="coerce") / 2**30
        df["total_memory_gib"] = gib.round(1)
    ordered = [c for c in _DEVICE_COLUMNS if c in df.columns] + [c for c in df.columns if c not in _DEVICE_COLUMNS]
    return df[ordered].rename(columns=_DEVICE_COLUMNS)


def table_height(rows: int) -> int:
    """Pixels for st.dataframe to show ``rows`` rows and the header without scrolling (up to 40
    rows): the default height cuts a config at 10 rows, and configs are read whole, like a diff."""
    return 35 * (min(rows, 40) + 1) + 3


def _render_hyperparameters(ctx: RunContext, m: rf.Manifest) -> None:
    st.subheader("Hyperparameters")
    if m.config:
        table = _kv(m.config)
        st.dataframe(
            table, hide_index=True, width="stretch", height=table_height(len(table)), key=ctx.key("config_table")
        )
    elif IMPORTED_TAG in m.tags:
        source = m.extra.get("imported_from")
        st.info(
            f"Imported from `{source or 'a trace'}`: a profiler trace records no hyperparameters, command "
            "line, host or working folder, only its devices and distributed setup (below). Record the job "
            "with `torchscope run` to get them."
        )
    else:
        st.info(
            "No hyperparameters recorded. `torchscope run` captures the script's argparse arguments; "
            "with the API, pass `config={...}`."
        )


def _render_environment(ctx: RunContext, m: rf.Manifest) -> None:
    env = {
        "host": m.host,
        "cwd": m.cwd,
        "pid": m.pid,
        "exit_code": m.exit_code,
        "world_size": m.world_size,
        "git": dict(m.git),
        "versions": dict(m.versions),
    }
    st.subheader("Environment")
    env_table = _kv({k: v for k, v in env.items() if v not in (None, {}, "")})
    st.dataframe(
        env_table,
        hide_index=True,
        width="stretch",
        height=table_height(len(env_table)),
        key=ctx.key("config_env"),
    )
    if m.devices:
        st.subheader("Devices")
        devices = device_table(list(m.devices))
        st.dataframe(
            devices,
            hide_index=True,
            width="stretch",
            height=table_height(len(devices)),
            key=ctx.key("config_devices"),
        )


def render(ctx: RunContext) -> None:
    """Config table, then command, versions, git, host and devices."""
    m = ctx.run.manifest
    _render_hyperparameters(ctx, m)
    st.subheader("Command")
    if m.command and IMPORTED_TAG in m.tags:
        st.caption("The import, not the job:")
        st.code(shlex.join(m.command), language="bash")
    elif m.command:
        st.code(shlex.join(m.command), language="bash")
    _render_environment(ctx, m)
    if m.extra:
        with st.expander("Other manifest fields"):
            st.json(dict(m.extra), expanded=False)
    if m.notes:
        st.subheader("Notes")
        st.text(m.notes)
