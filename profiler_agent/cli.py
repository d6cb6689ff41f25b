"""Command-line options of ``run`` shared by ``torchscope run`` and ``python -m profiler_agent run`` (agent layer).

Two ways through the same options. :func:`run_fast` is the hot path of every wrapped job: it
reads the common forms (``[options] -- command ...``, each option spelt in full) by hand, makes
the run folder and starts the job before argparse, the options' dataclasses, the run format's
schema and writer are even imported (issue 11: the agent's fixed cost per job), and returns None
for anything else -- a help request, an abbreviation, a value argparse would refuse or convert
differently, a store URL -- which then goes through argparse (:func:`add_run_arguments`,
:func:`run_from_args`) exactly as before. ``tests/agent/test_early_start.py`` checks that both
read every accepted command line the same.
"""
from __future__ import annotations

import os

TYPE_CHECKING = False  # typing itself costs ~3 ms before the job starts; mypy reads the name as True
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from typing import Any

__all__ = ["HELP", "add_run_arguments", "run_from_args", "run_fast", "parse_fast"]

HELP = "run a training command and record it as a run (no code change): torchscope run -- python train.py"


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the run's naming options and the profiler flags to ``parser``."""
    import argparse

    from .options import add_agent_arguments

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
    from .launcher import LaunchRequest, launch
    from .options import options_from_args
    from .runformat.errors import TorchscopeError

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


# -- the hot path ------------------------------------------------------------------------------

# Option -> (LaunchRequest field or AgentOptions field, kind). The profiler flags are options.py's
# add_agent_arguments; a test checks that this table and the parser know the same options.
_STRINGS = {"--name": "name", "--root": "root", "--notes": "notes", "--group": "group"}
_INTS = {"--max-steps": "max_steps", "--wait": "wait", "--warmup": "warmup", "--active": "active",
         "--repeat": "repeat", "--max-anomaly-windows": "max_anomaly_windows"}
_FLOATS = {"--anomaly-factor": "anomaly_factor", "--system-interval": "system_interval_s"}
# store_true flags -> (AgentOptions field, its value when the flag is given)
_FLAGS = {"--with-stack": ("with_stack", True), "--no-profile": ("profile", False),
          "--no-graph": ("graph", False), "--grad-norm": ("grad_norm", True),
          "--memory-timeline": ("memory_timeline", True), "--no-module-scopes": ("module_scopes", False),
          "--no-evaluation-window": ("evaluation_window", False)}
_SCHEDULE = ("wait", "warmup", "active", "repeat")
SCHEDULE_DEFAULTS = {"wait": 5, "warmup": 2, "active": 3, "repeat": 1}  # options.ProfileSchedule's (a test)
FAST_OPTIONS = frozenset({*_STRINGS, *_INTS, *_FLOATS, *_FLAGS, "--tags"})


def _int(text: str) -> int | None:
    # What int() accepts and argparse would too; anything unusual goes the slow way.
    stripped = text.strip()
    digits = stripped[1:] if stripped[:1] in "+-" else stripped
    return int(stripped) if digits.isdigit() and digits.isascii() else None


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None  # no nan, no inf


def parse_fast(argv: Sequence[str]) -> dict[str, Any] | None:
    """The run's fields from ``argv`` (after ``run``), or None when argparse must read it.

    Returns {"command", "name", "root", "tags", "notes", "group", "options"}, ``options`` holding
    only the AgentOptions fields the flags set (``schedule`` as a mapping), each value already
    checked as options_from_args and run_from_args check it.
    """
    args = list(argv)
    if "--" not in args:
        return None
    cut = args.index("--")
    head, command = args[:cut], args[cut + 1:]
    if not command:
        return None
    out: dict[str, Any] = {"command": command, "name": None, "root": None, "tags": [], "notes": "", "group": None}
    options: dict[str, Any] = {}
    schedule: dict[str, int] = {}
    i = 0
    while i < len(head):
        token = head[i]
        i += 1
        option, has_value, value = token.partition("=")
        if option == "--tags":
            if has_value:
                return None
            tags = []
            while i < len(head) and not head[i].startswith("-"):
                tags.append(head[i])
                i += 1
            out["tags"] = tags
            continue
        if option in _FLAGS:
            if has_value:
                return None
            key, flag_value = _FLAGS[option]
            options[key] = flag_value
            continue
        if option not in _STRINGS and option not in _INTS and option not in _FLOATS:
            return None  # --help, an abbreviation, a positional before `--`, a typo: argparse says
        if not has_value:
            if i >= len(head) or head[i].startswith("-"):
                return None
            value = head[i]
            i += 1
        if option in _STRINGS:
            out[_STRINGS[option]] = value
        elif option in _INTS:
            number = _int(value)
            if number is None:
                return None
            key = _INTS[option]
            if key == "max_steps":
                out["max_steps"] = number
            elif key in _SCHEDULE:
                schedule[key] = number
            else:
                options[key] = number
        else:
            real = _float(value)
            if real is None:
                return None
            options[_FLOATS[option]] = real
    if not _valid(out, options, schedule):
        return None
    max_steps = out.pop("max_steps", None)
    if max_steps is not None:
        options["max_steps"] = max_steps
    if schedule:
        options["schedule"] = schedule
    if out["group"] is not None:
        out["group"] = out["group"].strip()
    out["options"] = options
    root = out["root"] or os.environ.get("TORCHSCOPE_RUNS")  # layout.ROOT_ENV
    if root and "://" in root:
        return None  # a store URL: checked, spooled and uploaded by the full path
    return out


def _valid(out: dict[str, Any], options: dict[str, Any], schedule: dict[str, int]) -> bool:
    """What options_from_args, ProfileSchedule, AgentOptions and run_from_args would accept."""
    sched = {**SCHEDULE_DEFAULTS, **schedule}
    if sched["wait"] < 0 or sched["warmup"] < 0 or sched["active"] <= 0 or sched["repeat"] < 0:
        return False
    if options.get("system_interval_s", 1.0) <= 0:
        return False
    if out.get("max_steps") is not None and out["max_steps"] < 1:
        return False
    factor = options.get("anomaly_factor", 2.0)
    if not (factor == 0 or factor > 1):
        return False
    if options.get("max_anomaly_windows", 0) < 0:
        return False
    return not (out["group"] is not None and not out["group"].strip())


def _json(value: object) -> str:
    """JSON of the plain values parse_fast returns (json itself costs ~2 ms to import)."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f'"{k}": {_json(v)}' for k, v in value.items()) + "}"
    raise TypeError(f"no JSON for {type(value).__name__}")


def run_fast(argv: Sequence[str]) -> int | None:
    """``torchscope run`` with the job started first; None when argparse must read ``argv``."""
    fast = parse_fast(argv)
    if fast is None:
        return None
    import time

    from .job_start import default_run_name, start_job
    from .runformat import layout

    command = fast["command"]
    name = fast["name"] or default_run_name(command)
    root = layout.resolve_root(fast["root"] or None)
    now = time.time()
    try:
        run_dir = layout.make_run_folder(root, name, now=now)
    except OSError as e:
        from .launcher import _unrecordable

        return _unrecordable(root, e, tuple(command))
    job = start_job(command, run_dir, _json(fast["options"]), t0=now)
    # The rest of the launcher loads while the job's interpreter starts.
    from pathlib import Path

    from .launcher import record_started

    return record_started(job, Path(run_dir), name=name, now=now, command=tuple(command), tags=tuple(fast["tags"]),
                          notes=fast["notes"], group=fast["group"] or None,
                          max_steps=fast["options"].get("max_steps"))
