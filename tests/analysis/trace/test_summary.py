"""analyze_traces bundles steps, ops, kernels and memory; to_json is the CLI document."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.analysis.trace.summary import analyze_traces
from app.data.trace import load_traces
from app.presentation.analyze_json import JSON_STEP_KEYS, analysis_to_json

TINY = Path(__file__).resolve().parents[2] / "data" / "traces" / "cpu_torch213" / "tiny_mlp.pt.trace.json.gz"


pytestmark = pytest.mark.usefixtures("module_trace_cache")  # one trace cache per module (conftest)


def test_to_json_document() -> None:
    a = analyze_traces(load_traces(TINY))
    doc = json.loads(json.dumps(analysis_to_json(a)))
    assert set(doc) == {"traces", "steps", "ops", "kernels", "memory", "ranks", "rank_summary"}
    assert doc["ranks"] == []  # one rank
    assert [r["rank"] for r in doc["rank_summary"]] == [0] and doc["rank_summary"][0]["straggler_score"] is None
    assert doc["traces"][0]["rank"] == 0 and doc["traces"][0]["events"] > 1000
    assert [list(s) for s in doc["steps"]] == [JSON_STEP_KEYS] * 3
    assert doc["kernels"] == []  # CPU only
    assert doc["memory"]["cpu"]["peak_allocated_bytes"] > 0
    selfs = [o["self_us"] for o in doc["ops"]]
    assert selfs == sorted(selfs, reverse=True)
    assert set(a.breakdown["view"]) == {"device", "loop"}
