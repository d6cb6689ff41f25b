"""Property: ingest → cache → reload is lossless for the kept columns, whatever the events."""
from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.data.trace import load_trace

_names = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_event = st.fixed_dictionaries({
    "ph": st.just("X"), "cat": st.sampled_from(["cpu_op", "kernel", "cuda_runtime", "user_annotation", "weird"]),
    "name": _names, "pid": st.one_of(st.integers(0, 5), st.sampled_from(["Spans", "0"])),
    "tid": st.integers(0, 3), "ts": st.floats(0, 1e12, allow_nan=False), "dur": st.floats(0, 1e6, allow_nan=False),
    "args": st.fixed_dictionaries({}, optional={"External id": st.integers(0, 2**40), "correlation": st.integers(0, 99),
                                                "Input Dims": st.lists(st.lists(st.integers(0, 64), max_size=3),
                                                                       max_size=3)}),
})
_memory = st.fixed_dictionaries({
    "ph": st.just("i"), "name": st.just("[memory]"), "pid": st.just(1), "tid": st.just(1),
    "ts": st.floats(0, 1e12, allow_nan=False),
    "args": st.fixed_dictionaries({"Device Type": st.sampled_from([0, 1]), "Device Id": st.integers(-1, 3),
                                   "Bytes": st.integers(-2**31, 2**31), "Total Allocated": st.integers(0, 2**40),
                                   "Total Reserved": st.integers(0, 2**40)}),
})


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(st.one_of(_event, _memory), max_size=40))
def test_cache_roundtrip_is_lossless(tmp_path: Path, events: list[dict]) -> None:
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"traceEvents": events}))
    cache = tmp_path / "c"
    for p in cache.rglob("*"):
        if p.is_file():
            p.unlink()
    fresh = load_trace(f, cache_dir=cache)
    again = load_trace(f, cache_dir=cache)
    assert again.from_cache and not fresh.from_cache
    for name in ("events", "memory", "flows", "counters", "threads"):
        a, b = getattr(fresh, name), getattr(again, name)
        assert a.equals(b), name
    xs = sorted((e["ts"], -e["dur"], e["name"]) for e in events if e["ph"] == "X")
    got = list(zip(fresh.events["ts_us"], -fresh.events["dur_us"], fresh.events["name"].astype(str)))
    assert [x[:2] for x in got] == [x[:2] for x in xs]
    assert sorted(n for *_, n in got) == sorted(n for *_, n in xs)
    assert len(fresh.memory) == sum(e["ph"] == "i" for e in events)
