"""Writes small.snapshot.pickle: a hand-made CUDA allocator snapshot in torch's documented
format (torch/cuda/memory.py, ``Snapshot``/``Segment``/``Block``/``TraceEntry``), since no GPU
is available to record one. Run: ``python tests/data/snapshots/make_snapshot.py``.

Device 0 has three segments: a 20 MiB one allocated inside the trace (weights, an activation,
a 6 MiB temporary freed again, a 2 MiB buffer), a 2 MiB one allocated inside the trace (a
512 B tensor allocated and freed) and a 2 MiB one from before the trace started, which holds
a 1 MiB tensor the trace never saw. At the end: 15 MiB active, 24 MiB reserved.
"""
from __future__ import annotations

import pickle
from pathlib import Path

MiB = 2**20
SEG1, SEG2, SEG3 = 0x7F00_0000_0000, 0x7F00_4000_0000, 0x7F00_8000_0000


def frames(*where: tuple[str, int, str]) -> list[dict[str, object]]:
    """Innermost first, as torch records them, with the allocator frames torch adds on top."""
    internal = [{"filename": "??", "line": 0, "name": "torch::unwind::unwind()"},
                {"filename": "/pytorch/c10/cuda/CUDACachingAllocator.cpp", "line": 1200, "name": "malloc"}]
    return internal + [{"filename": f, "line": line, "name": n} for f, line, n in where]


W = frames(("/usr/lib/python3/site-packages/torch/nn/modules/linear.py", 106, "__init__"),
           ("/home/me/train.py", 42, "build_model"), ("/home/me/train.py", 88, "<module>"))
ACT = frames(("/usr/lib/python3/site-packages/torch/nn/functional.py", 1500, "relu"),
             ("/home/me/model.py", 17, "forward"), ("/home/me/train.py", 61, "train_step"))
TMP = frames(("/usr/lib/python3/site-packages/torch/_tensor.py", 40, "matmul"),
             ("/home/me/model.py", 23, "forward"), ("/home/me/train.py", 61, "train_step"))
BUF = frames(("/home/me/train.py", 70, "train_step"))
OLD = frames(("/home/me/data.py", 9, "to_device"))


def entry(action: str, addr: int, size: int, t: int, fr: list[dict[str, object]] | None = None) -> dict[str, object]:
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": 1_700_000_000_000_000 + t,
            "frames": fr or []}


def build() -> dict[str, object]:
    trace = [
        entry("segment_alloc", SEG1, 20 * MiB, 0),
        entry("alloc", SEG1, 8 * MiB, 10, W),
        entry("alloc", SEG1 + 8 * MiB, 4 * MiB, 20, ACT),
        entry("segment_alloc", SEG2, 2 * MiB, 30),
        entry("alloc", SEG2, 512, 35, BUF),
        entry("alloc", SEG1 + 12 * MiB, 6 * MiB, 40, TMP),
        entry("free_requested", SEG1 + 12 * MiB, 6 * MiB, 50, TMP),
        entry("free_completed", SEG1 + 12 * MiB, 6 * MiB, 51, TMP),
        entry("free_requested", SEG2, 512, 60, BUF),
        entry("free_completed", SEG2, 512, 61, BUF),
        entry("alloc", SEG1 + 12 * MiB, 2 * MiB, 70, BUF),
    ]

    def block(addr: int, size: int, state: str, fr: list[dict[str, object]] | None = None) -> dict[str, object]:
        b: dict[str, object] = {"address": addr, "size": size, "requested_size": size if state != "inactive" else 0,
                                "state": state}
        if fr is not None:
            b["frames"] = fr
        return b

    segments = [
        {"device": 0, "address": SEG1, "total_size": 20 * MiB, "stream": 0, "segment_type": "large",
         "segment_pool_id": (0, 0), "allocated_size": 14 * MiB, "active_size": 14 * MiB, "requested_size": 14 * MiB,
         "blocks": [block(SEG1, 8 * MiB, "active_allocated", W), block(SEG1 + 8 * MiB, 4 * MiB, "active_allocated", ACT),
                    block(SEG1 + 12 * MiB, 2 * MiB, "active_allocated", BUF), block(SEG1 + 14 * MiB, 6 * MiB, "inactive")]},
        {"device": 0, "address": SEG2, "total_size": 2 * MiB, "stream": 0, "segment_type": "small",
         "segment_pool_id": (0, 0), "allocated_size": 0, "active_size": 0, "requested_size": 0,
         "blocks": [block(SEG2, 2 * MiB, "inactive")]},
        {"device": 0, "address": SEG3, "total_size": 2 * MiB, "stream": 0, "segment_type": "large",
         "segment_pool_id": (0, 0), "allocated_size": 1 * MiB, "active_size": 1 * MiB, "requested_size": 1 * MiB,
         "blocks": [block(SEG3, 1 * MiB, "active_allocated", OLD), block(SEG3 + MiB, MiB, "inactive")]},
    ]
    return {"segments": segments, "device_traces": [trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1}}


if __name__ == "__main__":
    out = Path(__file__).with_name("small.snapshot.pickle")
    out.write_bytes(pickle.dumps(build(), protocol=4))
    print(f"wrote {out}")
