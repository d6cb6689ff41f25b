"""``python -m profiler_agent run [options] -- command ...``: the wrapper without the console script (agent layer)."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .cli import HELP, add_run_arguments, run_from_args
from .runformat import TorchscopeError


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m profiler_agent")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_run_arguments(sub.add_parser("run", help=HELP, description=HELP))
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after `--` is the user's command, untouched by our parser.
    rest: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, rest = argv[:cut], argv[cut + 1:]
    args = parser.parse_args(argv)
    args.command_args = [*(args.command_args or []), *rest]
    try:
        return run_from_args(args)
    except TorchscopeError as e:
        print(f"python -m profiler_agent run: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
