"""app.workspace.refs: every kind of reference the user gives resolves, and a bad one is a clear error naming it."""
from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from app.errors import UsageError
from app.workspace import refs
from profiler_agent.runformat.errors import RunNotFoundError

HERE = Path(__file__).resolve().parent
TINY = HERE.parent / "data" / "traces" / "cpu_torch213" / "tiny_mlp.pt.trace.json.gz"


@pytest.fixture
def store(make_run: Callable[..., Path]) -> Path:
    make_run("baseline")
    make_run("baseline-wide")
    return make_run("optimized").parent


def test_run_folder(store: Path) -> None:
    run = next(p for p in store.iterdir() if "optimized" in p.name)
    found = refs.resolve_ref(run)
    assert found == refs.Ref(str(run), run, refs.RefKind.RUN)


def test_run_id_and_unique_prefix(store: Path) -> None:
    run = next(p for p in store.iterdir() if "optimized" in p.name)
    assert refs.resolve_ref(run.name, store).path == run  # the id
    assert refs.resolve_ref("optim", store).path == run  # a unique name prefix
    assert refs.resolve_ref("optimized", store).kind is refs.RefKind.RUN


def test_exact_name_wins_over_a_longer_one(store: Path) -> None:
    assert "baseline-wide" not in refs.resolve_ref("baseline", store).path.name


def test_ambiguous_prefix_names_the_matches(store: Path) -> None:
    with pytest.raises(RunNotFoundError, match=r"'base': matches 2 runs") as e:
        refs.resolve_ref("base", store)
    assert "baseline" in str(e.value)


def test_unknown_name_is_an_error_naming_it(store: Path) -> None:
    with pytest.raises(RunNotFoundError, match=r"'nosuch': no run with that id or name"):
        refs.resolve_ref("nosuch", store)
    with pytest.raises(UsageError, match=r"^nosuch: no such file, folder or run$"):
        refs.resolve_path("nosuch", store)


def test_trace_file_and_folder_of_traces(tmp_path: Path) -> None:
    assert refs.resolve_ref(TINY).kind is refs.RefKind.FILE
    assert refs.side_trace_files(TINY) == [TINY]
    folder = tmp_path / "traces"
    folder.mkdir()
    shutil.copy(TINY, folder / TINY.name)
    found = refs.resolve_ref(folder)
    assert found.kind is refs.RefKind.FOLDER
    assert refs.side_trace_files(folder) == [folder / TINY.name]
    assert refs.pick_tb_run(folder, None) == folder


def _tb_log(tmp_path: Path, *runs: str) -> Path:
    log = tmp_path / "log"
    for r in runs:
        (log / r).mkdir(parents=True)
        shutil.copy(TINY, log / r / TINY.name)
    return log


def test_tb_log_folder_of_one_run(tmp_path: Path) -> None:
    log = _tb_log(tmp_path, "only")
    assert refs.side_trace_files(log) == [log / "only" / TINY.name]
    assert refs.pick_tb_run(log, "only") == log / "only"


def test_tb_log_folder_of_several_runs_names_them(tmp_path: Path) -> None:
    log = _tb_log(tmp_path, "a", "b")
    with pytest.raises(UsageError, match=r"holds 2 torch-tb-profiler runs \(a, b\); pick one with --run NAME"):
        refs.pick_tb_run(log, None)
    with pytest.raises(UsageError, match=r"holds 2 torch-tb-profiler runs \(a, b\); a side of a comparison is one run"):
        refs.side_trace_files(log)
    assert refs.pick_tb_run(log, "b") == log / "b"
    with pytest.raises(UsageError, match=r"--run c: .* has no such run; its runs: a, b"):
        refs.pick_tb_run(log, "c")


def test_run_given_for_a_folder_that_is_no_log_folder(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"--run x: .* is not a torch-tb-profiler log folder"):
        refs.pick_tb_run(tmp_path, "x")


def test_a_store_is_not_one_side(store: Path) -> None:
    with pytest.raises(UsageError, match=r"is a run store of 3 runs .*; a side of a comparison is one run"):
        refs.side_trace_files(store)


def test_empty_folder_says_nothing_was_found(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"no run and no trace files found there"):
        refs.side_trace_files(tmp_path)
    with pytest.raises(UsageError, match=r"no profiler traces found"):
        refs.require_traces(tmp_path, [])
