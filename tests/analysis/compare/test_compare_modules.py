"""Compare by module: operators of two recorded traces matched by (name, module), in the analysis,
`torchscope diff --by module` and with the default JSON contract unchanged."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.analysis.compare.tables import OpGrouping, diff_ops
from app.cli import main
from app.workspace.sides import load_side
from tests.module_scopes import record_module_trace

pytest.importorskip("torch")


pytestmark = pytest.mark.usefixtures("module_trace_cache")  # one trace cache per module (conftest)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("pair")
    base, cand = folder / "base.pt.trace.json", folder / "wide.pt.trace.json"
    record_module_trace(base, width=32)
    record_module_trace(cand, width=512)  # the same model, wider hidden layer
    return base, cand


def test_ops_matched_by_name_and_module(pair: tuple[Path, Path]) -> None:
    a, b = (load_side(p) for p in pair)
    by_module = diff_ops(a.analysis, b.analysis, grouping=OpGrouping.MODULE, baseline_traces=a.traces,
                         candidate_traces=b.traces)
    by_name = diff_ops(a.analysis, b.analysis).set_index("name")
    assert "module" in by_module.columns and not by_module.duplicated(["name", "module"]).any()
    rows = set(zip(by_module["module"], by_module["name"]))
    assert {("0.0", "aten::addmm"), ("1", "aten::addmm"), ("0.0", "AddmmBackward0"), ("0.1", "aten::relu")} <= rows
    assert (by_module["change"] == "both").all()  # same model structure on both sides
    # Splitting by module never changes a per-name sum (both are per profiled step).
    sums = by_module.groupby("name")[["baseline_self_us", "candidate_self_us", "delta_us", "baseline_calls"]].sum()
    common = sums.index.intersection(by_name.index)
    assert len(common) >= 20
    for col in ("baseline_self_us", "candidate_self_us", "delta_us", "baseline_calls"):
        np.testing.assert_allclose(sums.loc[common, col], by_name.loc[common, col], atol=1e-6, err_msg=col)
    addmm = by_module[by_module["name"] == "aten::addmm"].set_index("module")
    assert addmm.loc["0.0", "baseline_calls"] == pytest.approx(1.0)  # one forward call per step


def test_diff_cli_by_module_and_default_contract(pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    base, cand = (str(p) for p in pair)
    assert main(["diff", base, cand, "--by", "module", "--json", "--no-advice"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ops"] and all("module" in o for o in doc["ops"])
    assert {"name", "baseline_self_us", "candidate_self_us", "delta_us"} <= set(doc["ops"][0])
    assert any(o["module"] == "0.0" and o["name"] == "aten::addmm" for o in doc["ops"])
    assert main(["diff", base, cand, "--json", "--no-advice"]) == 0
    default = json.loads(capsys.readouterr().out)
    assert default["ops"] and not any("module" in o for o in default["ops"])
    assert {"name", "baseline_self_us", "candidate_self_us", "delta_us"} <= set(default["ops"][0])
    assert not any(o["name"].startswith("nn.Module: ") for o in default["ops"] + doc["ops"])


def test_diff_text_names_ops_by_module(pair: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    base, cand = (str(p) for p in pair)
    assert main(["diff", base, cand, "--by", "module", "--no-advice", "--top", "1000"]) == 0  # every row: the order is timing
    out = capsys.readouterr().out
    assert "0.0 · aten::addmm" in out and "1 · AddmmBackward0" in out
