"""The one definition of peak memory: order of sources, labels, rank filter, common source."""
from __future__ import annotations

import pandas as pd
import pytest

from app.analysis.memory.peak import (
    PEAK_SOURCE_ORDER,
    common_peak,
    peak_description,
    peak_quantity,
    peak_sources,
    pick_peak,
    system_peak_sources,
    trace_peak_sources,
)
from app.analysis.run.summary import compute_peak_memory, trace_peaks_could_change

SYSTEM_CPU = pd.DataFrame({"rank": [0, 0, 1], "rss_bytes": [500e6, 600e6, 900e6],
                           "children_rss_bytes": [0.0, 100e6, 0.0]})
SYSTEM_GPU = SYSTEM_CPU.assign(gpu_max_allocated_bytes=[1e9, 2e9, 3e9], gpu_allocated_bytes=[0.5e9, 1e9, 1e9])
TRACE_PEAKS = pd.DataFrame({"rank": [0, 0, 1], "device": ["cpu", "cuda:0", "cpu"],
                            "peak_allocated_bytes": [40e6, 1.5e9, 70e6]})


def test_every_source_has_a_quantity_and_description() -> None:
    for s in PEAK_SOURCE_ORDER:
        assert peak_quantity(s) != s and len(peak_description(s)) > 20
    assert peak_quantity("trace_allocated:xpu") == "xpu tensors"
    assert peak_quantity("none") == "none" and "no memory data" in peak_description("none")


def test_gpu_allocator_peak_first_then_traced_tensors_then_rss() -> None:
    assert pick_peak(peak_sources(SYSTEM_GPU, TRACE_PEAKS)) == (3e9, "system:gpu_max_allocated_bytes")
    # CPU run: the traced tensor peak beats RSS; GPU tensors before CPU tensors.
    assert pick_peak(peak_sources(SYSTEM_CPU, TRACE_PEAKS)) == (1.5e9, "trace_allocated:cuda")
    cpu_only = TRACE_PEAKS[TRACE_PEAKS["device"] == "cpu"]
    assert pick_peak(peak_sources(SYSTEM_CPU, cpu_only)) == (70e6, "trace_allocated:cpu")
    # Without traces: RSS of the process plus its workers, per sample (600 + 100, not 900 + 100).
    assert pick_peak(peak_sources(SYSTEM_CPU)) == (900e6, "system:host_rss_bytes")
    assert pick_peak(peak_sources(SYSTEM_CPU, rank=0)) == (700e6, "system:host_rss_bytes")
    assert pick_peak(peak_sources(SYSTEM_CPU.drop(columns="children_rss_bytes"))) == (900e6, "system:rss_bytes")
    assert pick_peak({}) == (None, "none")


def test_rank_filter_of_traces_and_samples() -> None:
    assert trace_peak_sources(TRACE_PEAKS, rank=1) == {"trace_allocated:cpu": 70e6}
    assert system_peak_sources(SYSTEM_GPU, rank=0)["system:gpu_max_allocated_bytes"] == 2e9
    no_rank = pd.DataFrame({"rss_bytes": [1.0, 3.0]})
    assert system_peak_sources(no_rank, rank=0) == {"system:rss_bytes": 3.0}


def test_common_source_is_the_best_both_have() -> None:
    gpu, cpu = peak_sources(SYSTEM_GPU, TRACE_PEAKS), peak_sources(SYSTEM_CPU, TRACE_PEAKS[TRACE_PEAKS.device == "cpu"])
    assert common_peak(gpu, cpu) == (70e6, 70e6, "trace_allocated:cpu")
    assert common_peak(gpu, {}) == (None, None, "none")


def test_run_summary_uses_the_same_definition() -> None:
    peak, source = compute_peak_memory(SYSTEM_CPU, None)
    assert (peak, source) == (900e6, "system:host_rss_bytes") and trace_peaks_could_change(source)
    assert compute_peak_memory(SYSTEM_CPU, None, TRACE_PEAKS[TRACE_PEAKS.device == "cpu"]) == \
        (70e6, "trace_allocated:cpu")
    peak, source = compute_peak_memory(SYSTEM_GPU, 0)
    assert peak == pytest.approx(2e9) and not trace_peaks_could_change(source)


def test_compare_uses_the_common_source_and_keeps_each_sides_own(tmp_path) -> None:
    from types import SimpleNamespace

    from app.analysis.compare.steps import compute_peak_memory as compare_peaks
    from app.workspace.sides import CompareSide, SideKind

    gpu = CompareSide("gpu", tmp_path, SideKind.TRACES, analysis=SimpleNamespace(memory_peaks=TRACE_PEAKS))
    cpu = CompareSide("cpu", tmp_path, SideKind.TRACES,
                      analysis=SimpleNamespace(memory_peaks=TRACE_PEAKS[TRACE_PEAKS.device == "cpu"]))
    a, b = compare_peaks(gpu, cpu)
    assert (a.bytes, b.bytes, a.source) == (70e6, 70e6, "trace_allocated:cpu")
    assert (a.own_source, b.own_source) == ("trace_allocated:cuda", "trace_allocated:cpu")
    assert a.quantity == "CPU tensors" and "CPU tensor allocations" in a.description
    none = compare_peaks(CompareSide("x", tmp_path, SideKind.TRACES), cpu)
    assert none[0].bytes is None and none[0].source == "none" and none[0].quantity == "none"
