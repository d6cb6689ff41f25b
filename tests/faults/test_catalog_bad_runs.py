"""One bad run never hides the store: hostile values in one run's files, listed by `torchscope ls`
(text and JSON), the Runs page and that run's Run page, beside a good run that must stay listed."""
from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.cli import main
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout
from tests.app.helpers import open_app
from tests.conftest import PROJECT_ROOT, write_run

DEEP = 100_000


def _set_manifest(run_dir: Path, **fields: Any) -> None:
    raw = json.loads((run_dir / layout.MANIFEST).read_text())
    raw.update(fields)
    (run_dir / layout.MANIFEST).write_text(json.dumps(raw))  # NaN is written as NaN, as json allows


def _deep_config(run_dir: Path, depth: int = DEEP) -> None:
    text = (run_dir / layout.MANIFEST).read_text().rstrip()[:-1]
    (run_dir / layout.MANIFEST).write_text(text + ', "config": ' + '{"a": ' * depth + "1" + "}" * depth + "}")


def _append(run_dir: Path, name: str, *lines: str) -> None:
    with open(run_dir / name, "a") as f:
        f.write("".join(line + "\n" for line in lines))


# name -> how the run is broken; (manifest broken: the run is a problem, not a row)
BAD_RUNS: dict[str, tuple[Callable[[Path], None], bool]] = {
    "start-1e300": (lambda d: _set_manifest(d, started_at=1e300), True),
    "start-neg": (lambda d: _set_manifest(d, started_at=-1e12), True),
    "start-nan": (lambda d: _set_manifest(d, started_at=float("nan")), True),
    "end-inf": (lambda d: _set_manifest(d, ended_at=float("inf")), True),
    "heartbeat-nan": (lambda d: _set_manifest(d, heartbeat=float("nan")), True),
    "world-size-text": (lambda d: _set_manifest(d, world_size="eight"), True),
    "deep-config": (_deep_config, True),  # beyond what json can parse: RecursionError
    "config-900-deep": (lambda d: _deep_config(d, 900), True),  # parses, but repr and the UI would recurse
    "devices-not-objects": (lambda d: _set_manifest(d, devices=["gpu", 3, None]), False),
    "step-2-64": (lambda d: _append(d, layout.METRICS, json.dumps({"step": 2**64, "rank": 0, "loss": 1.0})), False),
    "rank-2-64": (lambda d: _append(d, layout.METRICS, json.dumps({"step": 3, "rank": 2**64, "loss": 1.0})), False),
    "loss-2-64": (lambda d: _append(d, layout.METRICS, json.dumps({"step": 3, "rank": 0, "loss": 2**64})), False),
    "system-2-64": (lambda d: _append(d, layout.SYSTEM, json.dumps({"time": 1.0, "rss_bytes": 2**64})), False),
    "system-1e300": (lambda d: _append(d, layout.SYSTEM, json.dumps({"time": 1.0, "rss_bytes": 1e300})), False),
    "deep-line": (lambda d: _append(d, layout.METRICS, '{"step": ' + "[" * DEEP + "]" * DEEP + "}"), False),
}


def _store(root: Path, bad: list[str]) -> dict[str, Path]:
    runs = {"good": write_run(root, "good", steps=60)}
    for name in bad:
        runs[name] = write_run(root, name)
        BAD_RUNS[name][0](runs[name])
    return runs


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    """Every bad run of BAD_RUNS beside one good 60-step run, in one store."""
    root = tmp_path_factory.mktemp("hostile") / "runs"
    return root, _store(root, list(BAD_RUNS))


def _ls(root: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    rc = main(["ls", "--root", str(root), *extra])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.fault("one bad run")
@pytest.mark.parametrize("bad", list(BAD_RUNS))
def test_ls_lists_every_other_run_and_names_the_bad_one(bad: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    runs = _store(root, [bad])
    rc, out, err = _ls(root, capsys, "--json")
    assert rc == 0, err
    doc = json.loads(out)
    names = [r["name"] for r in doc["runs"]]
    assert "good" in names
    assert next(r for r in doc["runs"] if r["name"] == "good")["steps"] == 60
    manifest_broken = BAD_RUNS[bad][1]
    if manifest_broken:
        assert bad not in names
        assert any(str(runs[bad] / layout.MANIFEST) in p for p in doc["problems"]), doc["problems"]
    else:
        assert bad in names
        row = next(r for r in doc["runs"] if r["name"] == bad)
        assert row["steps"] in (None, 20), row  # never 2**64 + 1
        assert row["peak_memory_bytes"] is None or row["peak_memory_bytes"] < 2**63
    rc, out, err = _ls(root, capsys)
    assert rc == 0 and "Traceback" not in err
    assert "good" in out


@pytest.mark.fault("one bad run")
def test_ls_of_a_store_of_bad_runs_in_a_subprocess(hostile_store: tuple[Path, dict[str, Path]]) -> None:
    root, runs = hostile_store
    proc = subprocess.run([sys.executable, "-m", "app", "ls", "--root", str(root)], capture_output=True, text=True,
                          cwd=PROJECT_ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    listed = {line.split()[0] for line in proc.stdout.splitlines()[1:]}
    assert listed == {"good"} | {n for n, (_, broken) in BAD_RUNS.items() if not broken}
    for name, (_, broken) in BAD_RUNS.items():
        if broken:
            assert f"{runs[name].name}/{layout.MANIFEST}" in proc.stderr, name
    assert "'started_at' is 1e+300, not a time" in proc.stderr
    assert "nested too deeply" in proc.stderr
    assert "nested more than 100 levels deep" in proc.stderr


@pytest.mark.fault("out-of-range values")
@pytest.mark.parametrize("step", ['"7"', "3.5", "true", "1000000000000000000", "-4", "null", "1e18",
                                  "9007199254740992"])
def test_a_bad_step_drops_its_line_and_names_file_and_line(step: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "runs"
    run_dir = write_run(root, "sixty", steps=60)
    _append(run_dir, layout.METRICS, f'{{"step": {step}, "rank": 0, "loss": 0.5, "step_time_s": 0.05}}')
    read = rf.read_samples(run_dir / layout.METRICS)
    if step == "null":  # no step: a value logged without one is kept, as before
        assert not read.skipped
        return
    assert len(read.records) == 60
    assert read.skipped == [f"metrics.jsonl line 61: step {_py(step)} is not a whole number from 0 to below 2**53; "
                            "line skipped"]
    rc, out, _ = _ls(root, capsys, "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["runs"][0]["steps"] == 60
    assert any("metrics.jsonl line 61" in p for p in doc["problems"])


def _py(json_text: str) -> str:
    return repr(json.loads(json_text))


@pytest.mark.fault("out-of-range values")
def test_bad_values_of_a_kept_line_are_dropped_each_named(tmp_path: Path) -> None:
    path = tmp_path / layout.SYSTEM
    path.write_text(json.dumps({"time": "soon", "rss_bytes": -(2**60), "cpu_percent": 5.0}) + "\n"
                    + json.dumps({"time": 1.0, "rank": True}) + "\n")
    read = rf.read_samples(path)
    assert read.records == [{"cpu_percent": 5.0}]
    assert read.skipped == [
        "system.jsonl line 1: time 'soon' is not a finite number; value dropped",
        "system.jsonl line 1: rss_bytes -1152921504606846976 is an integer beyond 2**53; value dropped",
        "system.jsonl line 2: rank True is not a whole number from 0 to below 2**24; line skipped",
    ]


@pytest.mark.fault("out-of-range values")
def test_a_file_of_bad_lines_gives_a_bounded_number_of_messages(tmp_path: Path) -> None:
    path = tmp_path / layout.METRICS
    path.write_text("".join(json.dumps({"step": -i}) + "\n" for i in range(1, 1001)))
    read = rf.read_samples(path)
    assert not read.records
    assert len(read.skipped) == rf.reader.MAX_REPORTED_LINES + 1
    assert read.skipped[-1] == "metrics.jsonl: 980 more problems in lines not listed"


@pytest.mark.fault("one bad run")
def test_runs_page_lists_the_good_run_and_the_problems(hostile_store: tuple[Path, dict[str, Path]],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    root, runs = hostile_store
    at = open_app(monkeypatch, root, page="app_pages/runs.py")
    assert not at.exception, [e.value for e in at.exception]
    shown = "\n".join(str(df.value) for df in at.dataframe)
    assert "good" in shown
    problems = "\n".join(str(w.value) for w in at.warning)
    assert f"{runs['start-1e300'].name}/{layout.MANIFEST}" in problems
    assert "nested too deeply" in problems


@pytest.mark.fault("one bad run")
@pytest.mark.parametrize("bad", ["start-nan", "deep-config", "step-2-64", "system-2-64"])
def test_run_page_of_a_bad_run_says_what_is_wrong(bad: str, hostile_store: tuple[Path, dict[str, Path]],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    root, runs = hostile_store
    at = open_app(monkeypatch, root, run=str(runs[bad]))
    assert not at.exception, [e.value for e in at.exception]
    errors = [str(e.value) for e in at.error]
    if BAD_RUNS[bad][1]:  # the page says why it cannot open the run (and shows another one)
        said = errors + [str(w.value) for w in at.warning]
        assert any(str(runs[bad] / layout.MANIFEST) in e for e in said), said
    else:
        assert not errors, errors
        assert bad in "\n".join(str(m.value) for m in at.markdown) or bad in str(at.title)
