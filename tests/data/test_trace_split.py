"""A big plain trace parsed by two processes (app.data.trace_split) gives the tables of one whole
pass, categories in the same order; a cut that is not an event boundary, a failed child or a
changed file fall back to the whole pass; no child is left behind."""
from __future__ import annotations

import gzip
import io
import json
import os
import random
import threading
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from app.cli import main
from app.data import trace_split
from app.data.event_scan import PURE_PYTHON_ENV
from app.data.trace import load_trace
from app.data.trace_kinds import TABLES
from app.data.trace_parse import ParsedTrace, parse_trace_file

OTHERS_RUNNING = trace_split._others_running  # the fixture replaces it; one test reads the real one


def _children() -> list[str]:
    """This process's children, zombies included, as "pid state command"."""
    out = []
    for f in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        for pid in f.read_text().split():
            try:
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:120]
            except OSError:
                stat, cmd = "?", "?"
            out.append(f"{pid} {stat} {cmd}")
    return out


@pytest.fixture(autouse=True)
def small_split(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Split traces of any size (the test traces are small), and reap every child afterwards.

    trace_split forks only in a one-thread process, and these tests check that no child is left:
    tests/conftest.py runs this module first in each worker, before session fixtures start servers
    and browsers (their threads and processes live until the session ends)."""
    threads = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    assert not threads and not _children(), (
        f"this test process already runs threads {threads} and children {_children()} (an earlier test's "
        "fixtures): trace_split would not fork, and no child left could be told from theirs")
    monkeypatch.setattr(trace_split, "SPLIT_MIN_BYTES", 0)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))  # whatever else the machine runs
    monkeypatch.setattr(trace_split, "_others_running", lambda: 0)  # nor what runs right now
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})  # a one-core runner too
    yield
    trace_split.cancel_all()
    assert _children() == []  # no child of this process is left, not even a zombie


def _events(n: int, seed: int = 1) -> list[dict]:
    """Complete events, memory and flow events, metadata and counters; some names, threads and
    shapes appear only late in the file (categories first seen in the tail)."""
    rnd = random.Random(seed)
    out: list[dict] = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "main"}}]
    for i in range(n):
        late = i > n * 3 // 4
        name = f"aten::op{rnd.randrange(40) + (40 if late else 0)}"
        ev = {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 2 + (i % 3 if late else 0),
              "ts": 1000.0 + 3 * i + rnd.random(), "dur": rnd.choice([0.5, 2.0, 7.25]),
              "args": {"External id": i, "Input Dims": [[rnd.randrange(1, 9), 4]], "Input type": ["float"],
                       "Sequence number": i // 2}}
        out.append(ev)
        if i % 50 == 0:
            out.append({"ph": "i", "name": "[memory]", "pid": 1, "tid": 2, "ts": 1000.0 + 3 * i, "s": "t",
                        "args": {"Addr": i, "Bytes": 512 - i % 3, "Total Allocated": i, "Total Reserved": 4096,
                                 "Device Type": 0, "Device Id": -1}})
        if i % 40 == 0:
            out.append({"ph": "s", "id": i, "cat": "fwdbwd", "pid": 1, "tid": 2, "ts": 1000.0 + 3 * i})
            out.append({"ph": "f", "id": i, "cat": "fwdbwd", "pid": 1, "tid": 3, "ts": 1001.0 + 3 * i, "bp": "e"})
        if i % 500 == 7:
            out.append({"ph": "C", "name": "GPU Memory", "pid": 1, "ts": 1000.0 + 3 * i, "args": {"used": i}})
    return out


def _write(path: Path, events: list[dict], *, indent: int | None = None) -> Path:
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0}], "traceEvents": events,
           "traceName": "t", "displayTimeUnit": "ms", "baseTimeNanoseconds": 7}
    path.write_text(json.dumps(doc, indent=indent), encoding="utf-8")
    return path


def _assert_same(a: ParsedTrace, b: ParsedTrace) -> None:
    assert a.warnings == b.warnings == []
    assert list(a.meta.items()) == list(b.meta.items())  # the tail's fields too, in order
    assert a.n_events == b.n_events
    for kind in TABLES:
        x, y = getattr(a, kind), getattr(b, kind)
        assert x.equals(y), kind
        for col in x.column_names:  # categories in their order of first appearance
            if pa.types.is_dictionary(x.schema.field(col).type) and x.num_rows:
                assert x[col].chunk(0).dictionary.equals(y[col].unify_dictionaries().chunk(0).dictionary)


@pytest.mark.parametrize("indent", [None, 1])
def test_split_gives_the_tables_of_one_pass(tmp_path: Path, indent: int | None) -> None:
    path = _write(tmp_path / "t.json", _events(12_000), indent=indent)
    assert trace_split.start(path, 1 << 30)
    split = trace_split.take(path)
    assert split is not None
    whole = parse_trace_file(path)
    _assert_same(split, whole)
    assert split.counters is not None and split.memory is not None and split.flows is not None
    assert split.counters.num_rows > 0 and split.memory.num_rows > 0 and split.flows.num_rows > 0


@pytest.mark.parametrize("pure_python", ["0", "1"])
def test_the_head_parsed_ahead_gives_the_same_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     pure_python: str) -> None:
    """``parse_head`` (the command parses its part while another thread imports the analysis) then
    ``take``: the tables of one pass; a file changed after the head was parsed is not used."""
    monkeypatch.setenv(PURE_PYTHON_ENV, pure_python)
    path = _write(tmp_path / "t.json", _events(12_000))
    assert trace_split.start(path, 1 << 30)
    trace_split.parse_head(path)
    split = trace_split.take(path)
    assert split is not None
    _assert_same(split, parse_trace_file(path))
    assert trace_split.start(path, 1 << 30)
    trace_split.parse_head(path)
    os.utime(path, ns=(1, 1))
    assert trace_split.take(path) is None
    trace_split.parse_head(path)  # nothing was started for it: nothing to do


def _spilled_tables(parsed: ParsedTrace) -> dict[str, pa.Table]:
    """A spilled pass's tables as they stand in its pieces (file order, dictionaries as they grew)."""
    assert parsed.spilled is not None
    try:
        return {kind: t.to_table() for kind, t in parsed.spilled.items()}
    finally:
        for t in parsed.spilled.values():
            t.close()


@pytest.mark.parametrize("ahead", [False, True])
@pytest.mark.parametrize("pure_python", ["0", "1"])
def test_a_streamed_split_gives_the_pieces_of_one_spilled_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ahead: bool, pure_python: str) -> None:
    """Above the in-memory size the head is spilled and the child's compressed pieces are added to
    it: the same pieces, dictionaries (in order of first use), counters and metadata as one spilled
    pass over the file; the progress only grows, to the file's size."""
    monkeypatch.setenv(PURE_PYTHON_ENV, pure_python)
    path = _write(tmp_path / "t.json", _events(12_000))
    size = path.stat().st_size
    assert trace_split.start(path, size - 1)
    seen: list[tuple[int, int]] = []
    if ahead:
        trace_split.parse_head(path, lambda d, t: seen.append((d, t)))
    assert trace_split.take(path) is None  # a streamed split is not taken whole (and is stopped)
    seen.clear()
    assert trace_split.start(path, size - 1)
    if ahead:
        trace_split.parse_head(path, lambda d, t: seen.append((d, t)))
    split = trace_split.take_spilled(path, lambda d, t: seen.append((d, t)))
    assert split is not None
    whole = parse_trace_file(path, spill=True)
    assert split.warnings == whole.warnings == []
    assert list(split.meta.items()) == list(whole.meta.items()) and split.n_events == whole.n_events
    assert split.counters is not None and whole.counters is not None and split.counters.equals(whole.counters)
    a, b = _spilled_tables(split), _spilled_tables(whole)
    for kind in a:
        assert a[kind].equals(b[kind]), kind
        for col in a[kind].column_names:
            if pa.types.is_dictionary(a[kind].schema.field(col).type):
                assert a[kind][col].chunk(0).dictionary.equals(b[kind][col].chunk(0).dictionary), (kind, col)
    assert a["events"].num_rows and a["memory"].num_rows and a["flows"].num_rows and split.counters.num_rows
    done = [d for d, _ in seen]
    assert done == sorted(done) and seen[-1] == (size, size) and {t for _, t in seen} == {size}


def test_a_streamed_split_falls_back_and_loads_the_same_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A streamed trace (above ``trace.IN_MEMORY_BYTES``) loads the same with a split, with a failed
    child (the whole spilled pass instead), and without a split."""
    from app.data import trace, trace_parse

    path = _write(tmp_path / "t.json", _events(8_000))
    monkeypatch.setattr(trace, "IN_MEMORY_BYTES", path.stat().st_size // 2)
    joined: list[int] = []
    real_join = trace_parse.join_spilled
    monkeypatch.setattr(trace_parse, "join_spilled", lambda *a: joined.append(1) or real_join(*a))
    assert trace.start_split_parse(path)
    split = load_trace(path, cache_dir=tmp_path / "c1")
    assert joined == [1]  # the split was used
    monkeypatch.setattr(trace_split, "_child", lambda *a: os._exit(3))
    assert trace_split.start(path, trace.IN_MEMORY_BYTES)
    assert trace_split.take_spilled(path) is None
    assert trace_split.start(path, trace.IN_MEMORY_BYTES)
    failed = load_trace(path, cache_dir=tmp_path / "c2")
    whole = load_trace(path, cache_dir=tmp_path / "c3")
    for name in TABLES:
        assert getattr(split, name).equals(getattr(whole, name)), name
        assert getattr(failed, name).equals(getattr(whole, name)), name
    assert split.warnings == failed.warnings == whole.warnings == []


def test_a_cut_inside_a_string_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    evs = _events(6_000)
    evs[3_000]["name"] = 'odd}, {"name": "x'
    path = _write(tmp_path / "t.json", evs)
    data = path.read_bytes()
    inside = data.index(b'odd}, {') + 3  # a boundary that is not one: inside the name
    monkeypatch.setattr(trace_split, "_cut", lambda _p, _s, _share: (inside + 1, inside + 3))
    assert trace_split.start(path, 1 << 30)
    assert trace_split.take(path) is None  # the halves have warnings: not used
    assert trace_split.start(path, 1 << 30)
    t = load_trace(path, cache_dir=tmp_path / "cache")  # falls back to one pass: the same tables
    assert t.warnings == [] and t.n_events == parse_trace_file(path).n_events
    assert 'odd}, {"name": "x' in set(t.events["name"].astype(str))


def test_a_changed_file_or_a_failed_child_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "t.json", _events(3_000))
    assert trace_split.start(path, 1 << 30)
    os.utime(path, ns=(1, 1))
    assert trace_split.take(path) is None
    monkeypatch.setattr(trace_split, "_child", lambda *a: os._exit(3))
    assert trace_split.start(path, 1 << 30)
    assert trace_split.take(path) is None


def test_what_is_not_split(tmp_path: Path) -> None:
    plain = _write(tmp_path / "t.json", _events(2_000))
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(_events(2_000)), encoding="utf-8")
    assert not trace_split.start(gz, 1 << 30)  # compressed: streamed from the gzip
    assert not trace_split.start(bare, 1 << 30)  # a bare array of events
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not trace_split.start(plain, 1 << 30)  # another thread: no fork
    finally:
        stop.set()
        other.join()
    assert trace_split.take(plain) is None  # nothing was started


def test_no_split_when_switched_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = _write(tmp_path / "t.json", _events(2_000))
    monkeypatch.setenv(trace_split.SWITCH_ENV, "0")
    assert not trace_split.start(plain, 1 << 30)


def test_no_split_when_no_core_is_idle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Busy: the load average says so and as many threads run right now. An average that still
    counts a job that just ended (the threads running now are fewer) does not stop the split."""
    plain = _write(tmp_path / "t.json", _events(2_000))
    monkeypatch.setattr(os, "getloadavg", lambda: (2 - trace_split.IDLE_MARGIN, 0.0, 0.0))
    monkeypatch.setattr(trace_split, "_others_running", lambda: 2)
    assert not trace_split.start(plain, 1 << 30)
    monkeypatch.setattr(trace_split, "_others_running", lambda: 0)
    assert trace_split.start(plain, 1 << 30)
    trace_split.cancel_all()
    monkeypatch.setattr(os, "getloadavg", lambda: (0.5, 0.0, 0.0))  # idle on average, two threads busy now
    monkeypatch.setattr(trace_split, "_others_running", lambda: 2)
    assert trace_split.start(plain, 1 << 30)


def test_the_threads_running_now_are_read_from_proc() -> None:
    n = OTHERS_RUNNING()
    assert n == float("inf") if not os.path.exists("/proc/loadavg") else 0 <= n < 10_000


def test_an_unclaimed_child_is_reaped(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.json", _events(3_000))
    assert trace_split.start(path, 1 << 30)
    trace_split.cancel_all()  # as at exit; the fixture checks that no child is left


def _analyze_json(path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("TORCHSCOPE_CACHE", str(cache))
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["analyze", "--json", str(path)]) == 0
    return out.getvalue()


def test_analyze_json_is_the_same_with_and_without_the_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "t.json", _events(8_000))
    started: list[bool] = []
    real_start = trace_split.start

    def start(*a: Any) -> bool:
        started.append(real_start(*a))
        return started[-1]

    monkeypatch.setattr(trace_split, "start", start)
    split = _analyze_json(path, tmp_path / "c1", monkeypatch)
    assert started == [True]
    monkeypatch.setattr(trace_split, "_can_fork", lambda: False)
    whole = _analyze_json(path, tmp_path / "c2", monkeypatch)
    assert started == [True, False]
    assert split == whole
    assert _analyze_json(path, tmp_path / "c1", monkeypatch) == whole  # warm
