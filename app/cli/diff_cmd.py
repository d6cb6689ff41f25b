"""`torchscope diff BASELINE CANDIDATE` (or `--group A --group B`): is the candidate faster, by how much, why, at what cost (CLI layer).

Prints the headline, the verdict table (or ``--json``, documented in docs/compare.md) and works
as a CI gate. The gates judge the headline (step time, or time per sample / token when the work
per step differs; docs/compare.md, "The headline"). Exit codes:

* **0**: no gate failed (also when a gate could not be evaluated: reported on stderr and in the
  JSON's ``gates.skipped``), and the headline is not ``inconclusive`` — or it is, and
  ``--fail-if-inconclusive`` was not given (a warning goes to stderr);
* **1**: a gate failed: ``--fail-if-slower PCT`` with a headline verdict ``slower`` (significant,
  beyond the practical limit) and a ratio above 1 + PCT/100, or ``--fail-if-more-memory PCT``
  with a memory verdict ``more`` and a ratio above 1 + PCT/100 (takes precedence over 3);
* **2**: bad input or usage (unknown run or group, unreadable trace, impossible option): one
  line on stderr;
* **3**: the headline is ``inconclusive`` (the sides differ in contention, too few steps, no
  interval) and ``--fail-if-inconclusive`` was given.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from app.analysis.compare.advice import diff_side_advice
from app.analysis.compare.comparison import CompareOptions, Comparison, diff_sides
from app.analysis.compare.tables import OpGrouping
from app.cli.ingest_options import add_ingest_arguments, ingest_context
from app.errors import TorchscopeError, UsageError
from app.presentation.compare_json import comparison_to_json
from app.presentation.report import format_verdict_text
from app.presentation.terminal import terminal_text
from app.workspace.sides import load_group_side, load_side

HELP = ("compare a candidate run or trace (or group of runs) with a baseline: headline verdict with confidence, "
        "breakdown and op deltas")

__all__ = ["HELP", "add_arguments", "run", "add_compare_arguments", "options_from_args", "load_comparison",
           "gate_failures", "evaluate_gates", "advice_diff", "exit_code", "EXIT_GATE_FAILED", "EXIT_INCONCLUSIVE"]


EXIT_GATE_FAILED = 1
EXIT_INCONCLUSIVE = 3


def add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments shared by ``diff`` and ``report``."""
    parser.add_argument("baseline", nargs="?", help="run folder, id or name prefix, trace file, or folder of traces")
    parser.add_argument("candidate", nargs="?", help="the run or traces to judge against the baseline")
    parser.add_argument("--group", action="append", default=None, metavar="NAME",
                        help="compare two groups of replicate runs (torchscope run --group NAME): give it twice, "
                             "baseline first, instead of BASELINE CANDIDATE")
    parser.add_argument("--baseline-query", default=None, metavar="SELECTOR",
                        help="the baseline is the runs of the catalog this selects, as replicates, e.g. "
                             "'tag=main,status=finished,last=5' (docs/catalog.md); give only CANDIDATE")
    parser.add_argument("--root", help="run store, to resolve run ids and names (default $TORCHSCOPE_RUNS or ./runs)")
    parser.add_argument("--warmup", type=int, default=None, metavar="K",
                        help="steps dropped at the start (default: automatic, see docs/compare.md)")
    parser.add_argument("--threshold", type=float, default=2.0, metavar="PCT",
                        help="smallest change (in %%) that counts as a difference (default 2)")
    parser.add_argument("--by", choices=[g.value for g in OpGrouping], default="name",
                        help="match operators by name, by name and input shapes, or by name and nn.Module "
                             "(module scopes in the traces, see docs/compare.md)")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument("--top", type=int, default=10, help="rows of the op and kernel tables")
    parser.add_argument("--no-advice", action="store_true",
                        help="skip the advisor's resolved / remaining / new findings")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_compare_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document (fields in docs/compare.md)")
    parser.add_argument("--fail-if-slower", type=float, default=None, metavar="PCT",
                        help="exit 1 when the headline (step time, or time per sample/token) is significantly "
                             "more than PCT %% slower")
    parser.add_argument("--fail-if-more-memory", type=float, default=None, metavar="PCT",
                        help="exit 1 when the peak memory grew by more than PCT %%")
    parser.add_argument("--fail-if-inconclusive", action="store_true",
                        help="exit 3 when the headline verdict is inconclusive (default: exit 0 with a warning)")
    add_ingest_arguments(parser)


def options_from_args(args: argparse.Namespace) -> CompareOptions:
    """CompareOptions from the shared arguments; raises UsageError for impossible values."""
    if args.threshold < 0 or args.threshold >= 100:
        raise UsageError(f"--threshold {args.threshold}: expected a percentage in [0, 100)")
    if args.resamples < 1000:
        raise UsageError(f"--resamples {args.resamples}: expected at least 1000")
    if args.warmup is not None and args.warmup < 0:
        raise UsageError(f"--warmup {args.warmup}: expected 0 or more steps")
    return CompareOptions(warmup_steps=args.warmup, threshold=args.threshold / 100.0, resamples=args.resamples,
                          seed=args.seed, op_grouping=OpGrouping(args.by))


def load_comparison(args: argparse.Namespace) -> Comparison:
    """Load both sides named on the command line (two runs or traces, or two ``--group``) and
    compare them. Raises UsageError unless exactly one of the two forms is given."""
    options = options_from_args(args)
    groups = getattr(args, "group", None) or []
    named = [r for r in (args.baseline, args.candidate) if r is not None]
    history = getattr(args, "baseline_query", None)
    if history is not None:
        return diff_sides(*_history_sides(history, named, groups, args.root), options)
    if groups:
        if len(groups) != 2 or named:
            raise UsageError(f"--group given {len(groups)} time(s){' with runs' if named else ''}: expected exactly "
                             "two groups (--group BASELINE --group CANDIDATE) and no BASELINE CANDIDATE")
        baseline, candidate = (load_group_side(g, args.root) for g in groups)
    else:
        if len(named) != 2:
            raise UsageError("expected BASELINE and CANDIDATE (runs or traces), or --group A --group B")
        baseline = load_side(args.baseline, args.root)
        candidate = load_side(args.candidate, args.root)
    return diff_sides(baseline, candidate, options)


def _history_sides(query: str, named: list[str], groups: list[str], root: str | None) -> tuple[Any, Any]:
    """(baseline from the catalog's history, candidate) for ``--baseline-query``: the candidate is the
    one run named (or one ``--group``), never part of its own baseline."""
    from app.workspace.catalog_query import load_history_side

    if len(named) + len(groups) != 1:
        raise UsageError("--baseline-query: expected exactly one CANDIDATE (a run, or one --group) and no BASELINE")
    candidate = load_group_side(groups[0], root) if groups else load_side(named[0], root)
    exclude = [str(r.path) for r in candidate.replicates] if candidate.replicates else [str(candidate.path)]
    return load_history_side(query, root, exclude=exclude), candidate


def advice_diff(cmp: Comparison, args: argparse.Namespace) -> Any | None:
    """The advisor's FindingsDiff of the two sides, or None when skipped (--no-advice) or when
    the advisor cannot run (the reason becomes a note of the comparison)."""
    if getattr(args, "no_advice", False):
        return None
    try:
        return diff_side_advice(cmp.baseline, cmp.candidate)
    except TorchscopeError as e:
        cmp.notes.append(f"advisor not run: {e}")
        return None


def gate_failures(cmp: Comparison, fail_if_slower: float | None, fail_if_more_memory: float | None) -> list[str]:
    """Messages of the CI gates that fail (empty when every requested gate passes)."""
    return evaluate_gates(cmp, fail_if_slower, fail_if_more_memory)[0]


def evaluate_gates(cmp: Comparison, fail_if_slower: float | None,
                   fail_if_more_memory: float | None) -> tuple[list[str], list[dict[str, str]]]:
    """(failures, skipped) of the requested CI gates.

    ``--fail-if-slower`` judges the headline: it fails only on a headline verdict ``slower``
    beyond the allowance. A gate that cannot be evaluated (no step times, an inconclusive
    headline, no memory data on either side) does not fail; it is listed in ``skipped`` as
    ``{"gate": flag, "reason": ...}`` so that a CI log says the check did not happen rather
    than passing silently."""
    failures: list[str] = []
    skipped: list[dict[str, str]] = []
    h = cmp.headline
    if fail_if_slower is not None:
        if h.ratio is None or not math.isfinite(h.ratio):
            skipped.append({"gate": "--fail-if-slower", "reason": "no step times on one side"})
        elif h.verdict == "inconclusive":
            skipped.append({"gate": "--fail-if-slower", "reason": f"{h.quantity_words} inconclusive: "
                                                                  f"{_inconclusive_reason(cmp)}"})
        elif h.verdict == "slower" and h.ratio > 1.0 + fail_if_slower / 100.0:
            ci = f" (95% CI of the ratio {h.ci95[0]:.3f}-{h.ci95[1]:.3f})" if h.ci95 else ""
            failures.append(f"{h.quantity_words} is {100 * (h.ratio - 1):.1f}% slower{ci}; the gate allows "
                            f"{fail_if_slower:g}%")
    ratio = cmp.memory_ratio
    if fail_if_more_memory is not None:
        if ratio is None:
            a, b = cmp.peak_memory
            have = [label for label, m in ((cmp.baseline.label, a), (cmp.candidate.label, b)) if m.own_source
                    and m.own_source != "none"]
            reason = ("no peak memory on either side (no system samples, no memory events in the traces)"
                      if not have else f"no memory quantity both sides have (only {', '.join(have)} has one)")
            skipped.append({"gate": "--fail-if-more-memory", "reason": reason})
        elif str(cmp.memory_verdict) == "more" and ratio > 1.0 + fail_if_more_memory / 100.0:
            failures.append(f"peak memory grew by {100 * (ratio - 1):.1f}% ({cmp.peak_memory[0].source}); "
                            f"the gate allows {fail_if_more_memory:g}%")
    return failures, skipped


def _inconclusive_reason(cmp: Comparison) -> str:
    """The reason that made the headline inconclusive (the contention, too few steps, no interval)."""
    h = cmp.headline
    if cmp.contention.inconclusive:
        return cmp.contention.reason
    for r in h.reasons:
        if r.startswith(("too few steps", "no confidence interval", "no steady-state")):
            return r
    return h.reasons[-1] if h.reasons else "no reason recorded"


def exit_code(cmp: Comparison, failures: list[str], fail_if_inconclusive: bool) -> int:
    """The documented exit code (module docstring): 1 on a failed gate, 3 for an inconclusive
    headline with ``--fail-if-inconclusive``, else 0."""
    if failures:
        return EXIT_GATE_FAILED
    if cmp.headline.verdict == "inconclusive" and fail_if_inconclusive:
        return EXIT_INCONCLUSIVE
    return 0


def run(args: argparse.Namespace) -> int:
    for flag in ("fail_if_slower", "fail_if_more_memory"):
        value = getattr(args, flag)
        if value is not None and value < 0:
            raise UsageError(f"--{flag.replace('_', '-')} {value}: expected a percentage >= 0")
    with ingest_context(args):  # the sides' rank files: parsed in parallel (local cores or --scheduler)
        cmp = load_comparison(args)
    return report(cmp, args)


def report(cmp: Comparison, args: argparse.Namespace, *, extra_json: dict[str, Any] | None = None,
           extra_text: str = "") -> int:
    """Print a comparison as ``diff`` does (JSON with ``extra_json`` merged in, or the text with
    ``extra_text`` after the verdict), the gates and the advisor's diff; return the exit code.
    ``torchscope ab`` prints its replicates through this too."""
    failures, skipped = evaluate_gates(cmp, args.fail_if_slower, args.fail_if_more_memory)
    advice = advice_diff(cmp, args)
    if args.json:
        doc = comparison_to_json(cmp)
        doc["advice"] = advice.to_json() if advice is not None else None
        doc["gates"] = {"fail_if_slower": args.fail_if_slower, "fail_if_more_memory": args.fail_if_more_memory,
                        "fail_if_inconclusive": bool(getattr(args, "fail_if_inconclusive", False)),
                        "failures": failures, "skipped": skipped}
        doc.update(extra_json or {})
        sys.stdout.write(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    else:
        sys.stdout.write(format_verdict_text(cmp, top=args.top))
        sys.stdout.write(extra_text)
        if advice is not None:
            worse = advice.worse
            sys.stdout.write(f"advisor: {len(advice.resolved)} resolved, {len(advice.remaining)} remaining, "
                             f"{len(advice.new)} new, {len(worse)} gone but worse finding(s)\n")
            for f in advice.resolved:
                sys.stdout.write(f"  resolved: {terminal_text(f.title)}\n")
            for w in worse:  # no finding in the candidate, but what the rule guards got worse
                sys.stdout.write(f"  not resolved, got worse: {terminal_text(w.baseline.title)} ({terminal_text(w.reason)})\n")
            for f in advice.new:
                sys.stdout.write(f"  new:      {terminal_text(f.title)}\n")
        for f in failures:
            sys.stdout.write(f"GATE FAILED: {f}\n")
    for g in skipped:  # stderr, also with --json, so a CI log shows the check did not happen
        sys.stderr.write(f"gate not evaluated: {g['gate']}: {g['reason']}\n")
    if cmp.headline.verdict == "inconclusive":
        sys.stderr.write(f"warning: verdict inconclusive: {_inconclusive_reason(cmp)}\n")
    return exit_code(cmp, failures, getattr(args, "fail_if_inconclusive", False))
