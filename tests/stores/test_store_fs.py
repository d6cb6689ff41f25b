"""store_fs: a store URL read through the local mirror (file:// and a real S3 server), hostile keys, refused schemes."""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from app.cli import main
from app.data.store_fs import StoreError, StoreFS, key_problem, open_store
from profiler_agent.runformat import layout
from profiler_agent.runformat.store_url import UnsupportedStoreError, check_store_url, scrub_url
from tests.conftest import write_run


def _gets(lines: list[str]) -> list[str]:
    """Object reads among a server's request lines (listings excluded)."""
    return [r for r in lines if '"GET ' in r and "list-type=" not in r]


def test_file_url_mirror_follows_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TORCHSCOPE_CACHE", str(tmp_path / "cache"))
    remote = tmp_path / "remote"
    run_dir = write_run(remote, "base")
    store = open_store(f"file://{remote}")
    first = store.mirror()
    assert first.fetched > 0 and first.reused == 0 and first.warnings == ()
    assert (first.root / run_dir.name / layout.MANIFEST).read_bytes() == (run_dir / layout.MANIFEST).read_bytes()
    again = store.mirror()
    assert again.fetched == 0 and again.reused == first.fetched  # keyed by mtime+size: nothing read again
    (run_dir / layout.STDOUT_LOG).write_text("changed\n")
    os.utime(run_dir / layout.STDOUT_LOG, ns=(1, 1))
    (run_dir / layout.STDERR_LOG).unlink()
    third = store.mirror()
    assert third.fetched == 1 and third.removed == 1
    assert (third.root / run_dir.name / layout.STDOUT_LOG).read_text() == "changed\n"
    assert not (third.root / run_dir.name / layout.STDERR_LOG).exists()


def test_second_open_reads_nothing_remote(s3, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch):
    run_dir = write_run(tmp_path / "local", "base")
    s3.fs().put(str(run_dir), f"{s3.bucket}/runs/{run_dir.name}", recursive=True)
    mark = s3.server.mark()
    assert main(["ls", "--root", s3.url, "--json"]) == 0
    assert len(_gets(s3.server.since(mark))) >= 3  # run.json, metrics.jsonl, system.jsonl, logs
    doc = json.loads(capsys.readouterr().out)
    assert doc["root"] == s3.url and [r["name"] for r in doc["runs"]] == ["base"]
    mark = s3.server.mark()
    store = open_store(s3.url)
    again = store.mirror()
    lines = s3.server.since(mark)
    # listings only, no object read: the top level and the run (put by another tool: it has no change
    # marker, so it is listed each time; the agent's runs are not, tests/stores/test_store_changes.py)
    assert _gets(lines) == [] and len(lines) == 2, lines
    assert again.fetched == 0 and again.reused >= 3
    s3.fs().pipe_file(f"{s3.bucket}/runs/{run_dir.name}/{layout.STDOUT_LOG}", b"rewritten\n")
    mark = s3.server.mark()
    assert store.mirror().fetched == 1 and len(_gets(s3.server.since(mark))) == 1  # a new ETag: read again
    assert (store.mirror_dir / run_dir.name / layout.STDOUT_LOG).read_bytes() == b"rewritten\n"
    # the server out of reach: the same store reads from its cache, with a warning
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{sock.getsockname()[1]}")
    offline = StoreFS(s3.url).mirror()
    assert offline.offline and offline.root == store.mirror_dir and "cannot list the store" in offline.warnings[0]
    assert (offline.root / run_dir.name / layout.MANIFEST).is_file()


HOSTILE = {"../escaped": "it has an empty, '.' or '..' segment", "/abs": "it is an absolute path",
           "run\\..\\..\\win": "it holds a backslash", "a/../../up": "it has an empty, '.' or '..' segment"}


def test_hostile_keys_never_leave_the_cache(s3, tmp_path: Path):
    run_dir = write_run(tmp_path / "local", "base")
    fs = s3.fs()
    fs.put(str(run_dir), f"{s3.bucket}/runs/{run_dir.name}", recursive=True)
    for key in HOSTILE:
        fs.pipe_file(f"{s3.bucket}/runs/{key}", b"evil")
    assert set(HOSTILE) <= set(s3.objects())  # the server really holds those keys
    result = open_store(s3.url).mirror()
    assert (result.root / run_dir.name / layout.MANIFEST).is_file()  # the good run is mirrored
    warnings = "\n".join(result.warnings)
    for key, why in HOSTILE.items():
        assert f"skipped the object {key!r}: {why}" in warnings, key
    everything = [p for p in s3.cache.rglob("*") if p.is_file()]
    mirror = open_store(s3.url).mirror_dir
    assert all(mirror in p.parents or p.name == "objects.json" for p in everything), everything
    assert not any(p.read_bytes() == b"evil" for p in everything)


@pytest.mark.parametrize("key", ["a\x00b", "x/./y", "", "c:/x", "a//b"])
def test_key_problem_refuses_other_hostile_keys(key: str):
    assert key_problem(key) is not None
    assert key_problem("run/traces/w.1.pt.trace.json.gz") is None


def test_unsupported_schemes_and_backends_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--root", "hdfs://nn/runs", "--", "true"]) == 2
    assert "hdfs:// is not supported" in capsys.readouterr().err
    assert main(["ls", "--root", "gs://bucket/runs"]) == 2
    assert "'gcsfs', which is not installed" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # never a local folder named "hdfs:" or "gs:"
    with pytest.raises(UnsupportedStoreError, match="a store URL, not a local folder"):
        layout.resolve_root("s3://bucket/runs")
    with pytest.raises(UnsupportedStoreError, match="needs a bucket"):
        check_store_url("s3://")


def test_credentials_in_a_url_are_never_shown(s3, tmp_path: Path):
    assert scrub_url("s3://AKIAX:SeCrEt@bucket/p") == "s3://bucket/p"
    run_dir = write_run(tmp_path / "local", "base")
    s3.fs().put(str(run_dir), f"{s3.bucket}/runs/{run_dir.name}", recursive=True)
    store = open_store(f"s3://AKIAX:SeCrEt@{s3.bucket}/runs")  # the URL's user:password is dropped
    assert store.url == s3.url and store.mirror().fetched > 0
    assert not any("SeCrEt" in p.read_text(errors="replace") for p in s3.cache.rglob("*") if p.is_file())
    with pytest.raises(StoreError) as e:
        open_store(f"s3://AKIAX:SeCrEt@missing-{s3.bucket}/runs").mirror()
    assert "SeCrEt" not in str(e.value) and f"s3://missing-{s3.bucket}/runs" in str(e.value)


def test_import_into_an_s3_store(s3, capsys: pytest.CaptureFixture[str]):
    trace = Path(__file__).resolve().parents[1] / "data" / "traces" / "cpu_torch213" / "tiny_mlp.pt.trace.json.gz"
    assert main(["import", str(trace), "--root", s3.url, "--name", "imported", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)["runs"]
    assert row["path"] == f"{s3.url}/{row['id']}"
    remote = s3.objects()
    assert json.loads(remote[f"{row['id']}/{layout.MANIFEST}"])["upload"]["state"] == "complete"
    assert any(k.startswith(f"{row['id']}/traces/") for k in remote)
    mirrored = (open_store(s3.url).mirror().root).iterdir()  # .torchscope/: the mirror's catalog index and journal
    assert [r.name for r in mirrored if not r.name.startswith(".")] == [row["id"]]


def test_ui_command_hands_the_url_to_the_app(monkeypatch: pytest.MonkeyPatch):
    from app.cli import build_parser
    from app.cli.ui_cmd import build_command

    monkeypatch.delenv(layout.ROOT_ENV, raising=False)
    args = build_parser("ui").parse_args(["ui", "--root", "s3://bucket/runs/", "--no-browser"])
    _, env = build_command(args)
    assert env[layout.ROOT_ENV] == "s3://bucket/runs"  # not a local path "s3:/bucket/runs"
    with pytest.raises(UnsupportedStoreError):
        build_command(build_parser("ui").parse_args(["ui", "--root", "ftp://host/runs"]))


def test_a_symlink_planted_in_the_cache_is_not_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TORCHSCOPE_CACHE", str(tmp_path / "cache"))
    remote = tmp_path / "remote"
    (remote / "run1").mkdir(parents=True)
    (remote / "run1" / "run.json").write_text("{}")
    store = open_store(f"file://{remote}")
    outside = tmp_path / "outside"
    outside.mkdir()
    store.mirror_dir.mkdir(parents=True)
    (store.mirror_dir / "run1").symlink_to(outside)
    result = store.mirror()
    assert result.fetched == 0 and "cannot place the object 'run1/run.json'" in result.warnings[0]
    assert list(outside.iterdir()) == []
