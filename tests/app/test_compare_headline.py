"""The Compare page's headline (quantity judged, ratio, CI, verdict, method, replicates, reasons, step
sets, sign note) and replicate groups as sides, with AppTest on hand-made runs."""
from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from app.analysis.compare.headline import Headline, HeadlineQuantity, HeadlineVerdict
from app.analysis.compare.step_sets import StepSet
from app.ui import compare_cache
from app.ui.compare_headline import headline_sentence, step_set_lines
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout
from tests.app.helpers import APP, assert_clean, show_tab
from tests.app.helpers import texts as _texts
from tests.conftest import write_run

PAGE = "app_pages/compare.py"


def texts(elements) -> str:  # noqa: ANN001
    """The elements' text as people read it (Markdown escapes of user text removed)."""
    return _texts(elements).replace("\\", "")


def open_compare(monkeypatch: pytest.MonkeyPatch, root, runs: str | None = None) -> AppTest:  # noqa: ANN001
    monkeypatch.setenv(layout.ROOT_ENV, str(root))
    st.cache_resource.clear()
    at = AppTest.from_file(APP, default_timeout=180)
    if runs is not None:
        at.query_params["runs"] = runs
    at.switch_page(PAGE)
    return at.run()


def _set_group(run_dir, group: str) -> None:  # noqa: ANN001
    """The manifest's ``group`` as the agent writes it (a top-level field, read into Manifest.extra)."""
    path = run_dir / layout.MANIFEST
    doc = json.loads(path.read_text())
    doc["group"] = group
    path.write_text(json.dumps(doc))


@pytest.fixture
def group_store(tmp_path):  # noqa: ANN001, ANN201
    root = tmp_path / "runs"
    runs = {}
    for i in range(2):
        runs[f"a{i}"] = write_run(root, f"a{i}", step_time_s=0.05)
        _set_group(runs[f"a{i}"], "base")
        runs[f"b{i}"] = write_run(root, f"b{i}", step_time_s=0.03)
        _set_group(runs[f"b{i}"], "fast")
    runs["lone"] = write_run(root, "lone")
    return root, runs


def test_headline_names_quantity_verdict_replicates_and_step_sets(monkeypatch, fixture_store) -> None:
    root, runs = fixture_store
    at = open_compare(monkeypatch, root, f"{runs['baseline'].name},{runs['optimized'].name}")
    assert_clean(at)
    box = texts(at.success)
    assert box.startswith("Step time: optimized is") and "faster than baseline" in box and "95 % CI" in box
    tiles = {m.label: m.value for m in at.metric}
    assert tiles["Judged by"] == "step time"
    assert tiles["Verdict"] == "faster"
    assert tiles["Replicates"] == "1 vs 1 runs"
    assert float(tiles["Ratio (candidate / baseline)"]) == pytest.approx(0.6, abs=0.05)
    captions = texts(at.caption)
    assert "Method:" in captions
    assert "Headline: steady-state steps" in captions  # the headline's step set is named
    assert "run-to-run noise" in texts(at.markdown)  # one run per side: the reason says what is not covered


class _WithHeadline:
    """A Comparison with the contract's headline, step sets and sign note (as the compare stream adds them)."""

    def __init__(self, cmp, headline, step_sets, sign_note) -> None:  # noqa: ANN001
        self._cmp, self.headline, self.step_sets, self.sign_note = cmp, headline, step_sets, sign_note

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self._cmp, name)


def test_contract_headline_drives_the_page_and_inconclusive_is_amber(monkeypatch, fixture_store) -> None:
    root, runs = fixture_store
    real = compare_cache.diff_sides
    headline = SimpleNamespace(quantity="time_per_sample", baseline=0.002, candidate=0.0019, ratio=0.95,
                               ci95=(0.80, 1.10), verdict="inconclusive", method="hierarchical bootstrap",
                               replicates={"baseline": 3, "candidate": 3},
                               reasons=["contention differs: 40 % vs 2 % of the CPU used by other processes"],
                               quantity_words="time per sample", to_json=dict)
    step_sets = {"headline": StepSet("headline", "steady-state steps", 36, 36),
                 "deltas": StepSet("deltas", "typical profiled steps", 2, 3)}
    note = "The waterfall grows while the headline shrinks: the profiled steps are not typical."
    monkeypatch.setattr(compare_cache, "diff_sides",
                        lambda a, b, o, **kw: _WithHeadline(real(a, b, o, **kw), headline, step_sets, note))
    at = open_compare(monkeypatch, root, f"{runs['baseline'].name},{runs['optimized'].name}")
    assert_clean(at)
    assert "faster" not in texts(at.success)  # the step-time verdict (faster) no longer colours the page
    warned = texts(at.warning)
    assert "Time per sample: optimized vs baseline: inconclusive" in warned
    tiles = {m.label: m.value for m in at.metric}
    assert tiles["Judged by"] == "time per sample" and tiles["Verdict"] == "inconclusive"
    step_tile = next(m for m in at.metric if m.label == "Step time (median, steady state)")
    assert step_tile.proto.color == 2  # GRAY: no green "faster" under an inconclusive headline
    assert tiles["Replicates"] == "3 vs 3 runs"
    assert "Method: hierarchical bootstrap" in texts(at.caption)
    assert "contention differs" in texts(at.markdown)
    assert "Headline: steady-state steps; 36 (baseline) / 36 (candidate) steps" in texts(at.caption)
    assert "Waterfall, operator and kernel deltas: typical profiled steps; 2 (baseline) / 3 (candidate) steps" \
        in texts(at.caption)
    assert "not typical" in texts(at.info)


def test_groups_are_sides(monkeypatch, group_store) -> None:
    root, runs = group_store
    at = open_compare(monkeypatch, root, "group:base,group:fast")
    assert_clean(at)
    assert at.selectbox(key="compare_baseline").value == "group:base"
    assert at.multiselect(key="compare_candidates").value == ["group:fast"]
    assert "group:base" in at.selectbox(key="compare_baseline").options[0] or \
        at.selectbox(key="compare_baseline").options[0].startswith("group base")
    shown = texts(at.success)
    assert "Step time: group fast is" in shown
    # the Curves tab can band the runs by replicate group
    show_tab(at, "Curves", key="compare_tab")
    assert "(replicate group)" in at.selectbox(key="compare_group_by").options
    at.selectbox(key="compare_group_by").set_value("(replicate group)").run()
    assert not at.exception
    # picking a single run as the candidate still works next to a group baseline
    at.multiselect(key="compare_candidates").set_value([runs["lone"].name]).run()
    assert_clean(at)
    assert "lone" in texts(at.info) + texts(at.success) + texts(at.error) + texts(at.warning)
    assert str(at.query_params["runs"]).startswith("group:base")
    at.selectbox(key="compare_baseline").set_value("group:fast").run()
    assert not at.exception
    assert "lone is 1.67× slower than group fast" in texts(at.error)  # the verdict box of "slower"


def test_group_side_comes_from_the_workspace_load_group_side(monkeypatch, group_store) -> None:
    from app.ui import compare_cache
    from app.workspace import sides as compare_inputs

    root, _ = group_store
    calls = []

    def load_group_side(name, store):  # noqa: ANN001, ANN202
        calls.append((name, str(store)))
        members = [p for p in sorted(root.iterdir())  # not the store's own .torchscope (catalog index)
                   if not p.name.startswith(".") and rf.read_manifest(p).extra.get("group") == name]
        side = compare_inputs.load_side(members[-1], with_traces=False)
        return dataclasses.replace(side, label=f"{name} ×{len(members)}")

    monkeypatch.setattr(compare_cache, "load_group_side", load_group_side)
    at = open_compare(monkeypatch, root, "group:base,group:fast")
    assert_clean(at)
    assert ("base", str(root)) in calls and ("fast", str(root)) in calls
    assert "group fast ×2 is" in texts(at.success)


def test_headline_sentence_names_the_quantity_and_the_missing_interval() -> None:
    h = Headline(quantity=HeadlineQuantity.TIME_PER_TOKEN, baseline=1e-4, candidate=2e-4, ratio=2.0, ci95=None,
                 verdict=HeadlineVerdict.SLOWER, method="m", replicates={"baseline": 2, "candidate": 4})
    text = headline_sentence(h, "a", "b")
    assert text.startswith("Time per token: b is 2.00× slower than a") and "µs/token" in text
    assert "no confidence interval" in text


def test_step_sets_of_the_compare_analysis_are_described() -> None:
    cmp = SimpleNamespace(step_sets={"headline": StepSet("headline", "steady-state steps", 30, 28),
                                     "deltas": StepSet("deltas", "typical profiled steps", 2, 3)})
    assert step_set_lines(cmp) == [  # type: ignore[arg-type]
        ("Headline", "steady-state steps; 30 (baseline) / 28 (candidate) steps"),
        ("Waterfall, operator and kernel deltas", "typical profiled steps; 2 (baseline) / 3 (candidate) steps")]


def test_many_candidates_get_one_headline_line_each(monkeypatch, fixture_store) -> None:
    root, runs = fixture_store
    at = open_compare(monkeypatch, root, ",".join(runs[n].name for n in ("baseline", "optimized", "ddp", "failed")))
    assert not at.exception
    boxes = [e.value for kind in ("success", "error", "info", "warning") for e in getattr(at, kind)
             if str(e.value).startswith(("Step time:", "Time per sample:", "Time per token:"))]
    assert len(boxes) == 3
    assert "Judged by" not in {m.label for m in at.metric}  # the details are in the verdict table
