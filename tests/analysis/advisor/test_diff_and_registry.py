"""diff_findings (resolved / remaining / new / unverified), the registry, ordering and the docs."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.analysis.advisor import (
    Advice,
    Finding,
    MissingEvidence,
    Severity,
    advise,
    diff_advice,
    diff_findings,
    get_rule,
    order_findings,
    registered_rules,
    rule,
)
from app.analysis.advisor import registry as registry_mod
from tests.analysis.advisor.factory import evidence, steps

DOCS = Path(__file__).resolve().parents[3] / "docs" / "advisor.md"


def _f(rule_id: str, gain: float = 0.1, severity: Severity = Severity.MEDIUM, subject: str = "", **ev: float) -> Finding:
    return Finding(rule=rule_id, family="test", severity=severity, title=rule_id, explanation="", evidence=ev,
                   fix_summary="", fix="", expected_gain="", gain_share=gain, doc_url="https://pytorch.org",
                   chart="", subject=subject)


def test_diff_resolved_remaining_new():
    base = [_f("data_loading_bound", share=0.3), _f("eval_without_no_grad"), _f("rank_stragglers", subject="rank2")]
    cand = [_f("data_loading_bound", share=0.1), _f("mixed_precision"), _f("rank_stragglers", subject="rank5")]
    d = diff_findings(base, cand)
    assert [f.rule for f in d.resolved] == ["eval_without_no_grad", "rank_stragglers"]
    assert [r.candidate.rule for r in d.remaining] == ["data_loading_bound"]
    assert d.remaining[0].evidence_delta == {"share": pytest.approx(-0.2)}
    assert sorted(f.key for f in d.new) == ["mixed_precision", "rank_stragglers:rank5"]
    assert set(d.to_json()) == {"resolved", "remaining", "new", "unverified", "worse"}


def test_diff_does_not_call_unchecked_rules_resolved():
    base = [_f("mixed_precision"), _f("data_loading_bound")]
    d = diff_findings(base, [], checked=["data_loading_bound"])
    assert [f.rule for f in d.resolved] == ["data_loading_bound"]
    assert [f.rule for f in d.unverified] == ["mixed_precision"]
    adv = lambda fs, checked: Advice(source="x", findings=tuple(fs), checked=tuple(checked), skipped={})  # noqa: E731
    d2 = diff_advice(adv(base, ["mixed_precision", "data_loading_bound"]), adv([], ["data_loading_bound"]))
    assert [f.rule for f in d2.unverified] == ["mixed_precision"]


def test_order_by_expected_gain_then_severity():
    fs = [_f("a", 0.1, Severity.LOW), _f("b", 0.3), _f("c", 0.1, Severity.HIGH)]
    assert [f.rule for f in order_findings(fs)] == ["b", "c", "a"]


def test_registry_ids_unique_and_documented():
    rules = registered_rules()
    ids = [r.id for r in rules]
    assert len(ids) == len(set(ids)) >= 14
    doc = DOCS.read_text(encoding="utf-8")
    for r in rules:
        assert re.search(rf"`{r.id}`", doc), f"{r.id} is not documented in docs/advisor.md"
    with pytest.raises(KeyError, match="unknown advisor rule"):
        get_rule("nope")


def test_advise_reports_missing_evidence_and_rule_errors(monkeypatch):
    monkeypatch.setattr(registry_mod, "_RULES", dict(registry_mod._RULES))

    @rule("test_broken", family="test", title="raises")
    def broken(ev):  # noqa: ANN001, ANN202
        raise ZeroDivisionError("boom")

    @rule("test_missing", family="test", title="needs something")
    def missing(ev):  # noqa: ANN001, ANN202
        raise MissingEvidence("needs X")

    advice = advise(evidence(steps_df=steps(dataloader=5000)), rules=["test_broken", "test_missing", "data_loading_bound"])
    assert advice.errors == {"test_broken": "ZeroDivisionError: boom"}
    assert advice.skipped == {"test_missing": "needs X"}
    assert advice.checked == ("data_loading_bound",)
    assert [f.rule for f in advice.findings] == ["data_loading_bound"]
    with pytest.raises(ValueError, match="registered twice"):
        rule("test_broken", family="test", title="again")(lambda ev: [])
