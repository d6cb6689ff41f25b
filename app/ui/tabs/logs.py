"""Run page tab "Logs": stdout/stderr tails, the traceback of a failed job, agent errors (UI layer)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.ui.layout import md_message
from app.ui.tabs import RunContext
from app.workspace.artifacts import UnsafePath, read_text_artifact
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout

__all__ = ["TITLE", "render"]

TITLE = "Logs"

_TAIL_BYTES = 200_000


def _tail(text: str, lines: int) -> str:
    parts = text.splitlines()
    return "\n".join(parts[-lines:])


def _read(ctx: RunContext, name: str) -> str | None:
    """The tail of the run's log ``name``; None (after a warning) for a link out of the run."""
    try:
        return read_text_artifact(ctx.run.path, name, max_bytes=_TAIL_BYTES)
    except UnsafePath as e:  # a planted run's logs/stdout.log -> /etc/passwd is never shown
        st.warning(md_message(str(e)))
    except OSError as e:
        st.warning(md_message(f"{ctx.run.path / name}: cannot be read ({e.strerror or e})"))
    return None


def render(ctx: RunContext) -> None:
    """Traceback first (when the job failed), then stdout and stderr tails, then agent errors."""
    run = ctx.run
    shown = False
    tb = _read(ctx, layout.TRACEBACK_LOG)
    status = str(run.status)
    if status in (rf.RunStatus.FAILED, rf.RunStatus.CRASHED, rf.RunStatus.KILLED):
        code = run.manifest.exit_code
        st.error(f"The job {status}" + (f" with exit code {code}" if code is not None else "") + ".")
    if tb:
        st.subheader("Traceback")
        st.code(tb, language="python")
        shown = True
    lines = st.slider("Lines", 20, 2000, 200, step=20, key=ctx.key("logs_lines"))
    for title, name in (("stdout", layout.STDOUT_LOG), ("stderr", layout.STDERR_LOG)):
        text = _read(ctx, name)
        if text is None:
            continue
        st.subheader(title)
        st.code(_tail(text, lines) or "(empty)", language=None)
        shown = True
    if run.agent_errors:
        st.subheader("Agent errors")
        st.caption("Failures caught inside the agent; the job went on without that piece of data.")
        st.dataframe(
            pd.DataFrame(run.agent_errors), hide_index=True, width="stretch", key=ctx.key("logs_agent")
        )
        shown = True
    if not shown:
        st.info(
            "No logs in this run. `torchscope run -- CMD` keeps the tails of the command's stdout and "
            "stderr; runs recorded with the API or imported from traces have none."
        )
