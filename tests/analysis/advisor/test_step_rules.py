"""Rules over the step table and the manifest: data loading, optimizer, launch-bound, utilisation,
stragglers, CPU threads — each fires on a run with the problem and stays silent on one without."""
from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from app.analysis.advisor import MissingEvidence
from app.analysis.advisor.dataloading import data_loading_bound
from app.analysis.advisor.distributed import rank_stragglers
from app.analysis.advisor.launch import launch_bound
from app.analysis.advisor.optimizer import optimizer_expensive
from app.analysis.advisor.threads import cpu_threads
from app.analysis.advisor.utilization import low_device_utilization
from app.analysis.trace.windows import ANOMALY, ProfiledWindow
from tests.analysis.advisor.factory import events, evidence, kernel_step, metrics, steps, trace


def test_data_loading_bound_shows_measured_share_and_config():
    ev = evidence(steps_df=steps(8, dataloader=3000), config={"num_workers": 0})
    [f] = data_loading_bound(ev)
    assert f.evidence["dataloader_share"] == pytest.approx(0.3)
    assert f.evidence["num_workers"] == 0 and "num_workers=0" in f.explanation
    assert f.severity == "high" and "num_workers" in f.fix and "pin_memory" in f.fix
    assert f.weight.steps == 8 and f.weight.windows == 1 and f.weight.stable
    # the same share from 4 profiled steps: too few for HIGH (the gate of common.weigh)
    [g] = data_loading_bound(evidence(steps_df=steps(4, dataloader=3000)))
    assert g.severity == "medium" and "capped at MEDIUM" in g.weight.note
    assert data_loading_bound(evidence(steps_df=steps(dataloader=200))) == []  # 2%


def test_data_loading_falls_back_to_logged_data_time():
    m = metrics(step_time_s=[0.1] * 10, data_time_s=[0.02] * 10)
    [f] = data_loading_bound(evidence(metrics_df=m))
    assert f.evidence["dataloader_share"] == pytest.approx(0.2)
    with pytest.raises(MissingEvidence):
        data_loading_bound(evidence(metrics_df=metrics(step_time_s=[0.1] * 10)))


def test_optimizer_expensive_unless_fused():
    st = steps(forward=3000, backward=4000, optimizer=2500)
    [f] = optimizer_expensive(evidence(steps_df=st))
    assert f.evidence["optimizer_share"] == pytest.approx(0.25)
    assert "foreach=True" in f.fix
    assert optimizer_expensive(evidence(steps_df=steps(forward=4000, backward=5000, optimizer=500))) == []
    fused = trace(events([{"name": "aten::_fused_adamw_", "cat": "cpu_op", "ts_us": 1.0, "dur_us": 5.0}]))
    assert optimizer_expensive(evidence(steps_df=st, traces=[fused])) == []


def _gpu_trace(kernel_us: float, n: int = 40, gap_us: float = 0.0) -> object:
    rows = kernel_step(0.0, n_kernels=n, kernel_us=kernel_us, gap_us=gap_us)
    return trace(events(rows))


def test_launch_bound_many_short_kernels_with_host_idle():
    st = steps(1, duration_us=400.0, kernel=100.0, runtime=150.0, cpu_exec=100.0)
    [f] = launch_bound(evidence(steps_df=st, traces=[_gpu_trace(2.5, n=40, gap_us=5)]))
    assert f.evidence["short_kernel_share"] == 1.0 and f.evidence["host_idle_share"] == pytest.approx(0.625)
    assert "torch.compile" in f.fix
    # long kernels keep the GPU busy: not launch-bound even with host time
    long_st = steps(1, duration_us=40 * 500.0, kernel=40 * 500.0 * 0.9, runtime=40 * 500.0 * 0.05)
    assert launch_bound(evidence(steps_df=long_st, traces=[_gpu_trace(500.0)])) == []


def test_launch_bound_needs_a_gpu_trace():
    with pytest.raises(MissingEvidence):
        launch_bound(evidence(steps_df=steps(runtime=5000)))


def test_low_utilization_names_the_idle_cause_and_gaps():
    tr = _gpu_trace(100.0, n=10, gap_us=400.0)  # 100 µs kernels, 400 µs gaps
    st = steps(1, duration_us=5030.0, kernel=1000.0, cpu_exec=3500.0, other=530.0)
    [f] = low_device_utilization(evidence(steps_df=st, traces=[tr]))
    assert f.evidence["busy_share"] == pytest.approx(1000 / 5030)
    assert f.evidence["gaps_over_100us_per_step"] == 9
    assert "CPU work" in f.explanation
    # Self-explanatory: what was measured, no rule id the user does not see, how the gain is estimated.
    assert "Measured over 1 profiled step (mean 5.03 ms)" in f.explanation
    assert "busy 19.9% of the step, so it sat idle 80.1% (4.03 ms per step)" in f.explanation
    assert "launch_bound" not in f.explanation and "Launch-bound" not in f.explanation  # it did not fire
    assert "80.1% × 0.5 = 40.1% of step time" in f.explanation
    assert f.expected_gain == "up to 40.1% of step time (half of the 80.1% the GPU is idle)"
    assert f.gain_share == pytest.approx((1 - 1000 / 5030) * 0.5)
    busy = steps(1, duration_us=5030.0, kernel=4000.0)
    assert low_device_utilization(evidence(steps_df=busy, traces=[tr])) == []


def test_low_utilization_names_the_launch_finding_only_when_it_fires():
    st = steps(1, duration_us=400.0, kernel=100.0, runtime=150.0, cpu_exec=100.0)
    ev = evidence(steps_df=st, traces=[_gpu_trace(2.5, n=40, gap_us=5)])
    [launch] = launch_bound(ev)
    [f] = low_device_utilization(ev)
    assert f"The finding “{launch.title}” looks at this cause in detail." in f.explanation
    assert "launch_bound" not in f.explanation and "sync_points" not in f.explanation


def test_stragglers_from_steps_and_from_metrics():
    st = pd.concat([steps(4, rank=0, duration_us=10_000), steps(4, rank=1, duration_us=10_200),
                    steps(4, rank=2, duration_us=14_000)])
    [f] = rank_stragglers(evidence(steps_df=st))
    assert f.rank == 2 and f.evidence["ratio"] == pytest.approx(14_000 / 10_100)
    even = pd.concat([steps(4, rank=r, duration_us=10_000 + 100 * r) for r in range(3)])
    assert rank_stragglers(evidence(steps_df=even)) == []
    m = pd.concat([metrics(step_time_s=[0.1] * 5).assign(rank=0), metrics(step_time_s=[0.2] * 5).assign(rank=1)])
    [g] = rank_stragglers(evidence(metrics_df=m))
    assert g.rank == 1
    with pytest.raises(MissingEvidence):
        rank_stragglers(evidence(steps_df=steps(4)))


def test_cpu_threads_far_from_cores():
    cpu = lambda count, threads: ({"type": "cpu", "count": count, "threads": threads},)  # noqa: E731
    [f] = cpu_threads(evidence(devices=cpu(16, 1)))
    assert f.evidence == {"intra_op_threads": 1, "logical_cpus": 16, "threads_per_cpu": 1 / 16}
    [g] = cpu_threads(evidence(devices=cpu(8, 32)))
    assert "oversubscribe" in g.title
    assert cpu_threads(evidence(devices=cpu(16, 8))) == []  # torch's default: physical cores
    assert cpu_threads(evidence(devices=cpu(2, 1))) == []  # too few CPUs to matter
    with pytest.raises(MissingEvidence):  # GPU training: threads do not set the pace
        cpu_threads(evidence(devices=cpu(16, 1) + ({"type": "cuda", "index": 0},)))
    with pytest.raises(MissingEvidence):  # not recorded
        cpu_threads(evidence(devices=({"type": "cpu"},)))


def test_cpu_threads_prefers_the_affinity_in_the_manifest_threads_record():
    import dataclasses

    # The host has 64 CPUs but the container may use 4: 4 threads are right, not "too few".
    ev = dataclasses.replace(evidence(devices=({"type": "cpu", "count": 64, "threads": 4},)),
                             threads={"intra_op": 4, "cpu_count": 64, "affinity_cpus": 4})
    assert cpu_threads(ev) == []
    [f] = cpu_threads(dataclasses.replace(ev, threads={"intra_op": 16, "cpu_count": 64, "affinity_cpus": 4}))
    assert "oversubscribe" in f.title and f.evidence["logical_cpus"] == 4


def test_low_utilization_from_sampled_gpu_util_without_trace():
    from app.analysis.advisor import RunEvidence

    def ev(util):  # noqa: ANN001, ANN202
        system = pd.DataFrame({"time": range(len(util)), "rank": 0, "gpu_util_percent": util})
        return RunEvidence(source="x", has_run=True, system=system)

    [f] = low_device_utilization(ev([0, 0, 30, 35, 20, 40, 30, 25, 0]))
    assert f.evidence["busy_share"] == pytest.approx(0.30) and f.chart == "System › GPU utilisation"
    assert "idle about 70.0%" in f.explanation and "70.0% × 0.5 = 35.0%" in f.explanation
    assert f.expected_gain == "up to 35.0% of step time (half of the 70.0% the GPU is idle)"
    assert low_device_utilization(ev([0, 90, 95, 97, 92, 96, 0])) == []
    with pytest.raises(MissingEvidence):
        low_device_utilization(ev([0, 50, 0]))


def test_data_loading_step_leaves_out_a_profiled_evaluation_step():
    # Step 2 of the profiled window also ran an evaluation (val_loss logged at step 2) and lasts
    # 10x longer: "out of X ms" must describe a training step, not the mean with the evaluation.
    st = steps(dataloader=3000)
    st.loc[st["step"] == 2, ["duration_us", "cpu_exec_us"]] = [100_000.0, 97_000.0]
    m = pd.DataFrame({"step": [0, 1, 2, 3], "rank": 0, "step_time_s": [0.01] * 4,
                      "val_loss": [None, None, 1.5, None]})
    [f] = data_loading_bound(evidence(steps_df=st, metrics_df=m))
    assert f.evidence["step_ms"] == pytest.approx(10.0)
    assert f.evidence["dataloader_share"] == pytest.approx(0.3)
    assert "out of 10.00 ms" in f.explanation


def test_data_loading_step_leaves_out_steps_only_an_anomaly_window_recorded():
    # Steps 2 and 3 were profiled because they were slow (an anomaly window): they are not the
    # typical training step "out of X ms" describes. A step an early window also recorded stays.
    st = steps(dataloader=3000)
    st.loc[st["step"].isin([2, 3]), ["duration_us", "cpu_exec_us"]] = [100_000.0, 97_000.0]
    m = pd.DataFrame({"step": [0, 1, 2, 3], "rank": 0, "step_time_s": [0.01, 0.01, 0.1, 0.1]})
    windows = (ProfiledWindow("early", (0, 1)), ProfiledWindow(ANOMALY, (2, 3), detail="3.1x"))
    [f] = data_loading_bound(replace(evidence(steps_df=st, metrics_df=m), windows=windows))
    assert f.evidence["step_ms"] == pytest.approx(10.0)
    without = data_loading_bound(evidence(steps_df=st, metrics_df=m))
    assert without and without[0].evidence["step_ms"] > 10.0  # the test can fail: slow steps counted
