"""What a process's first optimizer step settles once: the model's root, the manifest, the sampler (agent layer).

Nothing is written before the first step (processes that never train leave no trace), so this
is where a training process announces itself: its torch versions, devices, threads and
profiler settings go into run.json in one locked rewrite (each rewrite costs an fsync), and
the system sampler starts.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from .contention import JobCpu, StepCpu, job_root_pid
from .environment import describe_torch
from .failures import FailureLog
from .options import OWNER_ENV, AgentOptions
from .profiling import profiler_settings
from .runformat import Artifact, ArtifactKind, Manifest, layout, update_manifest
from .system import SystemSampler

__all__ = ["choose_root", "record_first_step", "start_system_sampler"]


def choose_root(candidates: Sequence[torch.nn.Module], wanted: set[int]) -> torch.nn.Module | None:
    """The top-level module holding most of the parameters in ``wanted`` (ids), then the most
    parameters; None without candidates or when the best holds no parameter."""
    if not candidates:
        return None

    def score(m: torch.nn.Module) -> tuple[int, int]:
        params = list(m.parameters())
        return sum(1 for p in params if id(p) in wanted), sum(p.numel() for p in params)

    best = max(candidates, key=score)
    return best if any(True for _ in best.parameters()) else None


def record_first_step(run_dir: Path, options: AgentOptions, *, rank: int, world_size: int,
                      tree: Artifact | None = None) -> None:
    """Record this process's torch versions, devices, threads, profiler settings and artifacts
    (metrics, system, and the module ``tree`` when written) in one manifest rewrite."""
    info = describe_torch()
    files = (Artifact(ArtifactKind.METRICS, layout.METRICS), Artifact(ArtifactKind.SYSTEM, layout.SYSTEM),
             *([tree] if tree is not None else []))
    paths = {f.path for f in files}

    def change(m: Manifest) -> Manifest:
        first = rank == 0 or not m.devices
        # Readers keep unknown top-level fields in Manifest.extra: "threads", "profiler".
        extra = dict(m.extra)
        if first or "threads" not in extra:
            extra["threads"] = info["threads"]
        if rank == 0 or "profiler" not in extra:  # every rank has the same options
            extra["profiler"] = profiler_settings(options, extra.get("profiler"))
        return m.replace(
            artifacts=(*[a for a in m.artifacts if a.path not in paths], *files),
            versions={**m.versions, **info["versions"]},
            devices=tuple(info["devices"]) if first else m.devices,
            world_size=max(m.world_size, world_size),
            extra=extra,
        )

    update_manifest(run_dir, change)


def start_system_sampler(run_dir: Path, failures: FailureLog, options: AgentOptions, *, rank: int, t0: float,
                         step_cpu: StepCpu) -> SystemSampler:
    """Start the system sampler thread; on Linux it also reads the job's CPU for ``step_cpu``."""
    job_cpu = None
    if sys.platform.startswith("linux"):
        owner = os.environ.get(OWNER_ENV, "")
        job_cpu = JobCpu(job_root_pid(int(owner) if owner.isdigit() else None))
        step_cpu.job = job_cpu
    sampler = SystemSampler(run_dir, failures, rank=rank, interval_s=options.system_interval_s, t0=t0,
                            job_cpu=job_cpu)
    sampler.start()
    return sampler
