"""``torchscope run [options] -- command ...``: record a training job with the agent (CLI layer, thin)."""
from __future__ import annotations

import argparse

from profiler_agent.cli import HELP, add_run_arguments, run_from_args

__all__ = ["HELP", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser)


def run(args: argparse.Namespace) -> int:
    return run_from_args(args)
