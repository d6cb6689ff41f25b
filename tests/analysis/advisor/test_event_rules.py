"""Trace-event rules on hand-made events: syncs, copies, mixed precision, memory, allocator churn,
evaluation without no_grad, DataParallel, exposed communication — both ways."""
from __future__ import annotations

import pandas as pd
import pytest

from app.analysis.advisor import MissingEvidence
from app.analysis.advisor.distributed import comm_not_overlapped, data_parallel_used
from app.analysis.advisor.evaluation import eval_without_no_grad
from app.analysis.advisor.memory import allocator_churn, memory_near_capacity
from app.analysis.advisor.precision import mixed_precision
from app.analysis.advisor.transfers import host_device_copies, sync_points
from tests.analysis.advisor.factory import events, evidence, kernel_step, steps, trace

A100 = {"deviceProperties": [{"id": 0, "name": "NVIDIA A100", "computeMajor": 8, "totalGlobalMem": 40 * 2**30}]}


def _step_rows(n_steps: int, extra) -> list[dict]:  # noqa: ANN001
    rows = []
    for s in range(n_steps):
        rows += kernel_step(s * 10_000.0, n_kernels=5, kernel_us=500.0, corr0=100 * s)
        rows += extra(s * 10_000.0)
    return rows


def test_sync_points_counts_syncs_per_step_and_blocked_time():
    def syncs(t0: float) -> list[dict]:
        out = []
        for i in range(4):
            out.append({"name": "aten::_local_scalar_dense", "cat": "cpu_op", "ts_us": t0 + 3000 + i * 1000, "dur_us": 600.0,
                        "pid": "1", "tid": "1"})
            out.append({"name": "cudaStreamSynchronize", "cat": "cuda_runtime", "ts_us": t0 + 3001 + i * 1000,
                        "dur_us": 500.0, "pid": "1", "tid": "1"})
        return out

    ev = evidence(steps_df=steps(3), traces=[trace(events(_step_rows(3, syncs)), meta=A100)])
    [f] = sync_points(ev)
    assert f.evidence["syncs_per_step"] == 4 and f.evidence["item_calls_per_step"] == 4
    assert f.evidence["blocked_share"] == pytest.approx(0.2)
    quiet = evidence(steps_df=steps(3), traces=[trace(events(_step_rows(3, lambda t0: [])), meta=A100)])
    assert sync_points(quiet) == []


def test_host_device_copies_share_and_pageable():
    def copies(t0: float) -> list[dict]:
        return [{"name": "Memcpy HtoD (Pageable -> Device)", "cat": "gpu_memcpy", "ts_us": t0 + 5000, "dur_us": 1500.0,
                 "pid": "0", "tid": "7", "bytes": 64 << 20},
                {"name": "Memcpy DtoD (Device -> Device)", "cat": "gpu_memcpy", "ts_us": t0 + 7000, "dur_us": 2000.0,
                 "pid": "0", "tid": "7"}]

    [f] = host_device_copies(evidence(steps_df=steps(2), traces=[trace(events(_step_rows(2, copies)))]))
    assert f.evidence["copy_share"] == pytest.approx(0.15)  # DtoD is not a host↔device copy
    assert f.evidence["pageable_htod_per_step"] == 1 and "pin_memory=True" in f.fix
    assert host_device_copies(evidence(steps_df=steps(2), traces=[trace(events(_step_rows(2, lambda t0: [])))])) == []


def _mm_trace(types: str, meta: dict) -> object:
    rows = kernel_step(0.0, n_kernels=10, kernel_us=300.0, op="aten::mm", op_types=types, name="ampere_sgemm_128x64_nn")
    rows += kernel_step(5000.0, n_kernels=10, kernel_us=200.0, op="aten::add", op_types='["float","float"]',
                        name="elementwise_kernel", corr0=50)
    return trace(events(rows), meta=meta)


def test_mixed_precision_fires_on_fp32_matmuls_with_tensor_cores():
    [f] = mixed_precision(evidence(traces=[_mm_trace('["float","float"]', A100)]))
    assert f.evidence["fp32_mma_share"] == pytest.approx(0.6) and f.evidence["compute_major"] == 8
    assert "autocast" in f.fix and "GradScaler" in f.fix
    # already fp16
    assert mixed_precision(evidence(traces=[_mm_trace('["c10::Half","c10::Half"]', A100)])) == []
    # no tensor cores (Pascal)
    pascal = {"deviceProperties": [{"id": 0, "name": "P100", "computeMajor": 6, "totalGlobalMem": 2**34}]}
    with pytest.raises(MissingEvidence):
        mixed_precision(evidence(traces=[_mm_trace('["float","float"]', pascal)]))


def test_mixed_precision_reads_kernel_names_without_recorded_dtypes():
    [f] = mixed_precision(evidence(traces=[_mm_trace("", A100)]))  # sgemm = fp32 on CUDA cores
    assert f.rule == "mixed_precision"


def _memory(peak_bytes: float, base_bytes: float) -> pd.DataFrame:
    ts = [100.0, 2000.0, 5000.0, 9000.0, 10_100.0, 12_000.0, 15_000.0, 19_000.0]
    alloc = [base_bytes, (base_bytes + peak_bytes) / 2, peak_bytes, base_bytes] * 2
    return pd.DataFrame({"ts_us": ts, "device_type": 1, "device_id": 0, "addr": 1, "bytes": 1,
                         "total_allocated_bytes": alloc, "total_reserved_bytes": [peak_bytes] * 8})


def _peaks(peak: float) -> pd.DataFrame:
    return pd.DataFrame([{"rank": 0, "device": "cuda:0", "peak_allocated_bytes": int(peak),
                          "peak_reserved_bytes": int(peak), "peak_ts_us": 5000.0, "ops_at_peak": "aten::conv2d"}])


def test_memory_near_capacity_and_activation_share():
    cap = 40 * 2**30
    tr = trace(events(_step_rows(2, lambda t0: [])), meta=A100, memory=_memory(0.95 * cap, 0.2 * cap))
    [f] = memory_near_capacity(evidence(steps_df=steps(2), traces=[tr], memory_peaks=_peaks(0.95 * cap)))
    assert f.evidence["peak_share"] == pytest.approx(0.95)
    assert f.evidence["activation_share"] == pytest.approx(0.75 / 0.95)
    assert "checkpoint" in f.fix and "empty_cache" in f.fix
    low = trace(events(_step_rows(2, lambda t0: [])), meta=A100, memory=_memory(0.3 * cap, 0.25 * cap))
    assert memory_near_capacity(evidence(steps_df=steps(2), traces=[low], memory_peaks=_peaks(0.3 * cap))) == []


def test_allocator_churn_after_the_first_step():
    def frees(t0: float) -> list[dict]:
        return [{"name": n, "cat": "cuda_runtime", "ts_us": t0 + 6000 + i, "dur_us": 300.0, "pid": "1", "tid": "1"}
                for i, n in enumerate(["cudaFree", "cudaFree", "cudaMalloc"])]

    [f] = allocator_churn(evidence(steps_df=steps(3), traces=[trace(events(_step_rows(3, frees)))]))
    assert f.evidence["cuda_free_per_step"] == 2 and "expandable_segments" in f.fix
    assert allocator_churn(evidence(steps_df=steps(3), traces=[trace(events(_step_rows(3, lambda t0: [])))])) == []


def _fwd(name: str, ts: float, seq: int | None, dur: float = 10.0) -> dict:
    return {"name": name, "cat": "cpu_op", "ts_us": ts, "dur_us": dur, "pid": "1", "tid": "1", "sequence": seq}


def test_eval_without_no_grad_from_sequence_numbers():
    train = [_fwd("aten::linear", 0, 0, 30), _fwd("aten::addmm", 5, 1), _fwd("aten::relu", 20, 2),
             _fwd("autograd::engine::evaluate_function: AddmmBackward0", 100, 1), _fwd("AddmmBackward0", 101, 1)]
    evals = [_fwd("aten::conv2d", 200 + 20 * i, 10 + i) for i in range(6)]
    evals += [{**_fwd("aten::convolution", 201 + 20 * i, 100 + i), "dur_us": 5.0} for i in range(6)]  # nested: once
    nograd = [_fwd("aten::conv2d", 200 + 20 * i, None) for i in range(6)]
    [f] = eval_without_no_grad(evidence(steps_df=steps(1, duration_us=400.0), traces=[trace(events(train + evals))]))
    assert f.evidence["unused_graph_ops"] == 6 and "inference_mode" in f.fix
    assert eval_without_no_grad(evidence(steps_df=steps(1, duration_us=400.0), traces=[trace(events(train + nograd))])) == []


def test_data_parallel_from_module_tree_or_trace_not_from_aten_gather():
    tree = {"name": "", "type": "DataParallel", "children": [{"name": "module", "type": "ResNet", "children": []}]}
    [f] = data_parallel_used(evidence(module_tree=tree))
    assert f.evidence["in_module_tree"] == 1 and "DistributedDataParallel" in f.fix
    dp = trace(events([_fwd("GatherBackward", 1.0, 3)]))
    assert data_parallel_used(evidence(traces=[dp]))[0].evidence["data_parallel_ops"] == 1
    aten_gather = trace(events([_fwd("GatherBackward0", 1.0, 3)]))
    assert data_parallel_used(evidence(traces=[aten_gather])) == []


def test_comm_not_overlapped():
    def comm_after(t0: float) -> list[dict]:  # NCCL after all compute: fully exposed
        return [{"name": "ncclKernel_AllReduce_RING_LL_Sum_float", "cat": "kernel", "ts_us": t0 + 3000, "dur_us": 3000.0,
                 "pid": "0", "tid": "8"}]

    def comm_during(t0: float) -> list[dict]:  # NCCL under the compute kernels: hidden
        return [{"name": "ncclKernel_AllReduce_RING_LL_Sum_float", "cat": "kernel", "ts_us": t0 + 100, "dur_us": 2000.0,
                 "pid": "0", "tid": "8"}]

    [f] = comm_not_overlapped(evidence(steps_df=steps(2), traces=[trace(events(_step_rows(2, comm_after)))]))
    assert f.evidence["exposed_comm_share"] == pytest.approx(0.3) and f.evidence["overlapped_share"] == 0
    assert comm_not_overlapped(evidence(steps_df=steps(2), traces=[trace(events(_step_rows(2, comm_during)))])) == []


def test_eval_rule_skips_when_no_evaluation_was_profiled():
    train = [_fwd("aten::linear", 0, 0, 30), _fwd("aten::addmm", 5, 1),
             {**_fwd("aten::mkldnn_convolution", 6, None), "dur_us": 2.0},  # below autograd: never numbered
             _fwd("AddmmBackward0", 101, 1)]
    with pytest.raises(MissingEvidence, match="outside the profiler window"):
        eval_without_no_grad(evidence(steps_df=steps(1, duration_us=400.0), traces=[trace(events(train))]))


def test_memory_from_agent_system_samples_without_trace():
    from app.analysis.advisor import RunEvidence

    gib = 2**30
    system = pd.DataFrame({"time": [0, 1, 2], "rank": 0, "gpu_index": 0,
                           "gpu_max_allocated_bytes": [10 * gib, 70 * gib, 76 * gib],
                           "gpu_reserved_bytes": [12 * gib, 74 * gib, 78 * gib], "gpu_total_bytes": 80 * gib})
    [f] = memory_near_capacity(RunEvidence(source="x", has_run=True, system=system))
    assert f.evidence["peak_share"] == pytest.approx(0.95) and f.chart == "System › GPU memory"
    ok = system.assign(gpu_max_allocated_bytes=[gib, 2 * gib, 3 * gib])
    assert memory_near_capacity(RunEvidence(source="x", has_run=True, system=ok)) == []
    with pytest.raises(MissingEvidence):
        memory_near_capacity(RunEvidence(source="x", has_run=True, system=pd.DataFrame({"time": [0], "cpu_percent": [5]})))


def test_several_profiler_windows_of_one_rank_count_per_step():
    def syncs(t0: float) -> list[dict]:
        return [{"name": "cudaStreamSynchronize", "cat": "cuda_runtime", "ts_us": t0 + 3000 + i * 1000, "dur_us": 500.0,
                 "pid": "1", "tid": "1"} for i in range(4)]

    rows = _step_rows(2, syncs)
    first = [r for r in rows if r["ts_us"] < 10_000]
    second = [r for r in rows if r["ts_us"] >= 10_000]
    ev = evidence(steps_df=steps(2), traces=[trace(events(first)), trace(events(second))])
    [f] = sync_points(ev)
    assert f.evidence["syncs_per_step"] == 4
