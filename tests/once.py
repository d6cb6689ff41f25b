"""Build an expensive test input once per test session, shared by every pytest-xdist worker.

A ``scope="session"`` fixture runs once per *worker*: under ``pytest -n 2`` a store recorded by
real jobs is recorded twice, on the same two cores. ``build_once`` records it once, in the folder
all workers share (the parent of each worker's base temporary folder), under a file lock: the
first worker builds it, the others wait for the lock and reuse it. Without xdist it is a plain
``mktemp``.

Inputs built this way are read-only for the tests that use them: a test that changes files copies
the store first (the ``copy_store`` fixture).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock


def shared_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary folder shared by all workers of this session (the base temp without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def build_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder ``<shared tmp>/<name>``, filled by ``build(folder)`` exactly once per session.

    A build that raised leaves no marker: the folder is emptied and the next caller builds again
    (and fails the same way, with its own message), so a failure is never mistaken for a store.
    """
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        folder = tmp_path_factory.mktemp(name)
        build(folder)
        return folder
    shared = shared_tmp(tmp_path_factory)
    folder = shared / name
    with FileLock(str(shared / f"{name}.lock")):
        done = shared / f"{name}.built"
        if done.is_file():
            return folder
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir()
        build(folder)
        done.touch()
    return folder
