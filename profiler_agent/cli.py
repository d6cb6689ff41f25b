"""Command-line options of ``run`` shared by ``torchscope run`` and ``python -m profiler_agent run`` (agent layer)."""
from __future__ import annotations

import argparse

from .launcher import LaunchRequest, launch
from .options import add_agent_arguments, options_from_args
from .runformat.errors import TorchscopeError

__all__ = ["HELP", "add_run_arguments", "run_from_args"]

HELP = "run a training command and record it as a run (no code change): torchscope run -- python train.py"


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the run's naming options and the profiler flags to ``parser``."""
    parser.add_argument("--name", help="run name (default: the script's name)")
    parser.add_argument("--root", help="run store folder or URL (s3://bucket/prefix, gs://, az://, file://: "
                        "spooled locally and uploaded as the job runs; default: $TORCHSCOPE_RUNS or ./runs)")
    parser.add_argument("--tags", nargs="*", default=[], help="labels for the run")
    parser.add_argument("--notes", default="", help="free text stored with the run")
    parser.add_argument("--group", metavar="NAME",
                        help="group of replicate runs of one configuration (run.json \"group\"), "
                             "e.g. for torchscope diff --group A --group B")
    parser.add_argument("--max-steps", type=int, metavar="N",
                        help="end the job cleanly after N optimizer steps: the run is finished, with "
                             "run.json \"stopped\": \"max_steps\", and the exit code is 0")
    add_agent_arguments(parser)
    parser.add_argument("command_args", nargs=argparse.REMAINDER, help="-- then the command to run")


def run_from_args(args: argparse.Namespace) -> int:
    """Launch the command in ``args.command_args``; return its exit code."""
    command = list(getattr(args, "command_args", None) or [])
    if command[:1] == ["--"]:
        command = command[1:]
    try:
        options = options_from_args(args)
    except ValueError as e:
        raise TorchscopeError(str(e)) from None
    group = getattr(args, "group", None)
    if group is not None and not group.strip():
        raise TorchscopeError("--group: need a non-empty name")
    request = LaunchRequest(
        command=tuple(command),
        name=args.name,
        root=args.root or None,  # a folder or a store URL (a Path would turn s3:// into s3:/)
        tags=tuple(args.tags or ()),
        notes=args.notes,
        group=group.strip() if group else None,
        options=options,
    )
    return launch(request)
