"""metrics.jsonl writer that never forces a device sync for a loss it has not needed yet (agent layer).

Values may be tensors (the loss passed to ``backward()``, a tensor learning rate, a gradient
norm). CPU tensors are read at once (no sync to wait for); a record holding device tensors is
kept back and read together with later ones, one sync per flush, when enough have gathered,
after ``flush_interval_s``, or at close. Records are written in step order either way.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from .failures import FailureLog
from .runformat import JsonlWriter, layout

__all__ = ["MetricsLog"]


class MetricsLog:
    """Appends one JSON object per record to metrics.jsonl, flushed line by line."""

    def __init__(
        self,
        run_dir: Path,
        failures: FailureLog,
        *,
        rank: int,
        t0: float,
        max_pending: int = 32,
        flush_interval_s: float = 2.0,
    ) -> None:
        self._path = run_dir / layout.METRICS
        self._failures = failures
        self._rank = rank
        self._t0 = t0
        self._max_pending = max_pending
        self._flush_interval = flush_interval_s
        self._pending: list[dict[str, Any]] = []
        self._last_flush = time.monotonic()
        self._writer: JsonlWriter | None = None
        self._broken = False
        self.written = 0

    def append(self, record: Mapping[str, Any]) -> None:
        """Queue a record (``time`` and ``rank`` are added); write it as soon as it is cheap to."""
        row = {"step": record.get("step"), "time": round(time.time() - self._t0, 6), "rank": self._rank}
        row.update(record)
        self._pending.append(row)
        device_values = any(isinstance(v, torch.Tensor) and v.device.type != "cpu" for v in row.values())
        if (not device_values and len(self._pending) == 1) or len(self._pending) >= self._max_pending \
                or time.monotonic() - self._last_flush >= self._flush_interval:
            self.flush()

    def flush(self) -> None:
        """Read every pending tensor (one sync per device) and write the pending records."""
        pending, self._pending = self._pending, []
        self._last_flush = time.monotonic()
        if not pending:
            return
        with self._failures.guard("metrics values"):
            _resolve_tensors(pending)
        if self._broken:
            return
        try:
            if self._writer is None:
                self._writer = JsonlWriter(self._path)
            for row in pending:
                self._writer.write(_plain(row))
                self.written += 1
        except Exception as e:  # noqa: BLE001 - disk full, folder gone: record and stop trying
            self._broken = True
            self._failures.record("metrics write", e)

    def close(self) -> None:
        self.flush()
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _resolve_tensors(rows: list[dict[str, Any]]) -> None:
    """Replace tensors in ``rows`` by Python numbers, stacking per device to sync once."""
    places: dict[torch.device, list[tuple[dict[str, Any], str]]] = {}
    for row in rows:
        for key, value in row.items():
            if isinstance(value, torch.Tensor):
                places.setdefault(value.device, []).append((row, key))
    for device, spots in places.items():
        if device.type == "cpu":  # no sync to save: read each directly (cheaper than stacking)
            for row, key in spots:
                row[key] = float(row[key].detach().reshape(()).item())
            continue
        with torch.no_grad():
            values = torch.stack([row[key].detach().reshape(()).to(torch.float64) for row, key in spots])
            numbers = values.cpu().tolist()
        for (row, key), number in zip(spots, numbers, strict=True):
            row[key] = number


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    # A value that is still a tensor (resolution failed) would be written as its repr: drop it.
    return {k: v for k, v in row.items() if not isinstance(v, torch.Tensor)}
