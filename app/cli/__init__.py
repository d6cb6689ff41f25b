"""The ``torchscope`` command line: one module per subcommand, listed in COMMAND_MODULES (front end).

A subcommand module ``app/cli/<name>_cmd.py`` defines::

    HELP = "one line for --help"
    def add_arguments(parser: argparse.ArgumentParser) -> None: ...
    def run(args: argparse.Namespace) -> int: ...   # returns the exit code

Adding a command means adding its module and one line to COMMAND_MODULES. A module missing from
the package is an ImportError when the parser is built (a test builds every command), never a
silently absent command. Project errors (TorchscopeError) are printed as one clear line on stderr
with exit code 2, never a traceback.
"""
from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, cast

from profiler_agent.runformat.errors import TorchscopeError

if TYPE_CHECKING:
    import argparse  # loaded by build_parser: `torchscope run`'s hot path never needs it (issue 11)

__all__ = ["COMMANDS", "COMMAND_MODULES", "Command", "build_parser", "load_command", "main", "entry"]

# Command name → its module, in the order shown in --help. The modules are imported only when the
# parser of their command is built, not here: `torchscope run` must start the job fast, and the
# other commands' modules import pandas and the analysis (measured with `python -X importtime`:
# app.cli.run_cmd 0.12 s, app.cli.ls_cmd 1.4 s, app.cli.diff_cmd 1.3 s, all commands 1.8 s).
COMMAND_MODULES: dict[str, str] = {
    "run": "app.cli.run_cmd",
    "ls": "app.cli.ls_cmd",
    "ui": "app.cli.ui_cmd",
    "analyze": "app.cli.analyze_cmd",
    "diff": "app.cli.diff_cmd",
    "ab": "app.cli.ab_cmd",
    "advise": "app.cli.advise_cmd",
    "report": "app.cli.report_cmd",
    "import": "app.cli.import_cmd",
    "sync": "app.cli.sync_cmd",
    "query": "app.cli.query_cmd",
    "sweep": "app.cli.sweep_cmd",
}
# Commands that read --root and their references through a store URL's local mirror (store_arg.py);
# run, import, ui and sync write to or serve the URL themselves.
LOCALIZED_COMMANDS = frozenset({"ls", "analyze", "advise", "diff", "report", "query"})
# Commands that only read and print: when one of them is the process (``entry``), the interpreter's
# teardown is skipped once its output is flushed (see ``entry``).
QUICK_EXIT_COMMANDS = frozenset({"ls", "analyze", "advise", "diff", "report", "query"})
COMMANDS: tuple[str, ...] = tuple(COMMAND_MODULES)


class Command(Protocol):
    """What a subcommand module provides (a module satisfies this protocol)."""

    HELP: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def load_command(name: str) -> Command:
    """The module of command ``name``. Raises KeyError for an unknown name and ImportError when its
    module is missing or broken."""
    return cast(Command, importlib.import_module(COMMAND_MODULES[name]))


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of command ``only`` alone (``run``: nothing heavy imported)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="torchscope",
        description="Profile PyTorch training runs, browse them, compare them and get advice.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS if only is None else (only,):
        module = load_command(name)
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None, *, ls_checked: bool = False) -> int:
    """Run the command named in ``argv`` (default ``sys.argv[1:]``); return its exit code.
    ``ls_checked``: the ``ls --json`` snapshot was already checked (``python -m app``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"]:  # the job starts before argparse and the run format load (issue 11)
        from profiler_agent.cli import run_fast

        try:
            code = run_fast(argv[1:])  # None: a form that argparse reads, below
        except KeyboardInterrupt:
            return 130
        if code is not None:
            return code
    if argv[:1] == ["ls"] and not ls_checked:  # `ls --json` of an unchanged store: printed before argparse
        from app.workspace.ls_snapshot import print_if_current

        if print_if_current(argv):  # before printed_listing's import, which loads sqlite3
            return 0
        from app.workspace.printed_listing import print_from_index

        if print_from_index(argv):
            return 0
    # Only the named command's module is imported: `torchscope run` must start the job fast, and
    # a warm `analyze --json` and `ls` on an indexed store must not pay for the other commands'
    # pandas, plotly and Streamlit (~0.7 s). `torchscope --help` (or an unknown command) builds
    # every command's parser.
    parser = build_parser(argv[0] if argv[:1] and argv[0] in COMMAND_MODULES else None)
    # `torchscope run|sweep [opts] -- cmd ...`: everything after `--` is the user's command, untouched.
    args, rest = parser.parse_known_args(argv) if argv[:1] in (["run"], ["sweep"]) else (parser.parse_args(argv), [])
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    if rest:
        args.command_args = [*getattr(args, "command_args", []), *rest]
    try:
        if args.command in LOCALIZED_COMMANDS:  # a store URL is read through its local mirror
            from app.cli.store_arg import localize_args

            localize_args(args)
        return int(args._run(args) or 0)
    except TorchscopeError as e:
        # one line, whatever the message quotes (a folder named with a newline or an ANSI escape)
        from app.presentation.terminal import terminal_text

        print(f"torchscope {args.command}: error: {terminal_text(str(e), 2000)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `torchscope ls | head`
        return 0


def entry(*, ls_checked: bool = False) -> None:
    """The ``torchscope`` program (the console script and ``python -m app.cli``): ``main()``, then exit.

    After a command of QUICK_EXIT_COMMANDS, with no other Python thread left, the exit handlers run
    (``atexit``: logging, temporary files) and the output is flushed, then the process ends with
    ``os._exit``: the interpreter's own teardown, which frees every module and object one at a
    time, is what the OS does at once. It cost ~70 ms of a cold ``analyze`` of a 100 MB trace with
    pandas and the trace's tables loaded (benchmarks/README.md "Big traces"). Tests call ``main``
    and never get here. ``ls_checked``: the ``ls --json`` snapshot was checked already (app/__main__.py)."""
    code = main(ls_checked=ls_checked)
    argv = sys.argv[1:]
    if argv[:1] and argv[0] in QUICK_EXIT_COMMANDS:
        import threading

        if threading.active_count() == 1:
            import atexit
            import os

            atexit._run_exitfuncs()
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except (OSError, ValueError):  # a closed pipe: the ordinary exit reports it as Python does
                sys.exit(code)
            os._exit(code)
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    entry()
