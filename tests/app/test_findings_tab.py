"""The Run page's Findings tab with AppTest: findings on a real GPU trace, a clean run, agent runs."""
from __future__ import annotations

from tests.app.helpers import assert_clean, open_app, show_tab, texts


def _tab(at, title):  # noqa: ANN001, ANN202
    return show_tab(at, title)  # only the open tab is built


def test_gpu_trace_findings_ordered_with_evidence_and_fix(monkeypatch, imported_store):
    root, runs = imported_store
    at = open_app(monkeypatch, root, run=runs["gpu-control"].name)
    assert_clean(at)
    tab = _tab(at, "Findings")
    labels = [e.label for e in tab.expander]
    assert any("fp32 matmuls" in label for label in labels), labels
    assert any("Host↔device copies" in label for label in labels), labels
    # evidence numbers, the fix snippet and the chart name are shown
    assert any("autocast" in c.value for c in tab.code)
    assert "Where to see it" in texts(tab.markdown)
    assert any(m.label == "Findings" and int(m.value) >= 2 for m in tab.metric)


def test_clean_run_says_so(monkeypatch, fixture_store):
    root, runs = fixture_store
    at = open_app(monkeypatch, root, run=runs["baseline"].name)
    assert_clean(at)
    tab = _tab(at, "Findings")
    assert "No problems found" in texts(tab.success)
    assert not [e for e in tab.expander if e.label.startswith(("High:", "Medium:", "Low:"))]


def test_agent_baseline_shows_data_loading_finding(monkeypatch, sample_store):
    at = open_app(monkeypatch, sample_store, run="baseline")
    assert_clean(at)
    tab = _tab(at, "Findings")
    labels = [e.label for e in tab.expander]
    assert any("Data loading takes" in label for label in labels), labels
    assert any("num_workers" in c.value for c in tab.code)
    # each finding says what it rests on: how many profiled steps, in how many windows
    assert any("**Rests on:** from" in m.value and "profiled step" in m.value for m in tab.markdown)


def test_nan_loss_and_unreadable_trace(monkeypatch, tmp_path):
    from profiler_agent import runformat as rf
    from profiler_agent.runformat import layout

    root = tmp_path / "runs"
    run_dir, _ = rf.create_run(root, "nan-run", config={"lr": 1.0})
    with rf.JsonlWriter(run_dir / layout.METRICS) as w:
        for step in range(10):
            w.write({"step": step, "rank": 0, "loss": 2.0 - 0.1 * step if step < 6 else float("nan"), "lr": 1.0})
    (run_dir / layout.TRACES_DIR).mkdir(exist_ok=True)
    (run_dir / layout.TRACES_DIR / "host_1.1700000000000000000.pt.trace.json").write_text("{not json")
    rf.update_manifest(run_dir, status=rf.RunStatus.FINISHED)
    at = open_app(monkeypatch, root, run="nan-run")
    assert not at.exception
    tab = _tab(at, "Findings")
    assert any("Loss became NaN at step 6" in e.label for e in tab.expander)
    assert "traces not used" in texts(tab.warning)


def test_evidence_numbers_carry_their_units():
    from app.ui.tabs.findings import _fmt

    assert _fmt(70.666, "copy_mb_per_step") == "70.67 MB"
    assert _fmt(0.3412, "optimizer_ratio") == "0.34×"
    assert _fmt(0.109, "copy_share") == "10.9%"
    assert _fmt(8.46, "copy_ms_per_step") == "8.46 ms"
    assert _fmt(25.0, "htod_per_step") == "25"
    assert _fmt(1500.0, "comm_us") == "1.50 ms" and _fmt(12.0, "median_kernel_us") == "12.0 µs"
    # seconds and MiB read as such (they printed as "0.0123" and "0.3155" under "Idle median s", "Param mib")
    assert _fmt(0.0123, "idle_median_s") == "12.30 ms" and _fmt(1.5, "step_time_s") == "1.500 s"
    assert _fmt(0.3155, "param_mib") == "0.32 MiB" and _fmt(31.25, "activation_mib_per_step") == "31.25 MiB"


def test_evidence_labels_read_as_words():
    from app.ui.tabs.findings import evidence_label

    assert evidence_label("dataloader_ms_per_step") == "DataLoader time per step"
    assert evidence_label("step_ms") == "Step time"
    assert evidence_label("largest_gap_ms") == "Largest gap"
    assert evidence_label("peak_allocated_gib") == "Peak allocated"
    assert evidence_label("pageable_htod_per_step") == "Pageable host→device per step"
    assert evidence_label("unused_share") == "Unused share"
    assert evidence_label("num_workers") == "num_workers"  # a setting keeps the name the user types
    assert evidence_label("param_mib") == "Parameters" and evidence_label("step_growth_mib") == "Step growth"
    assert evidence_label("idle_median_s") == "Idle median" and evidence_label("step_time_s") == "Step time"
    assert evidence_label("latency_median_s") == "Latency median"
