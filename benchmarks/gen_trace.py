"""Generate large Kineto traces by replicating the real profiled steps of a shared trace (benchmark tool).

    python benchmarks/gen_trace.py --mb 100 --out /tmp/bench/trace_100mb.json

Every ``ProfilerStep`` of the source (default: ../shared/data/traces/gpu_before_after/control.json.gz,
a real A100 training job) is copied again and again, shifted in time, with fresh External ids,
correlation ids and flow ids, until the uncompressed file reaches the requested size. The header
(deviceProperties, distributedInfo) and the metadata events are kept, so the result is a
well-formed trace that torch-tb-profiler, HTA and Perfetto accept.
"""
from __future__ import annotations

import argparse
import gzip
from pathlib import Path

import orjson

DEFAULT_SOURCE = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "traces" / "gpu_before_after" / "control.json.gz"
_ID_ARGS = ("External id", "external id", "correlation", "Record function id", "Ev Idx")


def _load(path: Path) -> dict:
    data = path.read_bytes()
    return orjson.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def _window(events: list[dict]) -> tuple[float, float]:
    steps = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    return min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps)


def generate(source: Path, out: Path, megabytes: float) -> int:
    """Write the trace; return the number of events."""
    doc = _load(source)
    events = doc.pop("traceEvents")
    lo, hi = _window(events)
    period = hi - lo
    body = [e for e in events if e.get("ph") != "M" and lo <= float(e.get("ts", lo - 1)) < hi]
    meta = [e for e in events if e.get("ph") == "M"]
    max_id = max((int(v) for e in body for k, v in (e.get("args") or {}).items() if k in _ID_ARGS
                  and isinstance(v, int)), default=0) + 1
    max_flow = max((int(e["id"]) for e in body if isinstance(e.get("id"), int)), default=0) + 1
    target = int(megabytes * 1e6)
    n = 0
    with out.open("wb") as f:
        head = orjson.dumps(doc, option=orjson.OPT_INDENT_2)[:-2]  # drop the closing "\n}"
        f.write(head + b',\n  "traceEvents": [\n')
        first = True
        for e in meta:
            f.write((b"" if first else b",\n") + b"  " + orjson.dumps(e))
            first, n = False, n + 1
        rep = 0
        while f.tell() < target:
            shift, id_shift, flow_shift = rep * period, rep * max_id, rep * max_flow
            for e in body:
                if n % 1000 == 0 and f.tell() >= target:
                    break
                c = dict(e)
                c["ts"] = e["ts"] + shift
                args = e.get("args")
                if args:
                    c["args"] = {k: (v + id_shift if k in _ID_ARGS and isinstance(v, int) and v > 0 else v)
                                 for k, v in args.items()}
                if isinstance(e.get("id"), int):
                    c["id"] = e["id"] + flow_shift
                if str(c.get("name", "")).startswith("ProfilerStep#"):
                    c["name"] = f"ProfilerStep#{rep * 1000 + int(str(e['name']).split('#')[1])}"
                f.write(b",\n  " + orjson.dumps(c))
                n += 1
            rep += 1
        f.write(b'\n  ],\n  "traceName": "generated"\n}\n')
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, required=True, help="uncompressed size in MB (1e6 bytes)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    args = ap.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    n = generate(args.source, args.out, args.mb)
    print(f"{args.out}: {args.out.stat().st_size / 1e6:.1f} MB, {n:,} events")


if __name__ == "__main__":
    main()
