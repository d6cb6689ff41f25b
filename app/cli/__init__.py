"""The ``torchscope`` command line: one module per subcommand, discovered from COMMANDS.

A subcommand module ``app/cli/<name>_cmd.py`` defines::

    HELP = "one line for --help"
    def add_arguments(parser: argparse.ArgumentParser) -> None: ...
    def run(args: argparse.Namespace) -> int: ...   # returns the exit code

Adding a command means adding its module and its name to COMMANDS. Project errors
(TorchscopeError) are printed as one clear line on stderr with exit code 2, never a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from profiler_agent.runformat.errors import TorchscopeError

__all__ = ["main", "build_parser", "COMMANDS"]

# Order is the order shown in --help.
COMMANDS = ("run", "ls", "ui", "analyze", "diff", "ab", "advise", "report", "import")


def _load(name: str):  # noqa: ANN202 - a module
    try:
        return importlib.import_module(f"app.cli.{name}_cmd")
    except ModuleNotFoundError as e:
        if e.name == f"app.cli.{name}_cmd":
            return None  # command not built in this version
        raise


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of command ``only`` alone (``run``: nothing heavy imported)."""
    parser = argparse.ArgumentParser(
        prog="torchscope",
        description="Profile PyTorch training runs, browse them, compare them and get advice.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS if only is None else (only,):
        module = _load(name)
        if module is None:
            continue
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `torchscope run` must start the job fast: the other commands' modules import pandas and
    # friends (~0.7 s), which a launcher never needs.
    parser = build_parser("run" if argv[:1] == ["run"] else None)
    # `torchscope run [opts] -- cmd ...`: everything after `--` is the user's command, untouched.
    args, rest = parser.parse_known_args(argv) if argv[:1] == ["run"] else (parser.parse_args(argv), [])
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    if rest:
        args.command_args = [*getattr(args, "command_args", []), *rest]
    try:
        return int(args._run(args) or 0)
    except TorchscopeError as e:
        print(f"torchscope {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `torchscope ls | head`
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
