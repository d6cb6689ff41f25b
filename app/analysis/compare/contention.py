"""Did the two sides of a comparison compete for the machine differently? (analysis layer)

A step-time interval sees step-to-step noise only; a CPU hog during one run moves that run's
whole distribution. When the sides differ in contention beyond the thresholds below, the
headline verdict is ``inconclusive`` (compare_headline), never faster or slower.

Sources, in order:

1. **per-step** ``contention`` (share 0–1 of the machine's CPU capacity used by processes that
   are not the job) and ``steal`` (share stolen by the hypervisor) that the agent writes on each
   metrics line; a step's interference is contention + steal, over the steady-state steps.
   The sides differ when the mean interference (weighted by step time) differs by at least
   ``CONTENTION_GAP`` (5 % of the machine: 0.1 CPU on 2 cores), or when the share of time in
   *contended* blocks (blocks of consecutive steps lasting ``BLOCK_S`` = 0.5 s whose interference
   is ≥ ``CONTENDED_STEP``, a quarter of the machine) differs by at least ``CONTENDED_SHARE_GAP``
   (10 % of the time). Blocks, not single steps: ``/proc/stat`` counts 10 ms ticks, so one short
   step's share is 0 or a whole tick; half a second holds 50 ticks per CPU. A CPU hog on one core of a 2-core machine is an interference of about
   0.5 on the steps it overlaps, so it trips the first rule once it covers a tenth of the steps
   and the second one from about the same point; a quiet machine shows means of about 0.00–0.03
   on both sides.
2. **system samples** (older runs, app.analysis.compare.machine_load): other processes' CPUs as a share
   of the machine; the sides differ when that share differs by at least
   ``SYSTEM_CONTENTION_GAP`` (15 %: 0.3 CPU on 2 cores). The samples are about once a second
   and taken apart from the job's own CPU use, so the gap is wider than the per-step one.
3. **none** (imported traces, runs without either): nothing is declared inconclusive; the verdict
   is judged by the usual rule (with one run per side, the run-to-run margin) and a reason says
   contention was not measured.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from app.analysis.compare.machine_load import MachineLoad

__all__ = ["CONTENTION_GAP", "CONTENDED_STEP", "CONTENDED_SHARE_GAP", "SYSTEM_CONTENTION_GAP", "MIN_CONTENTION_STEPS", "BLOCK_S",
           "ContentionCheck", "SideContention", "side_contention", "check_contention"]

CONTENTION_GAP = 0.05
CONTENDED_STEP = 0.25
CONTENDED_SHARE_GAP = 0.10
SYSTEM_CONTENTION_GAP = 0.15
MIN_CONTENTION_STEPS = 3
BLOCK_S = 0.5


@dataclass(frozen=True)
class SideContention:
    """Interference of one side over its steady-state steps: ``mean`` (contention + steal, share
    of the machine, time-weighted), ``contended`` (share of the time in blocks of BLOCK_S with
    interference ≥ CONTENDED_STEP), ``steps``."""

    mean: float
    contended: float
    steps: int


@dataclass(frozen=True)
class ContentionCheck:
    """The outcome: ``inconclusive`` when the sides differ, ``reason`` in words ("" when there is
    nothing to say), ``source`` ("per-step", "system samples" or "none")."""

    inconclusive: bool = False
    reason: str = ""
    source: str = "none"
    baseline: SideContention | None = None
    candidate: SideContention | None = None


def _side_values(tables: Sequence[pd.DataFrame]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(interference, step time) of the kept steps with a contention value, per run, in step order."""
    out = []
    for t in tables:
        if len(t) == 0 or "contention" not in t.columns:
            continue
        kept = t[t["kept"].astype(bool)]
        c = pd.to_numeric(kept["contention"], errors="coerce").to_numpy(float)
        s = pd.to_numeric(kept["steal"], errors="coerce").to_numpy(float) if "steal" in kept.columns \
            else np.zeros(len(kept))
        v = c + np.where(np.isfinite(s), s, 0.0)
        w = pd.to_numeric(kept["step_time_s"], errors="coerce").to_numpy(float)
        ok = np.isfinite(v) & np.isfinite(w) & (w > 0)
        out.append((v[ok], w[ok]))
    return out


def _blocks(v: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Consecutive steps merged until a block lasts BLOCK_S: (time-weighted interference, time)."""
    values, times, acc_v, acc_w = [], [], 0.0, 0.0
    for x, t in zip(v, w, strict=True):
        acc_v, acc_w = acc_v + x * t, acc_w + t
        if acc_w >= BLOCK_S:
            values.append(acc_v / acc_w)
            times.append(acc_w)
            acc_v = acc_w = 0.0
    if acc_w > 0 and times:  # the short tail joins the last block
        values[-1] = (values[-1] * times[-1] + acc_v) / (times[-1] + acc_w)
        times[-1] += acc_w
    elif acc_w > 0:
        values, times = [acc_v / acc_w], [acc_w]
    return np.array(values), np.array(times)


def side_contention(tables: Sequence[pd.DataFrame]) -> SideContention | None:
    """Interference over the kept steps of a side's step tables (one per run), or None when
    fewer than MIN_CONTENTION_STEPS kept steps carry ``contention``. The mean and the contended
    share are weighted by time (the agent's per-step share is of the step's wall time × CPUs,
    so the time-weighted mean is the run's share), and the share is of blocks of BLOCK_S."""
    runs = _side_values(tables)
    n = sum(len(v) for v, _ in runs)
    if n < MIN_CONTENTION_STEPS:
        return None
    v = np.concatenate([v for v, _ in runs])
    w = np.concatenate([w for _, w in runs])
    blocks = [_blocks(bv, bw) for bv, bw in runs if len(bv)]
    bv = np.concatenate([b for b, _ in blocks])
    bw = np.concatenate([t for _, t in blocks])
    return SideContention(mean=float(np.sum(v * w) / np.sum(w)),
                          contended=float(np.sum(bw * (bv >= CONTENDED_STEP)) / np.sum(bw)), steps=n)


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def _per_step(a: SideContention, b: SideContention, labels: tuple[str, str]) -> ContentionCheck:
    both = (f"other processes and steal took {_pct(a.mean)} of the machine during {labels[0]}'s steady-state steps "
            f"and {_pct(b.mean)} during {labels[1]}'s; time in contended blocks {_pct(a.contended)} vs {_pct(b.contended)}")
    if abs(a.mean - b.mean) >= CONTENTION_GAP or abs(a.contended - b.contended) >= CONTENDED_SHARE_GAP:
        busier = labels[0] if (a.mean, a.contended) > (b.mean, b.contended) else labels[1]
        return ContentionCheck(True, f"the machine was busier during {busier} ({both}; the limits are "
                                     f"{_pct(CONTENTION_GAP)} mean and {_pct(CONTENDED_SHARE_GAP)} of the time "
                                     "contended); re-run both on a quiet machine or use interleaved replicates",
                               "per-step", a, b)
    return ContentionCheck(False, "", "per-step", a, b)


def _system(a: MachineLoad, b: MachineLoad, labels: tuple[str, str]) -> ContentionCheck:
    sa, sb = a.other_cpus / a.cpus, b.other_cpus / b.cpus  # type: ignore[operator]
    if abs(sa - sb) >= SYSTEM_CONTENTION_GAP:
        busier = labels[0] if sa > sb else labels[1]
        return ContentionCheck(True, f"the machine was busier during {busier}: other processes used "
                                     f"{a.other_cpus:.1f} of {a.cpus} CPUs during {labels[0]} and {b.other_cpus:.1f} "
                                     f"of {b.cpus} during {labels[1]} (system samples; the limit is a difference of "
                                     f"{_pct(SYSTEM_CONTENTION_GAP)} of the machine); re-run both on a quiet machine "
                                     "or use interleaved replicates", "system samples")
    return ContentionCheck(False, "", "system samples")


def check_contention(tables: tuple[Sequence[pd.DataFrame], Sequence[pd.DataFrame]],
                     loads: tuple[MachineLoad | None, MachineLoad | None],
                     labels: tuple[str, str]) -> ContentionCheck:
    """Compare the two sides' contention (module docstring); symmetric in the sides."""
    a, b = side_contention(tables[0]), side_contention(tables[1])
    if a is not None and b is not None:
        return _per_step(a, b, labels)
    la, lb = loads
    if la is not None and lb is not None and la.other_cpus is not None and lb.other_cpus is not None \
            and la.cpus and lb.cpus:
        return _system(la, lb, labels)
    missing = [lbl for lbl, s, ld in zip(labels, (a, b), loads, strict=True) if s is None and ld is None]
    if not missing:
        return ContentionCheck(False, "contention was measured differently on the two sides (per step on one, "
                                      "system samples on the other): not compared")
    return ContentionCheck(False, f"contention not measured for {' and '.join(missing)}: the contention check was "
                                  "skipped", "none")
