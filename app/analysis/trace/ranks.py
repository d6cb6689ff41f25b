"""Cross-rank analysis: per-rank step summaries, straggler scores and the slowest rank's cause (analysis layer, pure).

Two steps, so that a worker can summarise its own rank and only the summary travels:

- ``summarize_rank(trace)`` reduces one rank's events to a small ``RankStepSummary``: per step its
  boundaries and breakdown (compute, communication, overlap, data loading, host), and each
  collective instance it took part in (name, step, entry and exit in the rank's own clock);
- ``rank_summary(per_rank)`` compares the summaries of all ranks: per rank step time, breakdown,
  clock offset and a **straggler score** in 0–1, and names the cause (data loading, compute, host)
  of a rank that is late. docs/trace-engine.md ("Ranks and stragglers") defines every number.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CollectiveArrival", "StepTimes", "RankStepSummary"]


@dataclass(frozen=True)
class CollectiveArrival:
    """One collective call on one rank, in that rank's own clock (µs).

    ``(step, name, index)`` identifies the same collective instance on every rank: ``index`` counts
    the calls of ``name`` within ``step`` (``step`` is None outside every step; ``index`` then counts
    over the trace). ``start_us`` is when the rank entered it (its arrival), ``end_us`` when it left.
    """

    name: str
    step: int | None
    index: int
    start_us: float
    end_us: float


@dataclass(frozen=True)
class StepTimes:
    """One step of one rank (µs, the rank's clock). ``compute_us`` is device work (kernels, copies)
    or, in a trace without device work, host ops; ``host_us`` is the rest of host overhead (runtime
    calls, plus host ops when the device does the compute); ``communication_us`` is collective time
    (kernels or host ops) not already counted as compute; ``overlap_us`` is compute and collective
    kernels running at the same time."""

    step: int
    start_us: float
    end_us: float
    compute_us: float
    communication_us: float
    overlap_us: float
    dataloader_us: float
    host_us: float
    other_us: float

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us


@dataclass(frozen=True)
class RankStepSummary:
    """What cross-rank analysis needs of one rank: its steps and its collective calls.

    Small (a few numbers per step and per collective) and picklable, so that parallel ingest sends
    this instead of events. ``device`` says whether ``compute_us`` is device time.
    """

    rank: int
    steps: tuple[StepTimes, ...]
    collectives: tuple[CollectiveArrival, ...]
    device: bool = False
