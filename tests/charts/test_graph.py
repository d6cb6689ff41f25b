"""Tests of app.charts.graph: the highlighted union of two module trees (DOT), the backward graph's
SVG as a zoomable image and the module icicle (Vega-Lite)."""
from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess

import pandas as pd
import pytest
from torch import nn

from app.analysis.model.graph_diff import diff_module_trees
from app.analysis.model.tree import ROOT_LABEL, compute_module_partition
from app.charts.graph import MODULE_DIFF_STYLES, make_module_diff_dot, module_icicle_chart, svg_graph_chart
from profiler_agent.graph import describe_module_tree


def _union(a: nn.Module, b: nn.Module):
    return diff_module_trees(describe_module_tree(a), describe_module_tree(b), include_same=True)


def _nodes(dot: str) -> dict[str, str]:
    return dict(re.findall(r'^\s*(m\d+) \[label="([^"]*)"', dot, re.MULTILINE))


def test_small_tree_drawn_whole_with_colours() -> None:
    a = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Sequential(nn.Linear(8, 2), nn.Dropout()))
    b = nn.Sequential(nn.Conv2d(3, 8, 1), nn.GELU(), nn.Sequential(nn.Linear(8, 2)), nn.Linear(2, 2))
    dot, hidden = make_module_diff_dot(_union(a, b))
    assert hidden == 0
    labels = list(_nodes(dot).values())
    assert len(labels) == 7  # (model), 0, 1, 2, 2.0, 2.1 (removed), 3 (added)
    assert any("ReLU → GELU" in lab for lab in labels)
    line = next(ln for ln in dot.splitlines() if "Dropout" in ln)
    assert MODULE_DIFF_STYLES["removed"][0] in line and "dashed" in line
    line = next(ln for ln in dot.splitlines() if 'label="3\\nLinear' in ln)
    assert MODULE_DIFF_STYLES["added"][0] in line and "params +6" in line
    assert dot.count("->") == 6  # a tree: one edge per non-root module


def test_big_tree_draws_changed_modules_and_ancestors_only() -> None:
    blocks = [nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(100)]
    changed = [nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(100)]
    changed[57] = nn.Sequential(nn.Linear(4, 4), nn.GELU())
    dot, hidden = make_module_diff_dot(_union(nn.Sequential(*blocks), nn.Sequential(*changed)), max_nodes=50)
    labels = _nodes(dot)
    assert len(labels) == 3  # (model) → 57 → 57.1 (ReLU → GELU)
    assert hidden == 301 - 3
    assert re.search(r'label="\d+ unchanged"', dot)
    assert any("ReLU → GELU" in v for v in labels.values())


def test_cap_on_changed_modules_is_reported() -> None:
    a = nn.Sequential(*[nn.Linear(4, 4) for _ in range(30)])
    b = nn.Sequential(*[nn.Linear(4, 5) for _ in range(30)])
    dot, hidden = make_module_diff_dot(_union(a, b), max_nodes=10)
    assert len(_nodes(dot)) == 10
    assert hidden == 21 and "(21 changed, not drawn)" in dot


def test_empty_and_hostile_names() -> None:
    assert make_module_diff_dot(diff_module_trees(None, None, include_same=True)) == ("digraph modules {}", 0)

    class Odd(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.add_module('we"ird\\name', nn.Linear(2, 2))

    dot, _ = make_module_diff_dot(_union(Odd(), nn.Sequential()))
    if shutil.which("dot") is None:
        pytest.skip("graphviz not installed")
    done = subprocess.run(["dot", "-Tsvg"], input=dot.encode(), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()


# -- the backward graph's SVG and the module icicle (Vega-Lite) --------------------------------

HOSTILE_SVG = ('<svg xmlns="http://www.w3.org/2000/svg" width="300pt" height="900pt" onload="window.__pwned=6">'
               '<script>window.__pwned=7</script><image href="x" onerror="window.__pwned=8"/>'
               '<text x="10" y="20">AddmmBackward0</text></svg>')


def _valid_vega_lite(spec: dict) -> None:
    """The spec is valid Vega-Lite 6 (the schema altair ships, which Streamlit depends on)."""
    schema = pytest.importorskip("altair.vegalite.v6.schema.core").load_schema()
    jsonschema = pytest.importorskip("jsonschema")
    errors = [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(spec)]
    assert not errors, errors[:3]


def test_svg_graph_is_a_data_uri_image_on_scales_bound_for_zoom() -> None:
    spec = svg_graph_chart(HOSTILE_SVG, 300.0, 900.0, height_px=1400)
    _valid_vega_lite(spec)
    mark = spec["mark"]
    assert mark["type"] == "image" and mark["aspect"] is True and mark["clip"] is True and mark["tooltip"] is None
    prefix = "data:image/svg+xml;base64,"
    assert mark["url"].startswith(prefix)
    assert base64.b64decode(mark["url"].removeprefix(prefix)).decode() == HOSTILE_SVG  # the file, unchanged
    enc = spec["encoding"]
    assert enc["x"]["scale"]["domain"] == [0.0, 300.0] and enc["y"]["scale"]["domain"] == [0.0, 900.0]
    assert enc["y"]["scale"]["reverse"] is True  # the SVG's top at the top
    assert (enc["x2"]["field"], enc["y2"]["field"]) == ("x2", "y2")
    assert spec["data"]["values"] == [{"x": 0.0, "x2": 300.0, "y": 0.0, "y2": 900.0}]
    (zoom,) = spec["params"]
    assert zoom["bind"] == "scales" and zoom["select"] == {"type": "interval", "encodings": ["x", "y"]}
    assert spec["height"] == 1400


def test_hostile_svg_is_only_ever_a_data_uri_never_markup() -> None:
    spec = svg_graph_chart(HOSTILE_SVG, 300.0, 900.0)
    text = json.dumps(spec)
    # no piece of the SVG's markup anywhere in the spec: only its base64 inside the image's URL
    for piece in ("<svg", "<script", "onload", "onerror", "__pwned", "AddmmBackward0"):
        assert piece not in text, piece
    urls = [v for v in _strings(spec) if "base64," in v]
    assert urls == [spec["mark"]["url"]] and urls[0].startswith("data:image/svg+xml;base64,")
    assert not {"html", "href"} & set(_keys(spec))  # no channel that would put it into the page as a link


def _strings(obj: object) -> list[str]:
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return [obj] if isinstance(obj, str) else []


def _keys(obj: object) -> list[str]:
    if isinstance(obj, dict):
        return [*obj, *(k for v in obj.values() for k in _keys(v))]
    if isinstance(obj, list):
        return [k for v in obj for k in _keys(v)]
    return []


def _modules(params: list[int], flops: list[int] | None = None) -> pd.DataFrame:
    """(model) → enc (→ enc.conv, enc.act), head, drop: a hand-made module table."""
    return pd.DataFrame({"path": [ROOT_LABEL, "enc", "enc.conv", "enc.act", "head", "drop"],
                         "parent": ["", ROOT_LABEL, "enc", "enc", ROOT_LABEL, ROOT_LABEL],
                         "depth": [0, 1, 2, 2, 1, 1], "type": ["Net", "Encoder", "Conv2d", "ReLU", "Linear", "Dropout"],
                         "params": params, "flops": flops or [0] * 6})


def test_icicle_cells_in_proportion_to_each_parents_parameters() -> None:
    spec = module_icicle_chart(compute_module_partition(_modules([1000, 750, 500, 0, 250, 0])))
    _valid_vega_lite(spec)
    rows = {r["path"]: r for r in spec["data"]["values"]}
    assert set(rows) == {ROOT_LABEL, "enc", "enc.conv", "head"}  # no cell for a module of 0 parameters
    width = {p: r["x1"] - r["x0"] for p, r in rows.items()}
    assert width[ROOT_LABEL] == pytest.approx(1.0)
    assert width["enc"] == pytest.approx(0.75) and width["head"] == pytest.approx(0.25)
    assert rows["head"]["x0"] == pytest.approx(rows["enc"]["x1"])  # side by side, in tree order
    assert width["enc.conv"] == pytest.approx(0.5)  # enc's own 250 leave the rest of its span empty
    assert [rows[p]["depth"] for p in (ROOT_LABEL, "enc", "enc.conv")] == [0, 1, 2]
    assert rows["enc.conv"]["name"] == "conv" and rows[ROOT_LABEL]["name"] == ROOT_LABEL
    assert rows["enc.conv"]["share"] == pytest.approx(0.5)
    rect, text = spec["layer"]
    assert rect["mark"]["type"] == "rect" and rect["encoding"]["x2"]["field"] == "x1"
    assert rect["encoding"]["x"]["field"] == "x0" and spec["encoding"]["y"]["field"] == "depth"
    tips = {t["field"]: t for t in spec["encoding"]["tooltip"]}  # the cells' and their labels'

    assert list(tips) == ["path", "type", "params", "flops", "share"]
    assert tips["params"]["format"] == "," and tips["share"]["format"] == ".1%"
    assert tips["share"]["title"] == "share of the model's parameters"
    (zoom,) = rect["params"]
    assert zoom["bind"] == "scales" and zoom["select"]["encodings"] == ["x"]
    assert text["mark"]["type"] == "text" and text["encoding"]["text"]["condition"]["field"] == "name"
    # a branch and all below it share a colour; the model's own cell is grey
    colour = dict(zip(*(rect["encoding"]["color"]["scale"][k] for k in ("domain", "range"))))
    assert rows["enc.conv"]["branch"] == rows["enc"]["branch"] == "enc"
    assert colour[ROOT_LABEL] == "#d9d9d9" and len({colour["enc"], colour["head"], colour[ROOT_LABEL]}) == 3


def test_icicle_by_flops_and_of_nothing() -> None:
    spec = module_icicle_chart(compute_module_partition(_modules([10] * 6, [900, 600, 600, 0, 300, 0]),
                                                        value="flops"), value="flops")
    rows = {r["path"]: r for r in spec["data"]["values"]}
    assert rows["enc"]["x1"] - rows["enc"]["x0"] == pytest.approx(600 / 900)
    assert rows["enc"]["params"] == 10 and rows["enc"]["flops"] == 600  # both in the tooltip
    assert spec["encoding"]["tooltip"][-1]["title"] == "share of the model's FLOPs"
    empty = module_icicle_chart(compute_module_partition(_modules([0] * 6)))
    assert empty["data"]["values"] == []
    _valid_vega_lite(empty)
    with pytest.raises(ValueError, match="'params' or 'flops'"):
        module_icicle_chart(compute_module_partition(_modules([0] * 6)), value="bytes")
