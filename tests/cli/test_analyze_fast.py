"""A warm `analyze --json` prints its stored document without importing pandas, numpy, pyarrow, plotly
or Streamlit; progress goes to stderr only; a changed input never reads an old document."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli.progress import ProgressBar
from app.data.trace import load_traces
from app.presentation.progress import eta_seconds, progress_text
from app.workspace.analyze_docs import AnalyzeDocuments

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "tests" / "data" / "traces" / "cpu_torch213" / "tiny_mlp.pt.trace.json.gz"
_HEAVY = ("pandas", "numpy", "pyarrow", "plotly", "streamlit")


def _cli(args: list[str], cache: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TORCHSCOPE_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *flags, "-m", "app.cli", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def _imported(importtime_stderr: str) -> set[str]:
    """Top-level packages named in ``-X importtime`` lines."""
    out = set()
    for line in importtime_stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            out.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return out


def test_warm_analyze_json_imports_no_pandas_and_prints_the_same(tmp_path: Path) -> None:
    trace = tmp_path / TRACE.name
    shutil.copy(TRACE, trace)
    cache = tmp_path / "cache"
    cold = _cli(["analyze", "--json", "--progress", str(trace)], cache)
    assert cold.returncode == 0, cold.stderr
    assert "reading traces [" in cold.stderr  # --progress: a bar on stderr even though it is a pipe
    doc = json.loads(cold.stdout)  # ... and stdout is the document alone
    assert doc["traces"][0]["events"] > 0
    warm = _cli(["analyze", "--json", str(trace)], cache, "-X", "importtime")
    assert warm.returncode == 0
    assert warm.stdout == cold.stdout
    loaded = _imported(warm.stderr)
    assert "app" in loaded and not loaded & set(_HEAVY), sorted(loaded & set(_HEAVY))


def test_a_stored_document_is_read_only_for_the_same_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHSCOPE_CACHE", str(tmp_path / "cache"))
    trace = tmp_path / TRACE.name
    shutil.copy(TRACE, trace)
    traces = load_traces(trace)
    assert AnalyzeDocuments(trace, None).read() is None  # nothing stored yet
    assert AnalyzeDocuments(trace, None).write(traces, "doc\n")
    assert AnalyzeDocuments(trace, None).read() == "doc\n"
    assert AnalyzeDocuments(trace, 0).read() is None  # --rank 0 is another document
    with trace.open("ab") as f:  # the file changed: its cache entry, and the document, are stale
        f.write(b"\n")
    assert AnalyzeDocuments(trace, None).read() is None


def test_progress_bar_and_eta() -> None:
    assert eta_seconds(0, 100, 5.0) is None and eta_seconds(25, 100, 0.1) is None
    assert eta_seconds(25, 100, 2.0) == pytest.approx(6.0)
    assert progress_text(300 << 20, 1000 << 20, 3.0) == "300 of 1,000 MiB, 3 s, about 7 s left"
    assert progress_text(5, 5, 1.0).endswith("finishing")
    quiet = io.StringIO()  # not a terminal, no flag: nothing is drawn
    bar = ProgressBar("reading traces", stream=quiet)
    bar(10, 100 << 20)
    bar.close()
    assert quiet.getvalue() == ""
    forced = io.StringIO()
    bar = ProgressBar("reading traces", force=True, stream=forced)
    bar(100, 100)
    bar.close()
    assert forced.getvalue().startswith("\rreading traces [") and forced.getvalue().endswith("finishing\n")


def test_a_command_imports_only_its_own_module(tmp_path: Path) -> None:
    out = _cli(["import", "--help"], tmp_path / "cache", "-X", "importtime")
    assert out.returncode == 0 and "usage: torchscope import" in out.stdout
    assert not _imported(out.stderr) & set(_HEAVY)  # `ls`, `diff`... (pandas) were not imported for it


@pytest.mark.parametrize("args, code", [(["analyze", "--json", "{trace}"], 0), (["analyze", "{missing}"], 2)])
def test_the_program_runs_exit_handlers_and_keeps_the_exit_code(args: list[str], code: int, tmp_path: Path) -> None:
    """``app.cli.entry`` ends a read-only command with ``os._exit`` after the exit handlers and a
    flush: the document is whole, an ``atexit`` handler still runs, the exit code is the command's."""
    argv = [a.format(trace=TRACE, missing=tmp_path / "none.json") for a in args]
    script = ("import atexit, sys\n"
              "atexit.register(lambda: sys.stderr.write('handler ran\\n'))\n"
              f"sys.argv = ['torchscope', *{argv!r}]\n"
              "from app.cli import entry\n"
              "entry()\n")
    env = {**os.environ, "TORCHSCOPE_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == code, out.stderr
    assert out.stderr.endswith("handler ran\n")
    if code == 0:
        assert json.loads(out.stdout)["traces"][0]["events"] > 0
    else:
        assert "none.json" in out.stderr and out.stdout == ""
