"""Run page tab "Findings": the advisor's problems, by expected gain, with evidence and fix (UI layer)."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import streamlit as st

from app.analysis.advisor import Advice, Finding, Severity, advise, describe_weight
from app.errors import TorchscopeError
from app.presentation.units import format_percent, format_us, format_value
from app.ui.cache import cached_run, cached_trace_analysis, cached_traces, run_signature
from app.ui.tabs import RunContext
from app.workspace.evidence import load_run_evidence

__all__ = ["TITLE", "prefetch", "render", "render_finding", "cached_advice", "evidence_label"]

TITLE = "Findings"

_ICON = {Severity.HIGH: ":material/error:", Severity.MEDIUM: ":material/warning:", Severity.LOW: ":material/info:"}
_LABEL = {Severity.HIGH: "High", Severity.MEDIUM: "Medium", Severity.LOW: "Low"}
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$])")


def _md(text: str) -> str:
    """Escape Markdown so op and kernel names from traces show literally (never as markup/HTML)."""
    return _MD_SPECIAL.sub(r"\\\1", text)


@st.cache_resource(max_entries=16, ttl=900, show_spinner=False)
def _advice(path: str, sig: tuple[float, ...]) -> Advice:
    run = cached_run(path)
    try:
        traces: list[Any] | None = list(cached_traces(path)) if run.trace_files else []
        analysis = cached_trace_analysis(path) if traces else None
    except TorchscopeError:
        traces, analysis = None, None  # load_run_evidence retries, then advises without them
    return advise(load_run_evidence(run, traces=traces, analysis=analysis))


def cached_advice(run_dir: str | Path) -> Advice:
    """The advisor's Advice for a run folder, recomputed when the run's files change."""
    return _advice(str(run_dir), run_signature(run_dir))


def prefetch(ctx: RunContext) -> None:
    """The run's advice into the cache, with no Streamlit element (``app.ui.prefetch``): the
    advisor's import and its rules over the run's evidence were ~0.35 s of server CPU on a
    sample run (0.56-0.97 s in the browser benchmark), the whole of this tab's first switch."""
    cached_advice(ctx.run_dir)


# Words of evidence keys as a reader writes them; unit words go (the value carries its unit).
_WORDS = {"dataloader": "DataLoader", "htod": "host→device", "dtoh": "device→host", "comm": "communication",
          "cpu": "CPU", "cpus": "CPUs", "gpu": "GPU", "cuda": "CUDA", "ddp": "DDP", "amp": "AMP", "mma": "MMA",
          "lr": "learning rate", "val": "validation", "ms": "", "us": "", "s": "", "gib": "", "mib": "", "mb": "",
          "param": "parameters"}
# Words that already say "a duration": "largest gap", not "largest gap time".
_DURATION_WORDS = {"gap", "time", "idle", "blocked", "wait", "latency"}
# Settings a user types under these names: shown as code, not reworded.
_CODE_NAMES = {"num_workers", "pin_memory", "persistent_workers", "prefetch_factor", "weight_decay", "batch_size",
               "max_norm", "intra_op_threads"}


def evidence_label(key: str) -> str:
    """``dataloader_ms_per_step`` → "DataLoader time per step", ``step_ms`` → "Step time",
    ``peak_allocated_gib`` → "Peak allocated": the metric label of an evidence key."""
    if key in _CODE_NAMES:
        return key
    tokens = [t for t in key.split("_") if t]
    timed = any(t in ("ms", "us", "s") for t in tokens)
    words = [_WORDS.get(t, t) for t in tokens]
    words = [w for w in words if w]
    if timed and not _DURATION_WORDS & set(words):
        cut = words.index("per") if "per" in words else len(words)
        words.insert(cut, "time")
    text = " ".join(words) or key
    return text[0].upper() + text[1:]


def _fmt(v: float, key: str = "") -> str:
    """An evidence number as read: shares in %, *_ms in ms, *_us in µs (ms from 1 ms on), *_s in
    s/ms/µs, *_gib in GiB, *_mib in MiB, *_mb in MB, *_ratio as ×, counts with separators."""
    f = float(v)
    if f != f:
        return "–"
    if key.endswith("share"):
        return format_percent(f)
    if key.endswith("_ms") or "_ms_" in key:
        return f"{f:,.2f} ms"
    if key.endswith("_us") or "_us_" in key:
        return format_us(f)
    if key.endswith("_s") or "_s_" in key:
        return format_value(f, "s")
    if key.endswith("_gib"):
        return f"{f:,.2f} GiB"
    if key.endswith("_mib") or "_mib_" in key:
        return f"{f:,.2f} MiB"
    if key.endswith("_mb") or "_mb_" in key:
        return f"{f:,.2f} MB"
    if key.endswith("_ratio"):
        return f"{f:.2f}×"
    if f.is_integer() and abs(f) < 1e12:
        return f"{int(f):,}"
    return f"{f:.4g}"


def render_finding(f: Finding, *, key: str, expanded: bool = False) -> None:
    """One finding: explanation, evidence numbers, expected gain, the chart that proves it, fix, docs."""
    rank = f" · rank {f.rank}" if f.rank is not None else ""
    with st.expander(f"{_LABEL[f.severity]}: {f.title}", expanded=expanded, icon=_ICON[f.severity]):
        st.markdown(_md(f.explanation))
        items = list(f.evidence.items())
        cols = st.columns(min(4, max(1, len(items))))
        for i, (k, v) in enumerate(items[:4]):
            cols[i].metric(evidence_label(k), _fmt(v, k))
        if len(items) > 4:  # the rest as one line of text: a table here drew as an empty box until scrolled to
            st.markdown("  ·  ".join(f"{_md(evidence_label(k))}: **{_md(_fmt(v, k))}**" for k, v in items[4:]))
        weight = describe_weight(f.weight)
        st.markdown(f"**Expected gain:** {_md(f.expected_gain)}  \n"
                    f"**Where to see it:** {_md(f.chart)}  \n"
                    f"**Severity:** {f.severity.value}{rank} · rule `{f.rule}`"
                    + (f"  \n**Rests on:** {_md(weight)}" if weight else ""))
        st.markdown(f"**Fix:** {_md(f.fix_summary)}")
        st.code(f.fix, language="python")
        st.link_button("PyTorch documentation", f.doc_url)


def _render_summary(advice: Advice) -> None:
    counts = {s: sum(1 for f in advice.findings if f.severity is s) for s in Severity}
    cols = st.columns(4)
    cols[0].metric("Findings", len(advice.findings))
    for col, s in zip(cols[1:], Severity):
        col.metric(_LABEL[s], counts[s])


def _render_not_checked(advice: Advice, ctx: RunContext) -> None:
    for p in advice.problems:
        st.warning(f"Partial advice: {p}")
    for rule_id, msg in advice.errors.items():
        st.warning(f"Rule {rule_id} failed on this run: {msg}")
    if advice.skipped:
        with st.expander(f"{len(advice.skipped)} rules could not look at this run, {len(advice.checked)} checked"):
            # Text, not a table: a data grid in a closed expander still costs the browser its canvas.
            st.markdown("\n".join(f"- `{rule}` needs {_md(str(needs))}" for rule, needs in advice.skipped.items()))


def render(ctx: RunContext) -> None:
    """The advisor's findings for the run, largest expected gain first."""
    with st.spinner("Running the advisor's rules…"):
        advice = cached_advice(ctx.run_dir)
    findings: list[Any] = list(advice.findings)
    if ctx.rank is not None:
        findings = [f for f in findings if f.rank is None or f.rank == ctx.rank]
    _render_summary(advice)
    if not findings:
        st.success(f"No problems found: {len(advice.checked)} rules checked this run.")
    else:
        st.caption("Ordered by expected gain. Each finding names the tab and chart that show its evidence.")
    for i, f in enumerate(findings):
        render_finding(f, key=ctx.key(f"finding_{i}"), expanded=i < 2)
    _render_not_checked(advice, ctx)
    st.download_button("Download findings (JSON)", json.dumps(advice.to_json(), indent=2),
                        file_name="findings.json", mime="application/json", key=ctx.key("findings_download"))
