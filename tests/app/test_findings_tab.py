"""The Run page's Findings tab with AppTest: findings on a real GPU trace, a clean run, agent runs."""
from __future__ import annotations

from tests.app.helpers import assert_clean, open_app, texts


def _tab(at, title):  # noqa: ANN001, ANN202
    return next(t for t in at.tabs if t.label == title)


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
    assert not [e for e in tab.expander if e.label.startswith(("🔴", "🟠", "🟡"))]


def test_agent_baseline_shows_data_loading_finding(monkeypatch, sample_store):
    at = open_app(monkeypatch, sample_store, run="baseline")
    assert_clean(at)
    tab = _tab(at, "Findings")
    labels = [e.label for e in tab.expander]
    assert any("Data loading takes" in label for label in labels), labels
    assert any("num_workers" in c.value for c in tab.code)
