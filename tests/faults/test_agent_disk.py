"""A full disk under a wrapped job: the final status is still written, no torn jsonl line, no stale
temporary files, never a run folder without run.json (a 2 MiB tmpfs; skipped where mount is refused)."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from profiler_agent.options import RUN_DIR_ENV
from profiler_agent.runformat import (
    JsonlWriter,
    RunStatus,
    effective_status,
    layout,
    list_runs,
    read_jsonl,
    remove_temp_files,
)

from ..agent.helpers import PROJECT_ROOT, env


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A 2 MiB tmpfs, unmounted after the test."""
    if os.geteuid() != 0:
        pytest.skip("a tmpfs needs root")
    mnt = Path(tempfile.mkdtemp(prefix="torchscope-full-"))
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        mnt.rmdir()
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        with contextlib.suppress(OSError):
            mnt.rmdir()


def _fill(path: Path, leave: int = 0) -> None:
    """Write zeros to ``path`` until the disk is full (then give ``leave`` bytes back)."""
    with open(path, "wb", buffering=0) as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 65536)
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 512)
    if leave:
        os.truncate(path, max(0, path.stat().st_size - leave))


def _wrapped(root: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", "run", "--root", str(root), "--", sys.executable, "-c", code],
                          capture_output=True, text=True, env=env(), cwd=PROJECT_ROOT, timeout=60)


@pytest.mark.fault("disk full")
def test_a_job_that_fills_the_disk_still_ends_finished(small_disk: Path) -> None:
    filler = small_disk / "filler"
    job = (f"import os, sys\nsys.path.insert(0, {str(PROJECT_ROOT)!r})\nfrom tests.faults.test_agent_disk import _fill\n"
           f"from pathlib import Path\n_fill(Path({str(filler)!r}))\nprint('filled')\n")
    res = _wrapped(small_disk / "runs", job)
    assert res.returncode == 0, res.stderr
    (run_dir, manifest), = list_runs(small_disk / "runs").runs
    assert manifest.status is RunStatus.FINISHED and manifest.exit_code == 0, res.stderr
    assert effective_status(manifest) is RunStatus.FINISHED
    assert not (run_dir / layout.STATUS_RESERVE).exists()
    assert not [p for p in run_dir.rglob("*") if layout.is_temp_file(p.name)]


@pytest.mark.fault("disk full")
def test_no_space_at_all_leaves_no_folder_and_runs_the_job(small_disk: Path) -> None:
    root = small_disk / "runs"
    root.mkdir()
    _fill(small_disk / "filler")
    res = _wrapped(root, "print('ran'); raise SystemExit(4)")
    assert res.returncode == 4 and "ran" in res.stdout
    assert "cannot create a run" in res.stderr and "No space left" in res.stderr
    assert list(root.iterdir()) == []  # no empty run folder without run.json


@pytest.mark.fault("disk full")
def test_a_full_disk_never_tears_a_metrics_line(small_disk: Path) -> None:
    path = small_disk / "metrics.jsonl"
    _fill(small_disk / "filler", leave=10_000)
    failures = 0
    with JsonlWriter(path) as writer:
        for step in range(200):
            try:
                writer.write({"step": step, "note": "x" * 3000})
            except OSError:
                failures += 1
    assert failures > 0
    read = read_jsonl(path)
    assert read.records and not read.skipped and not read.truncated_tail
    assert path.read_bytes().endswith(b"\n")
    assert [r["step"] for r in read.records] == list(range(len(read.records)))


@pytest.mark.fault("disk full")
def test_stale_temporary_files_are_removed_at_the_end_and_ignored_before(tmp_path: Path) -> None:
    code = (f"import os, pathlib\nd = pathlib.Path(os.environ[{RUN_DIR_ENV!r}])\n(d / 'traces').mkdir(exist_ok=True)\n"
            "(d / 'traces' / '.h_1_rank0.1.pt.trace.json.gz.1.gz.tmp').write_bytes(b'half')\n"
            "(d / '.run.json.abc.tmp').write_bytes(b'{')\nprint(d)\n")
    res = _wrapped(tmp_path, code)
    assert res.returncode == 0, res.stderr
    run_dir = Path(res.stdout.strip().splitlines()[-1])
    assert not [p for p in run_dir.rglob("*") if layout.is_temp_file(p.name)]
    # Left by a SIGKILLed writer (nobody cleaned): readers never take them for a trace.
    leftover = run_dir / layout.TRACES_DIR / ".h_1_rank0.2.pt.trace.json.gz.99.json.tmp"
    leftover.write_bytes(b"{")
    assert layout.list_trace_files(run_dir) == []
    assert remove_temp_files(run_dir) == [leftover]
    assert (run_dir / layout.MANIFEST_LOCK).exists()  # the lock is no temporary file
