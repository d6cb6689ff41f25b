"""Concurrent writers and readers: tags edited while a run writes, two readers listing the store the
whole time; no edit is lost and no reader sees a torn file (a torch-free job writing as the agent does)."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from profiler_agent.runformat import (
    RunStatus,
    list_runs,
    read_jsonl,
    read_manifest,
    update_manifest,
)

from ..agent.helpers import PROJECT_ROOT, env

# Writes like the agent: it waits for the launcher's run.json (the gate the agent waits for at
# `import torch`), then appends metrics lines and rewrites run.json under its lock, as fast as it can.
WRITER = """
    import os, time
    from pathlib import Path
    from profiler_agent.autoinstrument import wait_for_run
    from profiler_agent.runformat import JsonlWriter, layout, update_manifest
    assert wait_for_run()
    run_dir = Path(os.environ["TORCHSCOPE_RUN_DIR"])
    print("READY", flush=True)
    with JsonlWriter(run_dir / layout.METRICS) as w:
        end = time.monotonic() + 2.5
        step = 0
        while time.monotonic() < end:
            step += 1
            w.write({"step": step, "loss": 1.0 / step, "pad": "x" * (step % 500)})
            if step % 5 == 0:
                update_manifest(run_dir, heartbeat=time.time(), config={"steps_seen": step})
    print(step, flush=True)
"""


@pytest.mark.slow
@pytest.mark.fault("concurrent writers")
def test_tags_edited_and_store_listed_while_a_run_writes(tmp_path: Path) -> None:
    from app.workspace.catalog import load_catalog

    root = tmp_path / "runs"
    job = tmp_path / "writer.py"
    job.write_text(textwrap.dedent(WRITER))
    proc = subprocess.Popen([sys.executable, "-m", "app", "run", "--root", str(root), "--", sys.executable, str(job)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(), cwd=PROJECT_ROOT)
    assert proc.stdout is not None
    assert "READY" in proc.stdout.readline()
    (run_dir, _), = list_runs(root).runs
    errors: list[BaseException] = []
    stop = threading.Event()
    reads = [0, 0]

    def reader(slot: int) -> None:
        while not stop.is_set():
            try:
                store = load_catalog(root)
                assert len(store.table) == 1 and not store.problems, store.problems
                read_manifest(run_dir)
                read = read_jsonl(run_dir / "metrics.jsonl")
                assert not read.skipped, read.skipped
                reads[slot] += 1
            except Exception as e:  # noqa: BLE001 - a project error or any other: what this test hunts
                errors.append(e)

    threads = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    edits = 0
    try:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            edits += 1
            tag = f"t{edits}"
            update_manifest(run_dir, lambda m, tag=tag: m.replace(tags=(*m.tags, tag)))
        _, err = proc.communicate(timeout=60)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert not errors, errors[:3]
    assert min(reads) > 0
    m = read_manifest(run_dir)
    assert m.status is RunStatus.FINISHED
    assert list(m.tags) == [f"t{i}" for i in range(1, edits + 1)]  # every edit kept, in order
    assert m.config["steps_seen"] > 0
    read = read_jsonl(run_dir / "metrics.jsonl")
    assert not read.skipped and not read.truncated_tail


# What the agent's SIGTERM flush does when the signal lands while the main thread rewrites run.json
# under its lock: update the manifest again from inside that update (a signal handler runs in the
# thread it interrupts). flock is per open file, so this waited forever for its own lock: a job
# whose launcher was SIGKILLed then hung for good. In a process of its own, with a timeout.
NESTED = """
    import sys
    from pathlib import Path
    from profiler_agent.runformat import create_run, read_manifest, update_manifest
    run_dir, _ = create_run(Path(sys.argv[1]), "nested")
    def change(m):
        update_manifest(run_dir, tags=["from the handler"])
        return m.replace(notes="outer")
    update_manifest(run_dir, change)
    m = read_manifest(run_dir)
    print(m.notes, list(m.tags))
"""


@pytest.mark.fault("concurrent writers")
def test_a_manifest_update_inside_one_in_the_same_thread_does_not_deadlock(tmp_path: Path) -> None:
    job = tmp_path / "nested.py"
    job.write_text(textwrap.dedent(NESTED))
    res = subprocess.run([sys.executable, str(job), str(tmp_path / "runs")], capture_output=True, text=True,
                         env=env(), cwd=PROJECT_ROOT, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "outer []"  # the outer update wins: the job is dying when this happens
