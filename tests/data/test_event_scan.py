"""The C accelerator (app.data.event_scan) reads exactly what the pure-Python parse reads.

The one property that matters: whenever the scanner reads a piece, msgspec's typed decode reads
it too, and the tables are equal, table by table (values, nulls, dictionaries in order). Where
the scanner gives up, the Python path reads the piece, so giving up is always safe. Checked on
every trace of the test data and ../shared/data, on generated events of every field type the
structs accept or refuse, and on real event bytes with random damage.
"""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.data import event_scan, trace_parse
from app.data.event_scan import PURE_PYTHON_ENV, ScannedEvents, scan_tables
from app.data.trace_columns import columns_from_events
from app.data.trace_decode import Undecodable, decode_array
from app.data.trace_parse import parse_trace_file

pytestmark = pytest.mark.skipif(not event_scan.accelerated(), reason="the C accelerator is not built here")

TEST_TRACES = sorted(Path(__file__).resolve().parents[1].rglob("*.json.gz"))
TABLE_KINDS = ("events", "memory", "flows", "threads")


def _python_tables(data: bytes) -> tuple[dict[str, pa.Table], bool, int] | None:
    """What the pure-Python path makes of the JSON array ``data`` (None: it does not decode)."""
    warnings: list[str] = []
    try:
        evs = decode_array(data, warnings, Path("x"))
    except Undecodable:
        return None
    if warnings:  # read leniently (odd types): the scanner must have given up
        return None
    tables, has_counters = columns_from_events(evs)
    return tables, has_counters, len(evs)


def _assert_same(data: bytes) -> ScannedEvents | None:
    """Scan ``data``; when the scanner reads it, the Python path must read the same tables."""
    scanned = scan_tables(data)
    if scanned is None:
        return None
    expected = _python_tables(data)
    assert expected is not None, f"the scanner read what msgspec refuses: {data[:300]!r}"
    tables, has_counters, n = expected
    assert (scanned.n, scanned.has_counters) == (n, has_counters)
    for kind in TABLE_KINDS:
        got, want = scanned.tables[kind], tables[kind]
        assert got.schema == want.schema, kind
        assert got.equals(want), f"{kind} differs for {data[:300]!r}"
        for name in got.column_names:  # dictionaries in the same order, not only the same values
            g, w = got[name].combine_chunks(), want[name].combine_chunks()
            if pa.types.is_dictionary(g.type):
                assert g.dictionary.equals(w.dictionary) and g.indices.equals(w.indices), (kind, name)
            if pa.types.is_floating(g.type):  # bit for bit: Arrow's equals takes -0.0 for 0.0
                assert (g.fill_null(0).to_numpy().view("u8") == w.fill_null(0).to_numpy().view("u8")).all(), (kind, name)
    return scanned


# ---------------------------------------------------------------- whole traces


def _trace_files(shared: Path | None) -> list[Path]:
    files = list(TEST_TRACES)
    if shared is not None:
        files += sorted((shared / "traces").rglob("*.json.gz"))
    return files


@pytest.fixture(scope="module")
def shared_traces() -> Path | None:
    from tests.conftest import SHARED_DATA

    return SHARED_DATA if SHARED_DATA.is_dir() else None


class _Counting:
    """The scanner, counting the pieces it read."""

    def __init__(self) -> None:
        self.real, self.read = event_scan._event_scan.scan, 0

    def __call__(self, data: Any) -> Any:
        out = self.real(data)
        self.read += out is not None
        return out


def _events_of(f: Path) -> list[dict[str, Any]]:
    with gzip.open(f) as src:
        doc = json.loads(src.read())
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def test_every_trace_parses_to_the_same_tables_with_and_without_the_accelerator(
        shared_traces: Path | None, monkeypatch: pytest.MonkeyPatch) -> None:
    files = _trace_files(shared_traces)
    assert len(files) >= 5
    read_by_c = 0
    for f in files:
        monkeypatch.setenv(PURE_PYTHON_ENV, "1")
        pure = parse_trace_file(f)
        monkeypatch.setenv(PURE_PYTHON_ENV, "0")
        scanned = _Counting()
        monkeypatch.setattr(event_scan._event_scan, "scan", scanned)
        fast = parse_trace_file(f)
        monkeypatch.undo()
        read_by_c += scanned.read
        assert (fast.meta, fast.warnings, fast.n_events) == (pure.meta, pure.warnings, pure.n_events), f
        for kind in (*TABLE_KINDS, "counters"):
            assert getattr(fast, kind).equals(getattr(pure, kind)), (f, kind)
    assert read_by_c >= len(files) // 2  # the scanner did read real traces, not only give up


def test_each_event_of_the_real_traces_reads_alike_on_its_own(shared_traces: Path | None) -> None:
    """Every event of the test traces as a piece of its own: the scanner reads it as msgspec does,
    or gives up; and it reads the common ones (the real traces' X, flow and metadata events)."""
    read = 0
    for f in _trace_files(shared_traces)[:6]:
        for ev in _events_of(f)[:3000]:
            read += _assert_same(b"[" + json.dumps(ev).encode() + b"]") is not None
    assert read > 1000


# ---------------------------------------------------------------- generated events

_INTS = st.integers(min_value=-(2 ** 63), max_value=2 ** 63 - 1)
_ANY = st.one_of(st.none(), st.booleans(), _INTS, st.integers(min_value=2 ** 63, max_value=2 ** 70),
                 st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6),
                 st.lists(st.integers(0, 9), max_size=3), st.just({"a": [1, {"b": None}]}))
_NAMES = st.sampled_from(["aten::mm", "ProfilerStep#3", "[memory]", "", "process_name", "thread_name",
                          "cudaLaunchKernel", 'say "hi"', "caf\u00e9", "tab\tname"])
_PHS = st.sampled_from(["X", "i", "I", "s", "f", "t", "M", "C", "B", "", "XX"])
_ARG_KEYS = ["External id", "external id", "correlation", "device", "stream", "Input Dims", "Input dims",
             "Input type", "bytes", "Bytes", "Total Allocated", "Total Reserved", "Addr", "Device Type",
             "Device Id", "Sequence number", "Fwd thread id", "name", "sort_index", "Call stack", "cbid"]


def _typical(key: str) -> st.SearchStrategy[Any]:
    if key in ("Input Dims", "Input dims"):
        return st.one_of(st.lists(st.lists(st.integers(0, 64), max_size=3), max_size=3), st.none())
    if key in ("Input type", "Call stack"):
        return st.one_of(st.lists(st.sampled_from(["float", "long int", ""]), max_size=3), st.text(max_size=5))
    if key == "name":
        return st.one_of(_NAMES, st.none())
    return st.one_of(_INTS, st.none())


@st.composite
def _event(draw: st.DrawFn) -> dict[str, Any]:
    odd = draw(st.integers(0, 9)) == 0  # one event in ten has a field of any JSON type
    ev: dict[str, Any] = {}
    for key, typical in (("ph", _PHS), ("name", st.one_of(_NAMES, st.none())), ("cat", st.one_of(_NAMES, st.none())),
                         ("pid", st.one_of(_INTS, st.sampled_from(["Spans", "1", ""]), st.none())),
                         ("tid", st.one_of(_INTS, st.sampled_from(["PyTorch Profiler", "stream 7"]), st.none())),
                         ("ts", st.one_of(st.floats(-1e18, 1e18), _INTS, st.none())),
                         ("dur", st.one_of(st.floats(0, 1e9), st.integers(0, 10 ** 12), st.none())),
                         ("id", st.one_of(_INTS, st.none()))):
        if draw(st.booleans()) or key in ("ph", "ts"):
            ev[key] = draw(_ANY if odd and draw(st.booleans()) else typical)
    if draw(st.booleans()):
        keys = draw(st.lists(st.sampled_from(_ARG_KEYS), max_size=6, unique=True))
        ev["args"] = {k: draw(_ANY if odd and draw(st.booleans()) else _typical(k)) for k in keys}
    return ev


@st.composite
def _json_array(draw: st.DrawFn) -> bytes:
    """A JSON array of events, written as Kineto writes them or compactly, sometimes with escapes."""
    evs = draw(st.lists(_event(), max_size=12))
    if draw(st.booleans()):
        return json.dumps(evs, indent=draw(st.sampled_from([None, 2])), ensure_ascii=draw(st.booleans())).encode()
    parts = []
    for ev in evs:
        fields = [f'"{k}": {json.dumps(v)}' for k, v in ev.items()]
        parts.append("{\n    " + ", ".join(fields) + "\n  }")
    return ("[\n  " + ",\n  ".join(parts) + "\n]").encode()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_json_array())
def test_generated_events_read_alike_or_the_scanner_gives_up(data: bytes) -> None:
    _assert_same(data)


def test_the_scanner_reads_the_usual_fields_and_gives_up_on_the_odd_ones() -> None:
    ok = b'[{"ph": "X", "name": "aten::mm", "pid": 1, "tid": "PyTorch Profiler", "ts": 1.5, "dur": 2,' \
         b' "args": {"External id": 3, "Input Dims": [[2, 3]], "Input type": ["float"], "Call stack": "a\\nb"}}]'
    assert _assert_same(ok) is not None
    numbers = ["-0", "0", "-0.0", "-0e0", "-1", "-9", "1", "10", "-10", "0.5", "-0.5", "1e3", "1E-3", "-2.5e+2",
               "1661203462598509", "9007199254740993", "9007199254740993.5", "123456789012345678", "0.1", "3.14159",
               "1212075548353.304", "-1212075548353.304", "0.000000000000000000001", "1.7976931348623157e308"]
    many = ", ".join(f'{{"ph": "X", "ts": {t}, "dur": {d}}}' for t, d in zip(numbers, reversed(numbers)))
    assert _assert_same(f"[{many}]".encode()) is not None  # bit for bit, each number as msgspec reads it
    rocm = b'[{"ph": "X", "args": {"stream": "0x0"}}, {"ph": "X", "args": {"stream": 7}}, {"ph": "X", "args": {"stream": "x"}}]'
    assert _assert_same(rocm) is not None  # ROCm's text streams, read as int(v, 0) as the Python path reads them
    for odd in (b'[{"ph": "X", "name": "caf\\u00e9"}]', b'[{"ph": "X", "name": "a\\"b"}]',
                b'[{"ph": "X", "pid": 1.0}]', b'[{"ph": "X", "ts": "12"}]', b'[{"ph": null}]', b'[{"args": null}]',
                b'[{"ph": "X", "ts": 1, "ts": 2}]', b'[{"ph": "X", "id": "7"}]', b'[{"ph": "X", "pid": true}]',
                b'[{"ph": "X", "args": {"correlation": 99999999999999999999}}]', b'[{"ph": "X"}, 5]', b'[{"ph": "X"},]',
                b'[{"ph": "X"}', b'[{"ph": "X", "name": "\xc3\xa9"}]', b'[{"ph": "X", "ts": 1e999}]',
                b'[{"ph": "X", "ts": 01}]', b'[{"ph": "X"}] x', b'[' + b'[' * 100 + b']' * 100 + b']'):
        assert scan_tables(odd) is None, odd
        _assert_same(odd)


def test_random_damage_to_real_event_bytes_never_reads_differently() -> None:
    """Bytes of real events with random bytes changed, cut or repeated (what a wrong cut or a damaged
    file gives): whenever the scanner reads the result, the Python path reads the same tables."""
    text = json.dumps(_events_of(TEST_TRACES[0])[:40], indent=2).encode()
    rng = random.Random(13)
    alphabet = b'{}[],:"\\ 0123456789.-eEnulltrfasXMs\n'
    read = 0
    for _ in range(1500):
        b = bytearray(text)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(b))
            how = rng.random()
            if how < 0.5:
                b[at] = rng.choice(alphabet)
            elif how < 0.75:
                del b[at:at + rng.randint(1, 20)]
            else:
                b[at:at] = b[rng.randrange(len(b)):][:rng.randint(1, 20)]
        read += _assert_same(bytes(b)) is not None
    assert read > 50  # damage in skipped or same-typed values still reads


def test_the_parse_uses_the_accelerator_unless_switched_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]}))
    calls = _Counting()
    monkeypatch.setattr(event_scan._event_scan, "scan", calls)
    parse_trace_file(f)
    assert calls.read == 1
    monkeypatch.setenv(PURE_PYTHON_ENV, "1")
    assert not event_scan.accelerated()
    parse_trace_file(f)
    assert calls.read == 1
    assert trace_parse.scan_tables is scan_tables
