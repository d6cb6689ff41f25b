"""The Compare page's top half: run selection (URL ``runs=<baseline>,<candidate>,...``), options,
verdicts and export buttons (UI layer)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import streamlit as st

from app.analysis.compare.comparison import CompareOptions, Comparison
from app.analysis.compare.headline import HeadlineVerdict
from app.analysis.compare.tables import OpGrouping
from app.analysis.run.final_value import final_label
from app.analysis.stats.ratio import Verdict
from app.charts.compare import figures_to_html, make_report_figures
from app.presentation.ranks_text import comparison_stragglers, straggler_change_sentence
from app.presentation.report import (
    format_ratio,
    format_report_html,
    format_report_markdown,
    format_value,
    verdict_display_table,
)
from app.presentation.units import format_change
from app.ui.compare_headline import render_headline
from app.ui.compare_memory import cached_memory_categories
from app.ui.layout import md_escape, md_message, record_hint
from app.ui.store import cached_store_view
from app.workspace.refs import resolve_store_run
from profiler_agent import runformat as rf

__all__ = ["GROUP_PREFIX", "Selection", "store_groups", "render_selection", "render_options", "render_verdicts",
           "render_exports"]


# Picker keys of replicate groups (runs recorded with `torchscope run --group NAME`): "group:NAME",
# also accepted in the URL (runs=group:baseline,group:optimized).
GROUP_PREFIX = "group:"


@dataclass(frozen=True)
class Selection:
    """The sides to compare: ``paths`` maps run id → folder; ``labels`` key → display label;
    ``groups`` maps a group key ("group:NAME") → the folders of its runs, newest first."""
    baseline: str
    candidates: tuple[str, ...]
    paths: dict[str, Path]
    labels: dict[str, str]
    groups: dict[str, tuple[Path, ...]] = field(default_factory=dict)

    def group_name(self, key: str) -> str | None:
        """The group a picker key names, or None for a run."""
        return key[len(GROUP_PREFIX):] if key in self.groups else None


def store_groups(table: pd.DataFrame) -> dict[str, tuple[Path, ...]]:
    """Group key → run folders (newest first, as the store table is sorted) of every run with a group."""
    if "group" not in table.columns:
        return {}
    out: dict[str, list[Path]] = {}
    for group, path in zip(table["group"], table["path"]):
        if isinstance(group, str) and group:
            out.setdefault(GROUP_PREFIX + group, []).append(Path(path))
    return {k: tuple(v) for k, v in sorted(out.items())}


def _apply_url(ids: list[str], paths: dict[str, Path], labels: dict[str, str], root: Path) -> None:
    wanted = st.query_params.get("runs")
    # The URL wins only when it changed since this page last wrote it (a link was followed).
    if not wanted or wanted == st.session_state.get("compare_url_seen"):
        return
    st.session_state["compare_url_seen"] = wanted
    chosen = []
    for ref in [r.strip() for r in wanted.split(",") if r.strip()]:
        if ref.startswith(GROUP_PREFIX):
            if ref in ids:
                chosen.append(ref)
            else:
                st.warning(f"Group {md_escape(repr(ref[len(GROUP_PREFIX):])[:80])} from the URL: no run of the store has this group.")
            continue
        if ref in ids:
            chosen.append(ref)
            continue
        try:  # a name, a unique prefix, or a run folder of the store
            found = resolve_store_run(ref, root)
            manifest = rf.read_manifest(found)
        except rf.TorchscopeError as e:
            st.warning(f"Run from the URL: {md_message(str(e))}")
            continue
        extra = st.session_state.setdefault("compare_extra", {})
        extra[found.name] = (str(found), f"{manifest.name} · {found.name}")
        chosen.append(found.name)
    if chosen:
        st.session_state["compare_baseline"] = chosen[0]
        st.session_state["compare_candidates"] = [c for c in chosen[1:] if c != chosen[0]] or chosen[1:]


def render_selection(root: Path) -> Selection | None:
    """Pick a baseline and candidates from the store (initially from the ``runs`` query
    parameter); keep the URL in step. None (after saying why) when there is nothing to compare."""
    try:
        table = cached_store_view(root).store.table
    except rf.RunStoreNotFoundError:
        st.info(f"No run store at `{root}` yet. " + record_hint(root))
        return None
    groups = store_groups(table)
    # Groups first: a group of replicates is the side to prefer when the store has one.
    ids = [*groups, *table["id"]]
    paths = {i: Path(p) for i, p in zip(table["id"], table["path"])}
    labels = {i: f"{n} · {i}" for i, n in zip(table["id"], table["name"])}
    labels.update({k: f"group {k[len(GROUP_PREFIX):]} · {len(v)} run{'s' if len(v) != 1 else ''}"
                   for k, v in groups.items()})
    _apply_url(ids, paths, labels, root)
    for key, (path, label) in st.session_state.get("compare_extra", {}).items():
        if key not in ids:
            ids.append(key)
            paths[key], labels[key] = Path(path), label
    if len(ids) < 1:
        st.info(f"The run store `{root}` has no runs yet. " + record_hint(root))
        return None
    if st.session_state.get("compare_baseline") not in ids:
        runs = ids[len(groups):] or ids
        st.session_state["compare_baseline"] = runs[min(1, len(runs) - 1)]  # newest first: the older one
    st.session_state["compare_candidates"] = [c for c in st.session_state.get("compare_candidates", []) if c in ids]
    left, right = st.columns([1, 2])
    group_help = (" A group (runs recorded with `torchscope run --group NAME`) is judged on all its runs: the "
                  "interval then covers run-to-run noise.") if groups else ""
    base = left.selectbox("Baseline", ids, key="compare_baseline", format_func=lambda i: labels.get(i, i),
                          help="A run or a group of runs." + group_help if groups else None)
    cands = right.multiselect("Candidates", ids, key="compare_candidates", format_func=lambda i: labels.get(i, i),
                              help="One or more runs (or groups) to judge against the baseline." + group_help)
    url = ",".join([base, *cands])
    if st.query_params.get("runs") != url:
        st.query_params["runs"] = url
        st.session_state["compare_url_seen"] = url
    if not cands:
        st.info("Pick one or more candidates to compare with the baseline (or select runs on the Runs page "
                "and press Compare).")
        return None
    return Selection(baseline=base, candidates=tuple(cands), paths=paths, labels=labels, groups=groups)


def render_options() -> CompareOptions:
    """The comparison knobs, folded away; defaults are the documented ones."""
    with st.expander("Comparison settings"):
        c1, c2, c3 = st.columns(3)
        auto = c1.checkbox("Automatic warm-up", value=True, key="compare_auto_warmup",
                           help="Drop min(5, n/10) steps at the start of metrics (0 for trace steps).")
        warmup = None if auto else int(c1.number_input("Warm-up steps to drop", 0, 10_000, 5, key="compare_warmup"))
        threshold = c2.slider("Practical threshold (%)", 0.0, 20.0, 2.0, 0.5, key="compare_threshold",
                              help="A change smaller than this is 'same' even when significant.")
        by = c3.radio("Match operators by", [g.value for g in OpGrouping], key="compare_by", horizontal=True)
    return CompareOptions(warmup_steps=warmup, threshold=threshold / 100.0, op_grouping=OpGrouping(by))


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~$])")


def _plain(text: str) -> str:
    """User text (run names, file paths, messages) made inert for Streamlit's Markdown."""
    return _MD_SPECIAL.sub(r"\\\1", str(text))


def _pct(ratio: float | None) -> str | None:
    return format_change(ratio)


def _colour(verdict: object, inverse: bool) -> str:
    # Colour a delta only when the verdict says it is real; "same" and "inconclusive" stay grey whatever its sign.
    if str(verdict) in (Verdict.SAME, Verdict.UNKNOWN, "", HeadlineVerdict.INCONCLUSIVE):
        return "off"
    return "inverse" if inverse else "normal"


def _metric_row(cmp: Comparison) -> None:
    cols = st.columns(4)
    est, tp = cmp.step_time, cmp.throughput
    # An inconclusive headline greys the speed tiles too: no green or red the headline does not back.
    doubt = str(getattr(getattr(cmp, "headline", None), "verdict", "")) == HeadlineVerdict.INCONCLUSIVE
    step_colour = "off" if doubt else _colour(cmp.step_verdict, True)
    # The delta is the change of the medians this tile shows; the judged ratio (of trimmed geometric
    # means) is in its help and the headline, which says so when the two part (headline._shape_reason).
    medians = est.candidate / est.baseline if est and est.baseline and est.baseline > 0 else None
    cols[0].metric("Step time (median, steady state)", format_value(est.candidate if est else None, "s"),
                   _pct(medians), delta_color=step_colour,
                   help=f"Verdict: {cmp.step_verdict}. Baseline {format_value(est.baseline if est else None, 's')}; "
                        f"the delta is the medians' change; judged ratio "
                        f"{format_ratio(est.ratio, est.lo, est.hi) if est else '–'} (95 % CI).")
    unit = cmp.throughput_unit.replace("_per_", "/")
    cols[1].metric(f"Throughput ({unit})", format_value(tp.candidate if tp else None), _pct(tp.ratio if tp else None),
                   delta_color="off" if doubt else _colour(cmp.throughput_verdict, False),
                   help=f"Verdict: {cmp.throughput_verdict}.")
    mem_a, mem_b = cmp.peak_memory
    cols[2].metric(f"Peak memory ({mem_a.quantity})" if mem_a.bytes is not None else "Peak memory",
                   format_value(mem_b.bytes, "bytes"), _pct(cmp.memory_ratio),
                   delta_color=_colour(cmp.memory_verdict, True),
                   help=f"Verdict: {cmp.memory_verdict}. {mem_a.description.capitalize()} (`{mem_a.source}`); "
                        f"baseline {format_value(mem_a.bytes, 'bytes')}. The same quantity on both sides: the "
                        "best one both runs have (GPU allocator peak, traced tensor allocations, host RSS).")
    loss = cmp.metrics[cmp.metrics["metric"] == "loss"] if len(cmp.metrics) else cmp.metrics
    if len(loss):
        r = loss.iloc[0]
        wa, _, wb = str(r["window"]).partition("/")
        cols[3].metric(final_label("loss", _int(wb)).capitalize(), format_value(r["candidate_final"]), _pct(r["ratio"]),
                       delta_color=_colour(r["verdict"], True),
                       help=f"Verdict: {r['verdict']}. The final value (app.analysis.run.final_value, the same number as the "
                            f"Run page and `torchscope ls`): median of the last {wb or '?'} values of the candidate, "
                            f"{wa or '?'} of the baseline ({format_value(r['baseline_final'])}).")


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def render_verdicts(comparisons: list[Comparison]) -> None:
    """Headline and verdict table of each candidate; metric tiles too when there are at most two."""
    for cmp in comparisons:
        # Many candidates: one line each, the details in the verdict table below.
        render_headline(cmp, compact=len(comparisons) > 2)
        # Once per candidate: here, and not again among the headline's reasons (compare_headline).
        if cmp.load_warning:
            st.warning(_plain(f"Machine load: {cmp.load_warning}"), icon="⚠️")
        if len(comparisons) <= 2:
            _metric_row(cmp)
    rows, hidden = [], []
    for cmp in comparisons:
        v, gone = verdict_display_table(cmp)
        v.insert(0, "run", cmp.candidate.label)
        rows.append(v)
        hidden += [f"{cmp.candidate.label}: {h}" for h in gone]
    table = pd.concat(rows, ignore_index=True)
    # Values are formatted text with units (ms, MiB, samples/s); "—" marks a missing value.
    st.dataframe(table, hide_index=True, width="stretch",
                 column_config={"change": st.column_config.TextColumn("change", help="candidate vs baseline"),
                                "ratio": st.column_config.TextColumn("ratio", help="candidate / baseline"),
                                "95% CI": st.column_config.TextColumn(
                                    "95% CI", help="bootstrap interval of the ratio of medians; — where none "
                                    "exists (a single value such as a peak, or fewer than 2 steps)")})
    for h in hidden:
        st.caption(_plain(h))
    for cmp in comparisons:
        shown = getattr(cmp, "sign_note", "")  # already under the headline
        for note in cmp.notes:
            if note != shown:
                st.caption(_plain(f"{cmp.candidate.label}: {note}"))
        _render_stragglers(cmp)


def _render_stragglers(cmp: Comparison) -> None:
    """The change in stragglers (multi-rank sides only): one sentence, as in ``torchscope diff``."""
    change = comparison_stragglers(cmp)
    sentence = straggler_change_sentence(change, cmp.baseline.label, cmp.candidate.label) if change else None
    if sentence:
        st.info(_plain(sentence))


def render_exports(cmp: Comparison, advice: list[dict[str, str]] | None = None) -> None:
    """Download buttons: Markdown for a PR comment, self-contained interactive HTML (both with
    the advisor's findings rows when given)."""
    cats = cached_memory_categories(cmp)  # the Memory tab's cached read of the timelines
    stem = re.sub(r"[^\w.-]+", "_", f"{cmp.candidate.label}-vs-{cmp.baseline.label}")[:120]
    c1, c2 = st.columns(2)
    c1.download_button("Download Markdown (PR comment)", format_report_markdown(cmp, advice=advice or [],
                                                                                memory_categories=cats),
                       file_name=f"{stem}.md", mime="text/markdown", key=f"compare_md_{stem}")
    if c2.button("Build HTML report", key=f"compare_build_html_{stem}",
                 help="One self-contained file with interactive charts (plotly.js inlined, no network)."):
        html = format_report_html(cmp, figures_to_html(make_report_figures(cmp)), advice=advice or [],
                                  memory_categories=cats)
        st.session_state["compare_html"] = (stem, html)
    built = st.session_state.get("compare_html")
    if built and built[0] == stem:
        c2.download_button("Download HTML report", built[1], file_name=f"{stem}.html", mime="text/html",
                           key=f"compare_html_dl_{stem}")
