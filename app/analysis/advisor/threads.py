"""Advisor rule on CPU intra-op threads versus the cores available, for CPU training (analysis layer)."""
from __future__ import annotations

from .common import DOCS, as_number, require_run
from .model import Finding, MissingEvidence, RunEvidence, Severity
from .registry import rule

__all__ = ["cpu_threads"]

# The agent records os.cpu_count() (logical CPUs) and torch.get_num_threads(). torch defaults to
# the physical cores, i.e. half the logical CPUs on 2-way SMT machines, which is right. A quarter
# of the logical CPUs or fewer is therefore at most half the physical cores: work left on the table.
THREADS_LOW_SHARE = 0.25
# Below this many logical CPUs thread tuning does not matter.
THREADS_MIN_CPUS = 4
# More intra-op threads than logical CPUs oversubscribes the cores: threads preempt each other.
THREADS_HIGH_SHARE = 1.0
# Expected speed-up is capped: few ops scale linearly with threads.
THREADS_GAIN_CAP = 0.5

_FIX_LOW = """\
import os, torch
torch.set_num_threads(len(os.sched_getaffinity(0)) // 2 or 1)  # ≈ physical cores
# or in the shell: OMP_NUM_THREADS=<cores> python train.py
# check nothing set OMP_NUM_THREADS=1 (torchrun does, for multi-process jobs)"""

_FIX_HIGH = """\
import os, torch
torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // 2))
# with DataLoader workers or several processes per machine, split the cores between them:
# OMP_NUM_THREADS = cores // processes"""


def _cpu_entry(ev: RunEvidence) -> tuple[float, float]:
    require_run(ev, "the manifest's device list")
    if any(str(d.get("type")) in ("cuda", "rocm", "hip", "mps", "xpu") for d in ev.devices) or ev.has_device_trace:
        raise MissingEvidence("an accelerator trains this run; CPU threads do not set its pace")
    # Prefer the manifest's `threads` record: the CPUs this process may run on (affinity: taskset,
    # container limits) are the real budget, not every CPU of the host.
    t = ev.threads
    cpus, intra = as_number(t.get("affinity_cpus") or t.get("cpu_count")), as_number(t.get("intra_op"))
    if cpus and intra:
        return cpus, intra
    for d in ev.devices:
        if str(d.get("type")) == "cpu":
            cores, threads = as_number(d.get("count")), as_number(d.get("threads"))
            if cores and threads:
                return cores, threads
    raise MissingEvidence("needs the cpu device entry with 'count' (os.cpu_count) and 'threads' (torch.get_num_threads)")


@rule("cpu_threads", family="threads", title="CPU intra-op threads far from the cores available")
def cpu_threads(ev: RunEvidence) -> list[Finding]:
    """Fires for CPU training when threads ≤ THREADS_LOW_SHARE × CPUs or threads > CPUs."""
    cores, threads = _cpu_entry(ev)
    if cores < THREADS_MIN_CPUS and threads <= cores:
        return []
    low = threads <= THREADS_LOW_SHARE * cores
    high = threads > THREADS_HIGH_SHARE * cores
    if not (low or high):
        return []
    evidence = {"intra_op_threads": threads, "logical_cpus": cores, "threads_per_cpu": threads / cores}
    if low:
        gain = min(THREADS_GAIN_CAP, 1 - threads / (cores / 2))
        return [Finding(
            rule="cpu_threads", family="threads", severity=Severity.MEDIUM,
            title=f"Training on the CPU with {int(threads)} thread(s) of {int(cores)} CPUs",
            explanation=(
                f"torch.get_num_threads() was {int(threads)} while the machine has {int(cores)} logical "
                f"CPUs: matrix multiplies and convolutions run on a fraction of the cores."
            ),
            evidence=evidence,
            fix_summary="Give intra-op parallelism about one thread per physical core.",
            fix=_FIX_LOW, expected_gain=f"up to {gain * 100:.0f}% of step time on compute-bound ops",
            gain_share=gain, doc_url=DOCS["threads"], chart="Config › devices; System › CPU %",
        )]
    return [Finding(
        rule="cpu_threads", family="threads", severity=Severity.LOW,
        title=f"{int(threads)} intra-op threads oversubscribe {int(cores)} CPUs",
        explanation=(
            f"torch.get_num_threads() was {int(threads)}, more than the {int(cores)} logical CPUs: "
            f"threads preempt each other and caches thrash."
        ),
        evidence=evidence,
        fix_summary="Set the thread count to the physical cores (divided among processes).",
        fix=_FIX_HIGH, expected_gain="typically 5–20% of step time on CPU-bound ops",
        gain_share=0.1, doc_url=DOCS["threads"], chart="Config › devices; System › CPU %",
    )]
