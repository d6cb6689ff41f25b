"""`torchscope advise RUN`: the advisor's findings with evidence and fixes (CLI layer).

RUN is a run folder, a run id/name in the store, a trace file, or a folder of traces. A bare
trace gets only the trace rules (curve and config rules need a recorded run). ``--json`` prints
one document: ``{"source", "findings": [...], "checked", "skipped", "errors", "problems"}``; each finding has
``rule``, ``severity``, ``title``, ``evidence`` (numbers), ``fix``, ``expected_gain``,
``gain_share``, ``doc_url``, ``weight`` (steps and windows the measure rests on, its spread, why a
severity was capped), ... (docs/advisor.md); ``measures`` the guarded quantity of each checked rule. Exit code 0; with ``--fail-on SEVERITY``, 1
when a finding at or above that severity exists (a CI gate).
"""
from __future__ import annotations

import argparse
import json
import sys
import textwrap

from app.analysis.advisor import SEVERITY_ORDER, Advice, Severity, advise, describe_weight, get_rule
from app.cli.ingest_options import add_ingest_arguments, ingest_context
from app.errors import UsageError
from app.presentation.terminal import terminal_lines
from app.workspace.evidence import load_evidence

HELP = "find performance and training problems in a run, with evidence and the fix"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="run folder or id/name, trace file (.json/.json.gz), or folder of traces")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--root", help="run store, to resolve a run id or name")
    parser.add_argument("--rule", action="append", default=None, metavar="ID",
                        help="only this rule (repeatable); see docs/advisor.md for ids")
    parser.add_argument("--fail-on", choices=[s.value for s in Severity], default=None,
                        help="exit 1 when a finding of this severity or worse exists")
    parser.add_argument("--verbose", "-v", action="store_true", help="also list rules that could not look, and why")
    add_ingest_arguments(parser)


class _SafeLines:
    """stdout whose text goes through terminal_lines: findings quote op names and file names."""

    def write(self, text: str) -> None:
        sys.stdout.write(terminal_lines(text))


def _print_text(advice: Advice, verbose: bool) -> None:
    out = _SafeLines()
    if not advice.findings:
        out.write(f"No problems found in {advice.source} ({len(advice.checked)} rules checked).\n")
    for i, f in enumerate(advice.findings, 1):
        out.write(f"\n{i}. [{f.severity.value.upper()}] {f.title}\n")
        out.write(textwrap.fill(f.explanation, 100, initial_indent="   ", subsequent_indent="   ") + "\n")
        if f.weight is not None:
            out.write(textwrap.fill(describe_weight(f.weight), 100, initial_indent="   weight: ",
                                    subsequent_indent="      ") + "\n")
        nums = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in f.evidence.items())
        out.write(f"   evidence: {nums}\n   expected gain: {f.expected_gain}\n   see: {f.chart}\n")
        out.write(f"   fix: {f.fix_summary}\n" + textwrap.indent(f.fix, "      ") + f"\n   docs: {f.doc_url}\n")
    if verbose and advice.skipped:
        out.write("\nNot checked:\n" + "".join(f"  {k}: {v}\n" for k, v in advice.skipped.items()))
    for p in advice.problems:
        sys.stderr.write(f"torchscope advise: warning: {p}\n")
    for k, v in advice.errors.items():
        sys.stderr.write(f"torchscope advise: rule {k} failed: {v}\n")


def run(args: argparse.Namespace) -> int:
    if args.rule:
        for r in args.rule:
            try:
                get_rule(r)
            except KeyError as e:
                raise UsageError(str(e.args[0])) from None
    with ingest_context(args):  # many rank files: parsed in parallel (local cores or --scheduler)
        evidence = load_evidence(args.run, root=args.root)
    advice = advise(evidence, rules=args.rule)
    if args.json:
        json.dump(advice.to_json(), sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
    else:
        _print_text(advice, args.verbose)
    if args.fail_on:
        bar = SEVERITY_ORDER[Severity(args.fail_on)]
        if any(SEVERITY_ORDER[f.severity] <= bar for f in advice.findings):
            return 1
    return 0
