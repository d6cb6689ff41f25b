"""`torchscope report`: Markdown for PR comments and a self-contained HTML page, escaped."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.cli import main
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout

HOSTILE = '<script>alert("x")</script>|**bold**'


def _run(root: Path, name: str, t: float) -> Path:
    run_dir, _ = rf.create_run(root, name, config={"note": HOSTILE, "lr": t})
    with rf.JsonlWriter(run_dir / layout.METRICS) as w:
        for i in range(30):
            w.write({"step": i, "time": float(i), "rank": 0, "step_time_s": t * (1 + 0.01 * (i % 3)), "loss": 1.0})
    return run_dir


@pytest.fixture()
def store(tmp_path: Path) -> Path:
    _run(tmp_path, "base", 0.1)
    _run(tmp_path, HOSTILE, 0.08)
    return tmp_path


def test_markdown_on_stdout_is_escaped(store: Path, capsys) -> None:
    assert main(["report", "base", "<script>", "--root", str(store)]) == 0
    md = capsys.readouterr().out
    assert md.startswith("### Torchscope:")
    assert "<script>" not in md and "&lt;script&gt;" in md
    assert "| ✅ step time (headline) |" in md
    for line in md.splitlines():  # every table row keeps its column count
        if line.startswith("| ✅ step time"):
            assert len(re.findall(r"(?<!\\)\|", line)) == 6


def test_html_is_self_contained_and_escaped(store: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "cmp.html"
    assert main(["report", "base", "<script>", "--root", str(store), "-o", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"<script[^>]*\bsrc=", page)  # nothing loaded from the network
    assert "plotly.js v" in page or "plotly.js" in page
    assert page.count("<script") >= 2  # plotly.js inline + the figures
    assert '<script>alert("x")</script>' not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert len(page) > 3_000_000  # plotly.js itself is inlined (~3.5 MB)


def test_markdown_file_and_bad_extension(store: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "c.md"
    assert main(["report", "base", "<script>", "--root", str(store), "-o", str(out)]) == 0
    assert "### Torchscope" in out.read_text(encoding="utf-8")
    assert main(["report", "base", "<script>", "--root", str(store), "-o", str(tmp_path / "c.pdf")]) == 2
    assert ".pdf" in capsys.readouterr().err
