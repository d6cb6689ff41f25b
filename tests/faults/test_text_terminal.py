"""Text output under hostile names: control characters, ANSI escapes, bidi overrides and very long
names cannot forge or stretch lines of `ls`, `diff`, `analyze` or the reports; JSON keeps the
exact value. Also `report -o` into a path that cannot be written, and a trace whose durations are
all negative on the Timeline."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from app.analysis.trace.timeline import compute_step_windows
from app.cli import main
from app.presentation.terminal import MAX_CELL_CHARS, terminal_lines, terminal_text
from app.presentation.text_table import text_table
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout
from tests.conftest import write_run

FORGED = "evil\nFAKE                ✓ finished  2099-01-01 00:00:00"
HOSTILE_NAMES = {
    "newline": FORGED,
    "carriage return": "evil\rFAKE ✓ finished",
    "ansi": "\x1b[2J\x1b[31mred\x1b[0m",
    "tab": "a\tb",
    "rtl override": "abc\u202edcba",
    "line separator": "a\u2028b",
    "long": "x" * 10_000,
}
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


@pytest.mark.fault("terminal control characters")
@pytest.mark.parametrize("kind", list(HOSTILE_NAMES))
def test_terminal_text_is_one_visible_line(kind: str) -> None:
    shown = terminal_text(HOSTILE_NAMES[kind], MAX_CELL_CHARS)
    assert "\n" not in shown and "\t" not in shown and not UNSAFE.search(shown)
    assert len(shown) <= MAX_CELL_CHARS
    assert terminal_text(shown) == shown  # idempotent: safe text is left alone


@pytest.mark.fault("terminal control characters")
def test_escapes_are_visible_and_long_text_ends_with_an_ellipsis() -> None:
    assert terminal_text("a\nb\tc\x1b[0m\u202e") == "a\\nb\\tc\\x1b[0m\\u202e"
    assert terminal_text("x" * 10_000, 20) == "x" * 19 + "…"
    assert terminal_lines("one\ntwo\x1b") == "one\ntwo\\x1b"
    assert text_table(["NAME"], [[FORGED]], rule=False).count("\n") == 1


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("names") / "runs"
    for name in HOSTILE_NAMES.values():
        write_run(root, name, tags=(name,))
    return root


@pytest.mark.fault("terminal control characters")
def test_ls_prints_one_safe_line_per_run_and_json_keeps_the_names(hostile_store: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ls", "--root", str(hostile_store)]) == 0
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert len(lines) == 1 + len(HOSTILE_NAMES)  # the header, then one line per run: no forged row
    assert not any(line.startswith("FAKE") for line in lines)
    for text in (out.out, out.err):
        assert not UNSAFE.search(text), repr(text[:300])
    assert max(len(line) for line in lines) < 400  # not 10,161 characters
    assert main(["ls", "--root", str(hostile_store), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(r["name"] for r in doc["runs"]) == sorted(HOSTILE_NAMES.values())


@pytest.mark.fault("terminal control characters")
def test_diff_text_and_markdown_report_keep_their_lines(hostile_store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = {m.name: p for p, m in rf.list_runs(hostile_store).runs}
    a, b = runs[FORGED], runs["\x1b[2J\x1b[31mred\x1b[0m"]
    assert main(["diff", str(a), str(b)]) in (0, 1)
    text = capsys.readouterr().out
    assert not UNSAFE.search(text) and "\nFAKE" not in text
    assert main(["report", str(a), str(runs["evil\rFAKE ✓ finished"])]) == 0
    md = capsys.readouterr().out
    assert "\r" not in md and not UNSAFE.search(md)
    for line in md.splitlines():  # every table row keeps its column count
        if line.startswith(("| ✅", "| ❌", "| ➖")):
            assert len(re.findall(r"(?<!\\)\|", line)) == 6, line


@pytest.mark.fault("terminal control characters")
def test_analyze_run_line_is_escaped(hostile_store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = next(p for p, m in rf.list_runs(hostile_store).runs if m.name == FORGED)
    assert main(["analyze", str(run)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("run evil\\nFAKE")
    assert not UNSAFE.search(out)


@pytest.fixture
def pair(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    write_run(root, "base")
    write_run(root, "cand", step_time_s=0.04)
    return root


@pytest.mark.fault("unwritable output")
@pytest.mark.parametrize("where", ["missing folder", "parent is a file", "output is a folder"])
def test_report_into_a_path_that_cannot_be_written(where: str, pair: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "folder.md").mkdir()
    out = {"missing folder": tmp_path / "nope" / "r.md", "parent is a file": tmp_path / "file" / "r.md",
           "output is a folder": tmp_path / "folder.md"}[where]
    assert main(["report", "base", "cand", "--root", str(pair), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(out) in err[0] and "Traceback" not in err[0], err


@pytest.mark.fault("unwritable output")
def test_report_write_failure_is_one_line(pair: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    import app.cli.report_cmd as report_cmd

    def refuse(path: Path, text: str) -> None:
        raise PermissionError(13, "Permission denied", str(path.parent / ".r.md.tmp"))

    monkeypatch.setattr(report_cmd, "atomic_write_text", refuse)
    out = tmp_path / "r.md"
    assert main(["report", "base", "cand", "--root", str(pair), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"torchscope report: error: -o {out}: cannot write the report (Permission denied)"


@pytest.mark.fault("out-of-range values")
def test_step_windows_of_a_trace_with_negative_durations_are_empty() -> None:
    events = pd.DataFrame({
        "name": pd.Categorical(["ProfilerStep#1", "ProfilerStep#2", "aten::mm"]),
        "cat": pd.Categorical(["user_annotation", "user_annotation", "cpu_op"]),
        "ts_us": [100.0, 200.0, 150.0], "dur_us": [-50.0, np.nan, -3.0],
    })
    assert compute_step_windows(events).empty


@pytest.mark.fault("out-of-range values")
def test_timeline_tab_of_a_trace_with_negative_durations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.app.helpers import open_app

    root = tmp_path / "runs"
    run_dir = write_run(root, "negative")
    events = [{"ph": "X", "name": f"ProfilerStep#{i}", "cat": "user_annotation", "ts": 1000 * i, "dur": -500,
               "pid": 1, "tid": 1} for i in range(1, 4)]
    events += [{"ph": "X", "name": "aten::mm", "cat": "cpu_op", "ts": 1000 * i + 10, "dur": -5, "pid": 1, "tid": 1}
               for i in range(1, 4)]
    traces = run_dir / layout.TRACES_DIR
    traces.mkdir(exist_ok=True)
    (traces / "host_1.1700000000000000000.pt.trace.json").write_text(json.dumps({"traceEvents": events}))
    at = open_app(monkeypatch, root, run=str(run_dir))
    assert not at.exception, [e.value for e in at.exception]
    assert not any("end_us > start_us" in str(e.value) for e in at.error)


@pytest.mark.fault("terminal control characters")
def test_an_error_quoting_a_hostile_name_is_one_safe_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "a\nFAKE \x1b[2J\u202e", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not UNSAFE.search(err)
    assert "a\\nFAKE \\x1b[2J\\u202e" in err
