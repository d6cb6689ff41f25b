"""`torchscope report BASELINE CANDIDATE [-o out.html|out.md]`: share a comparison (CLI layer).

``--group A --group B`` instead of the two sides compares groups of replicate runs, as
``torchscope diff`` does (docs/compare.md, "Groups"); the report opens with the headline.

``.html`` gives one self-contained page (interactive plotly figures, plotly.js inlined, no
network needed); ``.md`` (or no ``-o``: stdout) gives Markdown for a pull-request comment.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from app.analysis.compare.advice import findings_diff_rows
from app.cli.diff_cmd import add_compare_arguments, advice_diff, load_comparison
from app.errors import UsageError
from app.presentation.report import format_report_html, format_report_markdown
from profiler_agent.runformat import atomic_write_text

HELP = "export a comparison as a self-contained HTML page or as Markdown for a PR comment"

_FORMATS = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_compare_arguments(parser)
    parser.add_argument("-o", "--output", help="file to write: .html or .md (default: Markdown on stdout)")
    parser.add_argument("--format", choices=["html", "md"], default=None, help="override the format implied by -o")


def _format(args: argparse.Namespace) -> str:
    if args.format:
        return args.format
    if not args.output:
        return "md"
    suffix = Path(args.output).suffix.lower()
    if suffix not in _FORMATS:
        raise UsageError(f"-o {args.output}: unknown extension {suffix!r}; use .html or .md (or --format)")
    return _FORMATS[suffix]


def _check_output(out: Path) -> None:
    """Refuse, before the comparison is loaded, an output path that cannot be written."""
    if not out.parent.exists():
        raise UsageError(f"-o {out}: folder {out.parent} does not exist")
    if not out.parent.is_dir():
        raise UsageError(f"-o {out}: {out.parent} is not a folder")
    if out.is_dir():
        raise UsageError(f"-o {out}: is a folder; name a file to write (.html or .md)")
    if not os.access(out.parent, os.W_OK | os.X_OK):
        raise UsageError(f"-o {out}: folder {out.parent} is not writable")


def _write(out: Path, text: str) -> None:
    try:
        atomic_write_text(out, text)
    except OSError as e:  # full disk, read-only file system, permissions changed meanwhile
        raise UsageError(f"-o {out}: cannot write the report ({e.strerror or e})") from None


def run(args: argparse.Namespace) -> int:
    fmt = _format(args)
    if args.output:
        _check_output(Path(args.output))
    cmp = load_comparison(args)
    diff = advice_diff(cmp, args)
    advice = findings_diff_rows(diff) if diff is not None else []
    if fmt == "html":
        # plotly is imported only for an HTML report: a Markdown report (CI) pays no plotly import.
        from app.charts.compare import figures_to_html, make_report_figures

        text = format_report_html(cmp, figures_to_html(make_report_figures(cmp)), top=max(args.top, 30),
                                  advice=advice)
    else:
        text = format_report_markdown(cmp, top=args.top, advice=advice)
    if not args.output:
        sys.stdout.write(text)
        return 0
    out = Path(args.output)
    _write(out, text)
    print(f"wrote {out} ({out.stat().st_size / 1024:,.0f} KiB)", file=sys.stderr)
    return 0
