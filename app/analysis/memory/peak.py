"""What "peak memory" means in Torchscope: the sources of a run's peak, best first, with the
quantity each one measures (analysis layer; docs/compare.md and docs/views.md).

One definition serves the Overview tab, the Compare page, ``torchscope diff`` and the sweep
table: the first source in :data:`PEAK_SOURCE_ORDER` that the data has (the Compare page: the
first that *both* sides have, so the two numbers measure the same thing):

1. the GPU allocator's peak over the whole run (``torch.cuda.max_memory_allocated``, sampled
   into ``system.jsonl``);
2. the largest allocated level in the profiled steps' ``[memory]`` events of the traces:
   CUDA first, then CPU, i.e. *tensor* memory (what the model's parameters, activations and
   gradients take); on a CPU-only run this is the number an optimization changes;
3. sampled device levels (allocated, reserved, used) that other writers log;
4. host RSS (the process plus its DataLoader workers), a labelled fallback: it also counts the
   interpreter, libraries and allocator caches, so it moves little when tensors shrink.

The Runs list and ``torchscope ls`` read no traces (a store of 1,000 runs lists in seconds), so
for CPU runs they show the RSS fallback; the column says so.
"""
from __future__ import annotations

import pandas as pd

__all__ = ["PEAK_SOURCE_ORDER", "peak_quantity", "peak_description", "system_peak_sources", "trace_peak_sources",
           "peak_sources", "pick_peak", "common_peak"]

# Columns of system.jsonl, as "system:<column>"; "host_rss_bytes" is derived (rss + children_rss).
PEAK_SOURCE_ORDER: tuple[str, ...] = (
    "system:gpu_max_allocated_bytes",
    "system:cuda_max_allocated_bytes",
    "system:peak_memory_bytes",
    "trace_allocated:cuda",
    "system:gpu_allocated_bytes",
    "system:gpu_reserved_bytes",
    "system:gpu_used_bytes",
    "trace_allocated:cpu",
    "system:host_rss_bytes",
    "system:rss_bytes",
)

_QUANTITY = {
    "system:gpu_max_allocated_bytes": ("GPU allocator",
                                       "the GPU caching allocator's peak of allocated tensor memory over the whole "
                                       "run (torch.cuda.max_memory_allocated, from the system samples)"),
    "system:cuda_max_allocated_bytes": ("GPU allocator",
                                        "the GPU caching allocator's peak of allocated tensor memory "
                                        "(cuda_max_allocated_bytes of the system samples)"),
    "system:peak_memory_bytes": ("job-reported", "the peak_memory_bytes the job logged in its system samples"),
    "trace_allocated:cuda": ("GPU tensors",
                             "the largest allocated level of the CUDA allocator in the profiled steps (the "
                             "traces' [memory] events, largest of any rank and device)"),
    "system:gpu_allocated_bytes": ("GPU allocated",
                                   "the largest sampled torch.cuda.memory_allocated (samples can miss short peaks)"),
    "system:gpu_reserved_bytes": ("GPU reserved",
                                  "the largest sampled torch.cuda.memory_reserved (the caching allocator's pool)"),
    "system:gpu_used_bytes": ("GPU used",
                              "the largest sampled device memory in use by every process (total − free)"),
    "trace_allocated:cpu": ("CPU tensors",
                            "the largest level of CPU tensor allocations in the profiled steps (the traces' "
                            "[memory] events, largest of any rank); tensors only, not the interpreter or libraries"),
    "system:host_rss_bytes": ("host RSS",
                              "the largest sampled resident set of the process plus its children (DataLoader "
                              "workers); includes the interpreter, libraries and allocator caches"),
    "system:rss_bytes": ("process RSS", "the largest sampled resident set of the process"),
}


def peak_quantity(source: str) -> str:
    """A short name of what a peak source measures ("GPU allocator", "host RSS", ...)."""
    if source in _QUANTITY:
        return _QUANTITY[source][0]
    if source.startswith("trace_allocated:"):
        return f"{source.split(':', 1)[1]} tensors"
    return "none" if source == "none" else source


def peak_description(source: str) -> str:
    """One sentence on what a peak source measures and where it comes from."""
    if source in _QUANTITY:
        return _QUANTITY[source][1]
    if source.startswith("trace_allocated:"):
        return (f"the largest allocated level of the {source.split(':', 1)[1]} allocator in the profiled steps "
                "(the traces' [memory] events)")
    if source == "none":
        return "no memory data: no system samples and no memory events in the traces"
    return f"the largest value of {source.removeprefix('system:')} in the system samples"


def system_peak_sources(system: pd.DataFrame | None, rank: int | None = None) -> dict[str, float]:
    """Peak of every memory column of the system samples (``rank``'s rows, or all), keyed
    ``system:<column>``; ``host_rss_bytes`` is ``rss_bytes`` + ``children_rss_bytes`` per sample."""
    if system is None or len(system) == 0:
        return {}
    if rank is not None and "rank" in system.columns:  # samples without a rank are rank 0's
        system = system[pd.to_numeric(system["rank"], errors="coerce").fillna(0) == rank]
    found: dict[str, float] = {}
    if "rss_bytes" in system.columns and "children_rss_bytes" in system.columns:
        rss = pd.to_numeric(system["rss_bytes"], errors="coerce")
        system = system.assign(host_rss_bytes=rss + pd.to_numeric(system["children_rss_bytes"],
                                                                  errors="coerce").fillna(0))
    for source in PEAK_SOURCE_ORDER:
        col = source.removeprefix("system:")
        if source.startswith("system:") and col in system.columns:
            peak = pd.to_numeric(system[col], errors="coerce").max()
            if pd.notna(peak) and peak > 0:
                found[source] = float(peak)
    return found


def trace_peak_sources(peaks: pd.DataFrame | None, rank: int | None = None) -> dict[str, float]:
    """Largest ``peak_allocated_bytes`` per device kind of a trace analysis' memory peaks table
    (``device`` like ``cuda:0`` / ``cpu``), keyed ``trace_allocated:<kind>``."""
    if not isinstance(peaks, pd.DataFrame) or len(peaks) == 0 or "peak_allocated_bytes" not in peaks.columns:
        return {}
    if rank is not None and "rank" in peaks.columns:
        peaks = peaks[pd.to_numeric(peaks["rank"], errors="coerce") == rank]
    kind = peaks["device"].astype(str).str.split(":").str[0] if "device" in peaks.columns \
        else pd.Series("device", index=peaks.index)
    values = pd.to_numeric(peaks["peak_allocated_bytes"], errors="coerce")
    return {f"trace_allocated:{k}": float(v) for k, v in values.groupby(kind).max().items() if pd.notna(v) and v > 0}


def peak_sources(system: pd.DataFrame | None, trace_peaks: pd.DataFrame | None = None,
                 rank: int | None = None) -> dict[str, float]:
    """Every peak the data offers, keyed by source (see PEAK_SOURCE_ORDER)."""
    return {**trace_peak_sources(trace_peaks, rank), **system_peak_sources(system, rank)}


def _order(source: str) -> tuple[int, str]:
    # Unknown device kinds of traces (xpu, mps, ...) rank with the GPU's traced peak.
    if source in PEAK_SOURCE_ORDER:
        return PEAK_SOURCE_ORDER.index(source), source
    return PEAK_SOURCE_ORDER.index("trace_allocated:cuda"), source


def pick_peak(sources: dict[str, float]) -> tuple[float | None, str]:
    """(bytes, source) of the best source, or (None, "none")."""
    if not sources:
        return None, "none"
    best = min(sources, key=_order)
    return sources[best], best


def common_peak(a: dict[str, float], b: dict[str, float]) -> tuple[float | None, float | None, str]:
    """(baseline bytes, candidate bytes, source) of the best source both have, or (None, None, "none")."""
    both = [s for s in a if s in b]
    if not both:
        return None, None, "none"
    best = min(both, key=_order)
    return a[best], b[best], best
