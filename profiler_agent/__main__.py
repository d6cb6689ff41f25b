"""``python -m profiler_agent run [options] -- command ...``: the wrapper without the console script (agent layer)."""
from __future__ import annotations

import sys

from .cli import HELP, add_run_arguments, run_fast, run_from_args

TYPE_CHECKING = False  # typing costs ~3 ms before the job starts; mypy reads the name as True
if TYPE_CHECKING:
    from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"]:  # the job starts before the rest loads (issue 11)
        code = run_fast(argv[1:])  # None: a form that argparse reads, below
        if code is not None:
            return code
    import argparse

    from .runformat import TorchscopeError

    parser = argparse.ArgumentParser(prog="python -m profiler_agent")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_run_arguments(sub.add_parser("run", help=HELP, description=HELP))
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
