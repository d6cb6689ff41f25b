"""How busy the machine was during each run of a comparison, from the agent's system samples (analysis layer).

The bootstrap interval of the step-time ratio only sees step-to-step noise inside each run. When
the machine was shared, run-to-run differences in CPU contention move the whole distribution of
one run, and two seeds of the same config can come out "1.8× faster". The agent samples, about
once a second, the run's own CPU use (``cpu_percent`` of the process and ``children_cpu_percent``
of its workers, 100 = one CPU) and the whole machine's (``system_cpu_percent``, 100 = every CPU
busy). From the medians of those samples:

* ``other_cpus``: CPUs used by other processes = system share × CPU count − the run's own use;
* a warning when the two runs saw clearly different contention (``other_cpus`` differs by at
  least ``max(0.5, 25 % of the CPUs)``), or when a run competed for a saturated machine (median
  machine CPU ≥ ``SATURATED_PERCENT`` with other processes using at least 25 % of the CPUs).

It is given only with a faster/slower step-time verdict (a difference is what needs confirming)
and does not change the verdict: it says the verdict may reflect the machine, and to re-run both.
Without a CPU count (older manifests) only the machine-wide percentages are compared (a
difference of at least 25 points). Documented in docs/compare.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from profiler_agent.runformat import Manifest

__all__ = ["SATURATED_PERCENT", "MachineLoad", "compute_machine_load", "load_warning"]

SATURATED_PERCENT = 90.0
_MIN_SAMPLES = 3


@dataclass(frozen=True)
class MachineLoad:
    """Medians over a run's system samples (see the module docstring)."""

    samples: int
    cpus: int | None
    system_cpu_percent: float  # whole machine, 100 = all CPUs busy
    own_cpus: float  # CPUs the run used (its processes and their children)
    other_cpus: float | None  # CPUs other processes used; None without a CPU count

    def describe(self) -> str:
        if self.other_cpus is None or self.cpus is None:
            return f"machine CPU {self.system_cpu_percent:.0f} %"
        return (f"machine CPU {self.system_cpu_percent:.0f} %, other processes {self.other_cpus:.1f} of "
                f"{self.cpus} CPUs, this run {self.own_cpus:.1f}")

    def to_json(self) -> dict[str, Any]:
        return {"samples": self.samples, "cpus": self.cpus, "system_cpu_percent": self.system_cpu_percent,
                "own_cpus": self.own_cpus, "other_cpus": self.other_cpus}


def _cpu_count(manifest: Manifest | None) -> int | None:
    for d in getattr(manifest, "devices", ()) or ():
        if isinstance(d, dict) and d.get("type") == "cpu":
            n = d.get("count")
            if isinstance(n, int) and n > 0:
                return n
    return None


def _num(df: pd.DataFrame, col: str) -> pd.Series:
    return pd.to_numeric(df[col], errors="coerce") if col in df.columns else pd.Series(0.0, index=df.index)


def compute_machine_load(system: pd.DataFrame | None, manifest: Manifest | None = None) -> MachineLoad | None:
    """Medians of a run's system samples (``system.jsonl``), or None when it has fewer than 3
    samples with ``system_cpu_percent``. Samples of several ranks taken in the same second are
    one machine sample (their own CPU use is summed)."""
    if system is None or len(system) == 0 or "system_cpu_percent" not in system.columns:
        return None
    s = pd.DataFrame({"time": _num(system, "time"), "system": _num(system, "system_cpu_percent"),
                      "own": _num(system, "cpu_percent").fillna(0.0) + _num(system, "children_cpu_percent").fillna(0.0)})
    s = s[np.isfinite(s["system"].to_numpy(float, na_value=np.nan))]
    if "time" in system.columns and s["time"].notna().all():
        s = s.groupby(np.floor(s["time"]), sort=True).agg(system=("system", "median"), own=("own", "sum"))
    if len(s) < _MIN_SAMPLES:
        return None
    cpus = _cpu_count(manifest)
    sys_pct = float(s["system"].median())
    own = float(s["own"].median()) / 100.0
    other = None
    if cpus is not None:
        other = float(np.median(np.clip(s["system"].to_numpy(float) / 100.0 * cpus - s["own"].to_numpy(float) / 100.0,
                                         0.0, None)))
    return MachineLoad(samples=len(s), cpus=cpus, system_cpu_percent=sys_pct, own_cpus=own, other_cpus=other)


def load_warning(a: MachineLoad | None, b: MachineLoad | None, labels: tuple[str, str]) -> str:
    """A caution when the machine's load may explain a step-time difference, else ""."""
    if a is None or b is None:
        return ""
    both = f"{labels[0]}: {a.describe()}; {labels[1]}: {b.describe()}"
    if a.other_cpus is not None and b.other_cpus is not None and a.cpus and b.cpus:
        cpus = max(a.cpus, b.cpus)
        gap = max(0.5, 0.25 * cpus)
        if abs(a.other_cpus - b.other_cpus) >= gap:
            busier = labels[0] if a.other_cpus > b.other_cpus else labels[1]
            return (f"the machine was busier during {busier}: other processes used {a.other_cpus:.1f} vs "
                    f"{b.other_cpus:.1f} of {cpus} CPUs ({both}); the confidence interval cannot see run-to-run "
                    "load, re-run both to confirm the step-time verdict")
        saturated = [lbl for lbl, m in zip(labels, (a, b), strict=True)
                     if m.system_cpu_percent >= SATURATED_PERCENT and (m.other_cpus or 0) >= 0.25 * cpus]
        if saturated:
            who = "both runs" if len(saturated) == 2 else saturated[0]
            return (f"the machine's CPUs were saturated during {who}, with other processes competing ({both}); "
                    "step times include contention the confidence interval cannot see, re-run both on an idle "
                    "machine to confirm the step-time verdict")
        return ""
    if math.isfinite(a.system_cpu_percent) and math.isfinite(b.system_cpu_percent) \
            and abs(a.system_cpu_percent - b.system_cpu_percent) >= 25.0:
        busier = labels[0] if a.system_cpu_percent > b.system_cpu_percent else labels[1]
        return (f"the machine was busier during {busier} ({both}); re-run both to confirm the step-time verdict")
    return ""
