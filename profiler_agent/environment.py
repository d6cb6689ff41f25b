"""What the manifest records about where a run ran: git, versions, devices, ranks (agent layer).

``describe_launch`` needs only the standard library (the launcher never imports torch);
``describe_torch`` is called inside the instrumented process once torch is loaded.
"""
from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["BF16_CPU_FLAGS", "RankInfo", "cpu_bf16", "read_rank_info", "read_git_info", "describe_launch",
           "describe_torch", "describe_threads", "platform_name"]


@dataclass(frozen=True)
class RankInfo:
    """This process's place in a distributed job, from torchrun's environment variables."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1


def _env_int(environ: dict[str, str] | os._Environ[str], key: str, default: int) -> int:
    try:
        return int(environ.get(key, default))
    except ValueError:
        return default


def read_rank_info(environ: dict[str, str] | None = None) -> RankInfo:
    """Return RANK / LOCAL_RANK / WORLD_SIZE from the environment (0, 0, 1 when absent)."""
    env = os.environ if environ is None else environ
    return RankInfo(
        rank=_env_int(env, "RANK", 0),
        local_rank=_env_int(env, "LOCAL_RANK", 0),
        world_size=max(1, _env_int(env, "WORLD_SIZE", 1)),
    )


def read_git_info(cwd: str | None = None) -> dict[str, Any]:
    """Return {"commit", "dirty", "branch"} of the repository holding ``cwd``, or {} outside git.

    One ``git status --porcelain=v2 --branch`` gives all three (three git processes did before:
    each one is a fork and exec beside the job's start-up).
    """
    try:
        out = subprocess.run(["git", "status", "--porcelain=v2", "--branch", "--untracked-files=no"],
                             cwd=cwd, capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return {}
    if out.returncode != 0:
        return {}
    return parse_git_status(out.stdout)


def parse_git_status(text: str) -> dict[str, Any]:
    """The git fields from ``git status --porcelain=v2 --branch`` output ({} before the first commit)."""
    commit = branch = None
    dirty = False
    for line in text.splitlines():
        if line.startswith("# branch.oid "):
            commit = line.split(" ", 2)[2].strip()
        elif line.startswith("# branch.head "):
            branch = line.split(" ", 2)[2].strip()
        elif line and not line.startswith("#"):
            dirty = True
    if not commit or commit == "(initial)":
        return {}
    info: dict[str, Any] = {"commit": commit, "dirty": dirty}
    if branch and branch != "(detached)":
        info["branch"] = branch
    return info


def _dist_version(name: str) -> str | None:
    """The installed version of distribution ``name``: its ``*.dist-info/METADATA`` read directly
    (importlib.metadata costs ~30 ms to import and scans more), falling back to importlib.metadata."""
    prefix = name.replace("-", "_").lower() + "-"
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for folder in names:
            if folder.endswith(".dist-info") and folder.lower().startswith(prefix):
                version = _metadata_version(os.path.join(entry, folder, "METADATA"))
                if version:
                    return version
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _metadata_version(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
                if not line.strip():  # the headers end at the first blank line
                    break
    except OSError:
        pass
    return None


def describe_launch() -> dict[str, Any]:
    """Manifest fields known before the job starts, without importing torch."""
    versions = {
        "python": platform.python_version(),
        "torch": _dist_version("torch"),
        "torchscope": _dist_version("torchscope"),
        "platform": platform_name(),
    }
    return {
        "git": read_git_info(os.getcwd()),
        "versions": {k: v for k, v in versions.items() if v},
        "world_size": read_rank_info().world_size,
    }


def platform_name() -> str:
    """``platform.platform()``, without the ``uname -p`` process it starts on Linux (a fork and exec
    of the launcher beside the job's start) for a processor name that is blank there or the
    machine's, and left out of the string in either case."""
    if not sys.platform.startswith("linux"):
        return platform.platform()
    uname = os.uname()
    libc, libc_version = platform.libc_ver()
    return _platform_string(uname.sysname, uname.release, uname.machine, "with", libc + libc_version)


def _platform_string(*parts: str) -> str:
    # What platform._platform does with the parts (a private helper of the standard library).
    text = "-".join(p.strip() for p in parts if p)
    for char in ' /\\:;"()':
        text = text.replace(char, "_" if char == " " else "-")
    text = text.replace("unknown", "")
    while "--" in text:
        text = text.replace("--", "-")
    return text.rstrip("-")


def describe_torch() -> dict[str, Any]:
    """Versions and devices as seen by torch in this process (imports torch)."""
    import torch

    versions: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__}
    if torch.version.cuda:
        versions["cuda"] = torch.version.cuda
    if getattr(torch.version, "hip", None):
        versions["hip"] = torch.version.hip
    with contextlib.suppress(Exception):
        if torch.backends.cudnn.is_available():
            versions["cudnn"] = torch.backends.cudnn.version()
    devices: list[dict[str, Any]] = [
        {"type": "cpu", "name": _processor(), "count": os.cpu_count(),
         "threads": torch.get_num_threads(), **cpu_bf16()}
    ]
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            devices.append({
                "type": "cuda",
                "index": i,
                "name": props.name,
                "total_memory_bytes": int(props.total_memory),
                "capability": f"{props.major}.{props.minor}",
                "multi_processor_count": int(props.multi_processor_count),
            })
    return {"versions": versions, "devices": devices, "executable": sys.executable, "threads": describe_threads()}


# CPU flags of native bfloat16 arithmetic, which oneDNN's bf16 matmul/convolution kernels need
# (x86: AMX, AVX512-BF16; Arm: the BF16 extension). Without them bf16 autocast converts and
# computes in float32: slower, not faster (docs/variants.md, measured).
BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16", "bf16")


def cpu_bf16(cpuinfo: str | None = None) -> dict[str, Any]:
    """The cpu device entry's ``bf16_native`` (bool) and ``bf16_flags`` (those of BF16_CPU_FLAGS the
    CPU has), from /proc/cpuinfo's ``flags``/``Features`` (Linux); {} where that cannot be read."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
                cpuinfo = f.read(1 << 16)  # the first processor's lines are enough
        except OSError:
            return {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            have = set(value.split())
            found = [flag for flag in BF16_CPU_FLAGS if flag in have]
            return {"bf16_native": bool(found), "bf16_flags": found}
    return {}


def _processor() -> str:
    """``platform.processor() or platform.machine()``, without the ``uname -p`` process on Linux
    (a fork of the training process at its first step), where it is the machine or blank."""
    if sys.platform.startswith("linux"):
        return platform.machine()
    return platform.processor() or platform.machine()


def describe_threads() -> dict[str, int]:
    """The manifest's ``threads``: torch's intra-op and inter-op pools and the CPUs this process may use.

    ``affinity_cpus`` (``len(os.sched_getaffinity(0))``, Linux) is left out where unavailable; it is
    smaller than ``cpu_count`` under ``taskset``, cgroup cpusets and most container CPU limits.
    """
    import torch

    threads: dict[str, int] = {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}
    cpus = os.cpu_count()
    if cpus:
        threads["cpu_count"] = cpus
    with contextlib.suppress(AttributeError, OSError):
        threads["affinity_cpus"] = len(os.sched_getaffinity(0))
    return threads
