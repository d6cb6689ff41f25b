"""A real S3-compatible server for the store tests: moto's standalone server on a free port (no mocks of fsspec or boto).

``s3_server`` (session) runs ``moto.server.ThreadedMotoServer`` on 127.0.0.1 and records every
request line it serves, so a test can count what a second open read remotely. ``s3`` (per test)
creates a bucket of its own and points this process's AWS_* variables, fsspec and Torchscope's
cache at it; ``s3.env`` is the same environment for subprocesses (the agent's launcher).
"""
from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class S3Server:
    endpoint: str
    requests: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _fs: Any = None

    def fs(self):  # noqa: ANN201 - an s3fs.S3FileSystem (untyped)
        """The tests' own client of this server, made once: a client costs ~0.5 s to make."""
        if self._fs is None:
            import s3fs

            self._fs = s3fs.S3FileSystem(skip_instance_cache=True, key="testing", secret="testing-secret",
                                         client_kwargs={"endpoint_url": self.endpoint})
        self._fs.invalidate_cache()  # it must see what the code under test wrote
        return self._fs

    def mark(self) -> int:
        with self.lock:
            return len(self.requests)

    def since(self, mark: int) -> list[str]:
        with self.lock:
            return list(self.requests[mark:])


class _RequestLog(logging.Handler):
    def __init__(self, server: S3Server) -> None:
        super().__init__(logging.INFO)
        self.server = server

    def emit(self, record: logging.LogRecord) -> None:
        with self.server.lock:
            self.server.requests.append(record.getMessage())


def aws_env(endpoint: str, home: Path) -> dict[str, str]:
    """AWS_* settings for the test server only (never the machine's own credentials or config)."""
    return {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret", "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint, "AWS_CONFIG_FILE": str(home / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "no-aws-credentials"), "AWS_MAX_ATTEMPTS": "2",
    }


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    moto_server = pytest.importorskip("moto.server")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    info = S3Server(f"http://{host}:{port}")
    log = logging.getLogger("werkzeug")  # the server logs one line per request it served
    handler = _RequestLog(info)
    old_level, old_propagate = log.level, log.propagate
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False  # counted here, not shown in every failure report
    try:
        yield info
    finally:
        log.removeHandler(handler)
        log.setLevel(old_level)
        log.propagate = old_propagate
        server.stop()


@dataclass
class S3Store:
    server: S3Server
    bucket: str
    url: str  # s3://bucket/runs
    cache: Path  # TORCHSCOPE_CACHE of this test (read cache and spool)
    env: dict[str, str]  # for subprocesses

    def fs(self):  # noqa: ANN201 - an s3fs.S3FileSystem (untyped)
        return self.server.fs()

    def objects(self, prefix: str = "runs") -> dict[str, bytes]:
        """Every object under ``bucket/prefix``: key relative to it → bytes."""
        fs = self.fs()
        base = f"{self.bucket}/{prefix}"
        # Files only: while a run is uploading, s3fs can answer an empty listing followed by a prefix that
        # now exists, and report the prefix itself (a directory, no object behind it) as the one entry.
        found = fs.find(base, detail=True)
        return {k[len(base) + 1:]: fs.cat_file(k) for k, info in found.items()
                if info.get("type") == "file" and k.startswith(base + "/")}


def make_s3_store(server: S3Server, home: Path, mp: pytest.MonkeyPatch) -> S3Store:
    bucket = f"ts-{uuid.uuid4().hex[:12]}"
    env = {**aws_env(server.endpoint, home), "TORCHSCOPE_CACHE": str(home / "cache")}
    for k, v in env.items():
        mp.setenv(k, v)
    mp.delenv("TORCHSCOPE_RUNS", raising=False)
    mp.delenv("TORCHSCOPE_SPOOL", raising=False)
    store = S3Store(server, bucket, f"s3://{bucket}/runs", home / "cache",
                    {**{k: v for k, v in os.environ.items() if not k.startswith("TORCHSCOPE_")}, **env,
                     "PYTHONPATH": str(PROJECT_ROOT)})
    store.fs().mkdir(bucket)
    return store


@pytest.fixture
def s3(s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> S3Store:
    """An empty bucket of this test on the session's server, with this process pointed at it."""
    return make_s3_store(s3_server, tmp_path, monkeypatch)
