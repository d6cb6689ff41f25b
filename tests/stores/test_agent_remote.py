"""The agent on a remote store: a real run recorded into S3 (moto server), read back by ls, analyze, diff and the UI; a killed upload completed by sync."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli import main
from profiler_agent.runformat import atomic_write_json, layout, read_manifest, update_manifest
from profiler_agent.runformat.store_url import spool_root
from profiler_agent.upload import Uploader, run_files, state_path
from tests.app.helpers import assert_clean, open_app, texts
from tests.conftest import write_run
from tests.stores.conftest import PROJECT_ROOT, S3Server, S3Store, make_s3_store

# A tiny real training job (plain torch, a dozen steps of milliseconds) and one profiler window.
JOB_SCRIPT = PROJECT_ROOT / "tests" / "agent" / "slowdown_job.py"
JOB_ARGS = ["--iters", "12", "--slow-from", "99", "--eval-at", "99", "--width", "32", "--batch", "8"]
WINDOW = ["--wait", "1", "--warmup", "1", "--active", "2", "--repeat", "1", "--no-graph"]


def _spooled_run(store: S3Store) -> Path:
    runs = [p for p in spool_root(store.url).iterdir() if not p.name.startswith(".")]
    assert len(runs) == 1, runs
    return runs[0]


def _assert_remote_equals_spool(store: S3Store, run_dir: Path) -> dict[str, bytes]:
    remote = {k[len(run_dir.name) + 1:]: v for k, v in store.objects().items() if k.startswith(run_dir.name + "/")}
    local = {rel: (run_dir / rel).read_bytes() for rel in run_files(run_dir)}
    assert sorted(remote) == sorted(local)
    assert all(remote[k] == local[k] for k in local), [k for k in local if remote[k] != local[k]]
    return remote


@pytest.fixture(scope="module")
def recorded(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[S3Store, Path]]:
    """One tiny real run recorded by ``torchscope run --root s3://...`` (the spooled folder too)."""
    with pytest.MonkeyPatch.context() as mp:
        store = make_s3_store(s3_server, tmp_path_factory.mktemp("recorded"), mp)
        done_long_ago = _uploaded_long_ago(store)
        cmd = [sys.executable, "-m", "app", "run", "--root", store.url, "--name", "tiny", *WINDOW,
               "--", sys.executable, str(JOB_SCRIPT), *JOB_ARGS]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=store.env, cwd=PROJECT_ROOT, timeout=240)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert f"uploaded → {store.url}/" in proc.stderr
        assert not done_long_ago.exists()  # the launcher cleaned the spool of a run uploaded 8 days ago
        yield store, _spooled_run(store)


def _uploaded_long_ago(store: S3Store) -> Path:
    """A spooled run whose upload completed 8 days ago (its upload state written as the uploader writes it)."""
    run_dir = write_run(spool_root(store.url), "uploaded-long-ago", steps=4, system=False)
    update_manifest(run_dir, lambda m: m.replace(extra={**m.extra, "upload": {"url": store.url, "state": "complete"}}))
    atomic_write_json(state_path(run_dir), {rel: list(sig) for rel, sig in run_files(run_dir).items()})
    old = time.time() - 8 * 86400
    os.utime(state_path(run_dir), (old, old))
    return run_dir


@pytest.mark.slow
def test_run_into_s3_is_listed_analyzed_and_diffed(recorded, capsys: pytest.CaptureFixture[str]):
    store, run_dir = recorded
    remote = json.loads(_assert_remote_equals_spool(store, run_dir)[layout.MANIFEST])
    assert remote["status"] == "finished" and remote["upload"]["state"] == "complete"
    assert remote["upload"]["url"] == store.url
    capsys.readouterr()
    assert main(["ls", "--root", store.url, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(r["id"], r["status"]) for r in doc["runs"]] == [(run_dir.name, "finished")]
    assert main(["analyze", run_dir.name, "--root", store.url, "--json"]) == 0
    analysis = json.loads(capsys.readouterr().out)
    assert analysis["steps"] and analysis["traces"] and analysis["run"]["name"] == "tiny"
    assert main(["diff", f"{store.url}/{run_dir.name}", run_dir.name, "--root", store.url, "--json",
                 "--resamples", "1000", "--no-advice"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["baseline"]["id"] == doc["candidate"]["id"] == run_dir.name
    assert main(["advise", run_dir.name, "--root", store.url, "--json"]) == 0
    assert "findings" in json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_ui_opens_the_remote_store(recorded, monkeypatch: pytest.MonkeyPatch):
    store, run_dir = recorded
    at = open_app(monkeypatch, store.url)  # type: ignore[arg-type] - the store is a URL here
    assert_clean(at)
    assert list(at.dataframe[0].value["name"]) == ["tiny"]
    assert at.sidebar.text_input(key="root").value == store.url
    # Tags and notes are written into the store; archive and delete are not offered (local copy only).
    # (This changes the remote run.json: it runs after the tests that compare it with the spool.)
    at.session_state["runs_table"] = {"selection": {"rows": [0], "columns": [], "cells": []}}
    at.run()
    captions = texts(at.caption)
    assert "Saved into the store itself" in captions and "Archive and delete are not offered" in captions
    assert not [b for b in at.button if b.key == "runs_remove"]
    at.text_input(key=f"runs_edit_tags_{run_dir.name}").input("main, remote")
    at.button[[b.label for b in at.button].index("Save")].click().run()
    assert_clean(at)
    assert json.loads(store.objects()[f"{run_dir.name}/{layout.MANIFEST}"])["tags"] == ["main", "remote"]
    at = open_app(monkeypatch, store.url, run=run_dir.name)  # type: ignore[arg-type]
    assert_clean(at)
    assert at.title[0].value == "tiny", texts(at.markdown)


def _wait(predicate, timeout: float, what: str) -> float:  # noqa: ANN001
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < timeout, f"timed out waiting for {what}"
        time.sleep(0.1)
    return time.monotonic() - start


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


JOB = "import time\nfor i in range(600):\n    print('line', i, flush=True)\n    time.sleep(0.05)\n"


@pytest.mark.slow
def test_killed_upload_is_completed_by_sync(s3, capsys: pytest.CaptureFixture[str]):
    # a long interval: after the first pass (the live run's manifest) nothing more goes up until the kill
    env = {**s3.env, "TORCHSCOPE_UPLOAD_INTERVAL_S": "60"}
    launcher = subprocess.Popen([sys.executable, "-m", "app", "run", "--root", s3.url, "--name", "killed", "--",
                                 sys.executable, "-c", JOB], env=env, cwd=PROJECT_ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        spool = spool_root(s3.url)
        _wait(lambda: spool.is_dir() and any(not p.name.startswith(".") for p in spool.iterdir()), 30, "the spool")
        run_dir = _spooled_run(s3)
        fs, key = s3.fs(), f"{s3.bucket}/runs/{run_dir.name}/{layout.MANIFEST}"

        def uploaded() -> bool:
            fs.invalidate_cache()
            return bool(fs.exists(key))  # one request a probe, not a listing of the store

        live = _wait(uploaded, 30, "the live run's manifest")
        assert live < 30  # a live run shows up remotely within seconds
        _wait(lambda: (run_dir / layout.STDOUT_LOG).is_file() and (run_dir / layout.STDOUT_LOG).stat().st_size > 200,
              30, "the job's output")
        job_pid = int(read_manifest(run_dir).extra.get("job_pid") or 0)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=10)
        if job_pid:
            _wait(lambda: _gone(job_pid), 15, "the job to stop with its launcher")
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        launcher.stderr.close()  # type: ignore[union-attr]
    # killed mid-run: the store has the live run's first pass, not what the job wrote after it
    remote_log = s3.objects().get(f"{run_dir.name}/{layout.STDOUT_LOG}", b"")
    assert len(remote_log) < (run_dir / layout.STDOUT_LOG).stat().st_size
    capsys.readouterr()
    assert main(["sync", "--root", s3.url]) == 0
    assert "complete" in capsys.readouterr().out
    _assert_remote_equals_spool(s3, run_dir)
    assert main(["sync", "--root", s3.url, "--json"]) == 0  # a second sync has nothing to put
    assert json.loads(capsys.readouterr().out)["runs"][0]["put"] == 0


def test_upload_errors_are_retried_then_logged_into_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: connections are refused at once
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    for k, v in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "sekrit-value", "AWS_DEFAULT_REGION": "us-east-1",
                 "AWS_MAX_ATTEMPTS": "1", "AWS_CONFIG_FILE": str(tmp_path / "none")}.items():
        monkeypatch.setenv(k, v)
    run_dir = write_run(tmp_path / "spool", "offline")
    slept: list[float] = []
    uploader = Uploader(run_dir, "s3://nowhere/runs", sleep=slept.append)
    assert uploader.finish() is False
    assert slept == [0.5, 1.0, 2.0, 4.0]  # one file's retries with backoff, then the pass stops
    upload = read_manifest(run_dir).extra["upload"]
    assert upload["state"] == "incomplete" and upload["errors"] >= 1 and upload["url"] == "s3://nowhere/runs"
    log = (run_dir / layout.LOGS_DIR / "upload.log").read_text()
    assert "failed, will retry" in log and "torchscope sync --root s3://nowhere/runs" in log
    assert os.environ["AWS_SECRET_ACCESS_KEY"] not in log
