"""Run page tab "System": CPU %, memory and GPU samples over the run's time (UI layer)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.charts.system import SeriesUnit, system_chart
from app.ui.tabs import RunContext
from app.ui.trace_view import rank_rows

__all__ = ["TITLE", "render", "group_system_columns", "SYSTEM_LABELS", "system_label"]

TITLE = "System"

# What each sampled column of system.jsonl measures (docs/run-format.md), as a line label.
SYSTEM_LABELS = {
    "cpu_percent": "training process",
    "children_cpu_percent": "its child processes (DataLoader workers…)",
    "rss_bytes": "training process",
    "children_rss_bytes": "its child processes",
    "system_cpu_percent": "all CPUs",
    "system_memory_used_bytes": "used",
    "gpu_util_percent": "GPU busy (NVML)",
    "gpu_allocated_bytes": "allocated by tensors",
    "gpu_reserved_bytes": "reserved by the caching allocator",
    "gpu_max_allocated_bytes": "peak allocated",
    "gpu_used_bytes": "used on the device (every process)",
}


def system_label(column: str) -> str:
    """The label of a sampled column: from SYSTEM_LABELS, else its name without the unit suffix."""
    if column in SYSTEM_LABELS:
        return SYSTEM_LABELS[column]
    return column.removesuffix("_percent").removesuffix("_bytes").replace("_", " ")


def group_system_columns(system: pd.DataFrame) -> list[tuple[str, SeriesUnit, list[str]]]:
    """(chart title, unit, columns) for the sampled columns, grouped by what they measure.

    Columns are recognised by their unit suffix (``_percent``, ``_bytes``) so new samples the
    agent adds appear without changes here.
    """
    numeric = [
        c
        for c in system.columns
        if c not in ("time", "rank", "pid") and pd.to_numeric(system[c], errors="coerce").notna().any()
    ]
    groups = [
        (
            "CPU of the training process (100% = one core busy)",
            SeriesUnit.PERCENT,
            [c for c in numeric if c.endswith("_percent") and not c.startswith(("gpu", "system"))],
        ),
        (
            "Memory of the training process (resident set)",
            SeriesUnit.BYTES,
            [c for c in numeric if c.endswith("_bytes") and not c.startswith(("gpu", "system"))],
        ),
        (
            "GPU utilisation",
            SeriesUnit.PERCENT,
            [c for c in numeric if c.startswith("gpu") and c.endswith("_percent")],
        ),
        (
            "GPU memory",
            SeriesUnit.BYTES,
            [c for c in numeric if c.startswith("gpu") and c.endswith("_bytes") and c != "gpu_total_bytes"],
        ),
        (
            "Whole machine: CPU (100% = every core busy)",
            SeriesUnit.PERCENT,
            [c for c in numeric if c.startswith("system") and c.endswith("_percent")],
        ),
        (
            "Whole machine: memory",
            SeriesUnit.BYTES,
            [c for c in numeric if c.startswith("system") and c.endswith("_bytes")],
        ),
    ]
    return [g for g in groups if g[2]]


def render(ctx: RunContext) -> None:
    """One chart per group of sampled columns, for the chosen rank."""
    system = rank_rows(ctx.run.system, ctx.rank)
    if system.empty or "time" not in system.columns:
        st.info(
            "No system samples in this run. `torchscope run` samples CPU %, resident memory and GPU "
            "utilisation and memory every few seconds while the job runs; runs imported from traces, "
            "and jobs shorter than one sampling interval, have none."
        )
        return
    groups = group_system_columns(system)
    if not groups:
        st.info("The system samples of this run hold no numbers to chart.")
        return
    for i, (title, unit, columns) in enumerate(groups):
        st.vega_lite_chart(
            system_chart(system, columns, unit=unit, title=title, labels={c: system_label(c) for c in columns}),
            width="stretch",
            key=ctx.key(f"system_fig_{i}"),
        )
    st.caption(f"{len(system)} samples; time is seconds since the agent started.")
