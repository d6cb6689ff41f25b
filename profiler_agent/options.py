"""Agent options: the profiler schedule and capture switches, and how they reach child processes (agent layer).

The launcher turns command-line flags into :class:`AgentOptions` and passes them to every
instrumented process through the environment (``TORCHSCOPE_AGENT_OPTIONS``, JSON), together
with the run folder (``TORCHSCOPE_RUN_DIR``). The Python API builds the same object directly.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "RUN_DIR_ENV",
    "OPTIONS_ENV",
    "OWNER_ENV",
    "AGENT_HOME_ENV",
    "T0_ENV",
    "STOPPED_MAX_STEPS",
    "ProfileSchedule",
    "AgentOptions",
    "add_agent_arguments",
    "options_from_args",
    "read_env_options",
    "write_env_options",
]

RUN_DIR_ENV = "TORCHSCOPE_RUN_DIR"  # the run folder an instrumented process writes into
OPTIONS_ENV = "TORCHSCOPE_AGENT_OPTIONS"  # AgentOptions as JSON
OWNER_ENV = "TORCHSCOPE_RUN_OWNER_PID"  # pid of the process that owns the run's lifecycle
AGENT_HOME_ENV = "TORCHSCOPE_AGENT_HOME"  # folder holding the profiler_agent package (bootstrap reads it)
T0_ENV = "TORCHSCOPE_RUN_T0"  # the run's start (epoch seconds): metrics "time" is relative to it
STOPPED_MAX_STEPS = "max_steps"  # run.json "stopped" when --max-steps ended the job


@dataclass(frozen=True)
class ProfileSchedule:
    """When torch.profiler records: like ``torch.profiler.schedule`` (repeat=0: forever).

    Step 0 (the first iteration, full of one-off costs) is never profiled: the first window
    waits ``wait`` iterations after it.
    """

    wait: int = 5
    warmup: int = 2
    active: int = 3
    repeat: int = 1

    def __post_init__(self) -> None:
        problems = []
        if self.wait < 0:
            problems.append(f"wait={self.wait} (need >= 0)")
        if self.warmup < 0:
            problems.append(f"warmup={self.warmup} (need >= 0)")
        if self.active <= 0:
            problems.append(f"active={self.active} (need > 0)")
        if self.repeat < 0:
            problems.append(f"repeat={self.repeat} (need >= 0, 0 = until the job ends)")
        if problems:
            raise ValueError("invalid profiler schedule: " + ", ".join(problems))

    @property
    def cycle(self) -> int:
        return self.wait + self.warmup + self.active

    def window_start(self, step: int) -> bool:
        """True when the iteration numbered ``step`` starts a window's warmup (or its active part)."""
        if step < 1:
            return False
        offset = step - 1
        index, within = divmod(offset, self.cycle)
        if self.repeat and index >= self.repeat:
            return False
        return within == self.wait


@dataclass(frozen=True)
class AgentOptions:
    """Everything an instrumented process needs to know besides the run folder."""

    profile: bool = True
    schedule: ProfileSchedule = ProfileSchedule()
    with_stack: bool = False
    record_shapes: bool = True
    profile_memory: bool = True
    grad_norm: bool = False
    graph: bool = True  # torchviz backward graph of the first step
    memory_timeline: bool = False  # export_memory_timeline per window (needs and turns on with_stack)
    module_scopes: bool = True  # an "nn.Module: <name>" trace range per module call inside windows
    system_interval_s: float = 1.0
    max_steps: int | None = None  # end the job cleanly after this many optimizer steps (--max-steps)

    def __post_init__(self) -> None:
        if self.max_steps is not None and (isinstance(self.max_steps, bool) or self.max_steps < 1):
            raise ValueError(f"max_steps={self.max_steps!r}: need a whole number of steps >= 1")

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> AgentOptions:
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known and k != "schedule"}
        sched = data.get("schedule") or {}
        sched_known = {f.name for f in dataclasses.fields(ProfileSchedule)}
        schedule = ProfileSchedule(**{k: int(v) for k, v in sched.items() if k in sched_known})
        return cls(schedule=schedule, **kwargs)


def add_agent_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the profiler flags shared by ``torchscope run`` and ``python -m profiler_agent run``."""
    g = parser.add_argument_group("profiler")
    d = ProfileSchedule()
    g.add_argument("--wait", type=int, default=d.wait, help=f"iterations to skip before each window ({d.wait})")
    g.add_argument("--warmup", type=int, default=d.warmup, help=f"warm-up iterations per window ({d.warmup})")
    g.add_argument("--active", type=int, default=d.active, help=f"recorded iterations per window ({d.active})")
    g.add_argument("--repeat", type=int, default=d.repeat, help=f"number of windows, 0 = until the end ({d.repeat})")
    g.add_argument("--with-stack", action="store_true", help="record Python stacks in traces (slower)")
    g.add_argument("--no-profile", action="store_true", help="no torch.profiler traces; metrics and graph only")
    g.add_argument("--no-graph", action="store_true", help="do not draw the backward graph")
    g.add_argument("--grad-norm", action="store_true", help="log the total gradient norm every step")
    g.add_argument("--memory-timeline", action="store_true",
                   help="write torch.profiler's memory timeline by category for the first profiler window "
                        "(turns on --with-stack there; the export takes tens of seconds)")
    g.add_argument("--no-module-scopes", action="store_true",
                   help="no 'nn.Module: <name>' range around each module call in traces")
    g.add_argument(
        "--system-interval", type=float, default=1.0, metavar="S", help="seconds between system samples (1.0)"
    )


def options_from_args(args: argparse.Namespace) -> AgentOptions:
    """Build AgentOptions from parsed flags; raises ValueError naming a bad value."""
    schedule = ProfileSchedule(wait=args.wait, warmup=args.warmup, active=args.active, repeat=args.repeat)
    if args.system_interval <= 0:
        raise ValueError(f"--system-interval {args.system_interval}: need a positive number of seconds")
    max_steps = getattr(args, "max_steps", None)
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"--max-steps {max_steps}: need 1 or more optimizer steps")
    return AgentOptions(
        profile=not args.no_profile,
        schedule=schedule,
        with_stack=args.with_stack,
        grad_norm=args.grad_norm,
        graph=not args.no_graph,
        memory_timeline=getattr(args, "memory_timeline", False),
        module_scopes=not getattr(args, "no_module_scopes", False),
        system_interval_s=args.system_interval,
        max_steps=max_steps,
    )


def write_env_options(
    env: dict[str, str], run_dir: str, options: AgentOptions, *, owner_pid: int, t0: float
) -> None:
    """Put the run folder and options into ``env`` for the processes of a wrapped job."""
    env[RUN_DIR_ENV] = run_dir
    env[OPTIONS_ENV] = options.to_json()
    env[OWNER_ENV] = str(owner_pid)
    env[T0_ENV] = repr(t0)


def read_env_options(environ: Mapping[str, str] | None = None) -> AgentOptions:
    """Return the options a launcher passed down, or the defaults when absent or unreadable."""
    environ = os.environ if environ is None else environ
    raw = environ.get(OPTIONS_ENV)
    if not raw:
        return AgentOptions()
    try:
        return AgentOptions.from_mapping(json.loads(raw))
    except (ValueError, TypeError, AttributeError):
        return AgentOptions()
