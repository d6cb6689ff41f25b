"""A sweep's search space, its trials' commands and their objective (analysis layer, pure).

Syntax (``torchscope sweep``, docs/sweep.md):

- ``--grid NAME=V1,V2,...``: the grid is every combination of the listed values, in order.
- ``--param NAME=KIND:ARGS`` for ``--random N`` and ``--optuna N``:
  ``loguniform:LOW:HIGH`` (learning rates), ``uniform:LOW:HIGH``, ``int:LOW:HIGH`` (inclusive),
  ``choice:A,B,C``. A ``--grid`` given with them is a ``choice``.
- The command holds ``{NAME}`` placeholders; every placeholder needs a parameter and every
  parameter a placeholder.

Values are numbers where they read as numbers (``32`` → int, ``0.1`` → float), else strings.
"""
from __future__ import annotations

import math
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.errors import UsageError

__all__ = [
    "KINDS",
    "OBJECTIVE_REDUCTIONS",
    "TIME_PER_SAMPLE",
    "Param",
    "parse_grid",
    "parse_param",
    "parse_point",
    "expand_grid",
    "sample_random",
    "fill_command",
    "check_placeholders",
    "objective_series",
    "compute_objective",
    "Value",
]

Value = int | float | str
KINDS = ("loguniform", "uniform", "int", "choice")
# How a metric's values over the run become one number: best is min or max by direction.
OBJECTIVE_REDUCTIONS = ("best", "last", "median")
# A derived objective: step_time_s / samples of each step (the job logs ``samples`` per step).
TIME_PER_SAMPLE = "time_per_sample_s"
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.-]*)\}")


@dataclass(frozen=True)
class Param:
    """One dimension of the space: a distribution (``low``/``high``) or a list of ``choices``."""

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    choices: tuple[Value, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "low": self.low, "high": self.high,
                "choices": list(self.choices)}


def _value(text: str) -> Value:
    text = text.strip()
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            continue
    return text


def _split(spec: str, flag: str) -> tuple[str, str]:
    name, sep, rest = spec.partition("=")
    name = name.strip()
    if not sep or not name or not rest.strip():
        raise UsageError(f"{flag} {spec!r}: expected NAME=VALUES (e.g. {flag} lr=0.1,0.01)")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", name):
        raise UsageError(f"{flag} {spec!r}: the name {name!r} must be letters, digits, _ . - (a placeholder {{NAME}})")
    return name, rest


def parse_grid(spec: str) -> Param:
    """``NAME=V1,V2`` as a ``choice`` parameter. Raises UsageError on a malformed spec."""
    name, rest = _split(spec, "--grid")
    values = tuple(_value(v) for v in rest.split(",") if v.strip())
    if not values:
        raise UsageError(f"--grid {spec!r}: no values")
    return Param(name, "choice", choices=values)


def parse_param(spec: str) -> Param:
    """``NAME=KIND:ARGS`` (KINDS). Raises UsageError naming the valid kinds and bounds."""
    name, rest = _split(spec, "--param")
    kind, _, args = rest.partition(":")
    kind = kind.strip()
    if kind not in KINDS:
        raise UsageError(f"--param {spec!r}: unknown kind {kind!r}; expected one of {', '.join(KINDS)} "
                         "(e.g. lr=loguniform:1e-4:1e-1, batch_size=choice:32,64)")
    if kind == "choice":
        values = tuple(_value(v) for v in args.split(",") if v.strip())
        if not values:
            raise UsageError(f"--param {spec!r}: choice needs values (choice:A,B)")
        return Param(name, kind, choices=values)
    parts = args.split(":")
    try:
        low, high = (float(p) for p in parts) if len(parts) == 2 else (math.nan, math.nan)
    except ValueError:
        low = high = math.nan
    if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
        raise UsageError(f"--param {spec!r}: expected {kind}:LOW:HIGH with LOW < HIGH")
    if kind == "loguniform" and low <= 0:
        raise UsageError(f"--param {spec!r}: loguniform needs LOW > 0")
    if kind == "int" and (low != int(low) or high != int(high)):
        raise UsageError(f"--param {spec!r}: int needs whole bounds")
    return Param(name, kind, low=low, high=high)


def parse_point(spec: str, params: Sequence[Param]) -> dict[str, Value]:
    """``NAME=V,NAME=V``: a point of the space (``--enqueue``), each value inside its parameter's
    range or among its choices. Raises UsageError naming the name or value that is not."""
    by_name = {p.name: p for p in params}
    point: dict[str, Value] = {}
    for item in (i for i in spec.split(",") if i.strip()):
        name, rest = _split(item, "--enqueue")
        p = by_name.get(name)
        if p is None:
            raise UsageError(f"--enqueue {spec!r}: {name!r} is not a parameter; expected one of {', '.join(by_name)}")
        value = _value(rest)
        if p.kind == "choice":
            if value not in p.choices:
                raise UsageError(f"--enqueue {spec!r}: {name}={rest.strip()} is not one of its choices "
                                 f"({', '.join(map(str, p.choices))})")
        elif isinstance(value, str) or not (float(p.low or 0) <= value <= float(p.high or 0)):
            raise UsageError(f"--enqueue {spec!r}: {name}={rest.strip()} is outside its range {p.low:g}..{p.high:g}")
        point[name] = int(value) if p.kind == "int" else value
    if not point:
        raise UsageError(f"--enqueue {spec!r}: expected NAME=V,NAME=V (e.g. --enqueue lr=0.1,batch_size=32)")
    return point


def expand_grid(params: Sequence[Param]) -> list[dict[str, Value]]:
    """Every combination of the ``choice`` parameters, the first varying slowest."""
    out: list[dict[str, Value]] = [{}]
    for p in params:
        if p.kind != "choice":
            raise UsageError(f"--grid: {p.name} is a {p.kind} range; a grid needs listed values")
        out = [{**combo, p.name: v} for combo in out for v in p.choices]
    return out


def _draw(p: Param, rng: random.Random) -> Value:
    if p.kind == "choice":
        return p.choices[rng.randrange(len(p.choices))]
    assert p.low is not None and p.high is not None
    if p.kind == "int":
        return rng.randint(int(p.low), int(p.high))
    if p.kind == "loguniform":
        return float(f"{math.exp(rng.uniform(math.log(p.low), math.log(p.high))):.6g}")
    return float(f"{rng.uniform(p.low, p.high):.6g}")


def sample_random(params: Sequence[Param], n: int, seed: int) -> list[dict[str, Value]]:
    """``n`` random points of the space. Trial ``i`` depends on ``seed`` and ``i`` only, so a
    resumed sweep draws the same points."""
    return [{p.name: _draw(p, random.Random(f"{seed}:{i}:{p.name}")) for p in params} for i in range(n)]


def fill_command(template: Sequence[str], params: Mapping[str, Value]) -> list[str]:
    """The command with each ``{NAME}`` replaced by its value. Raises UsageError for a
    placeholder without a parameter."""
    missing = sorted({m for arg in template for m in _PLACEHOLDER.findall(arg)} - set(params))
    if missing:
        raise UsageError(f"the command's placeholder {{{missing[0]}}} has no --grid or --param")
    return [_PLACEHOLDER.sub(lambda m: str(params[m.group(1)]), arg) for arg in template]


def check_placeholders(template: Sequence[str], names: Iterable[str]) -> None:
    """Raise UsageError when a parameter appears nowhere in the command (it would change nothing)."""
    used = {m for arg in template for m in _PLACEHOLDER.findall(arg)}
    unused = [n for n in names if n not in used]
    if unused:
        raise UsageError(f"parameter {unused[0]!r} is not used in the command: add {{{unused[0]}}} to it")
    fill_command(template, dict.fromkeys(names, ""))


def objective_series(records: Iterable[Mapping[str, Any]], key: str) -> list[tuple[int, float]]:
    """``(step, value)`` of metric ``key`` in rank 0's records (TIME_PER_SAMPLE: step_time_s /
    samples), in file order, finite values only: a trial's intermediate values."""
    out: list[tuple[int, float]] = []
    for i, r in enumerate(records):
        if r.get("rank", 0) not in (0, None):
            continue
        if key == TIME_PER_SAMPLE:
            t, n = r.get("step_time_s"), r.get("samples")
            v = t / n if isinstance(t, int | float) and isinstance(n, int | float) and n > 0 else None
        else:
            v = r.get(key)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            continue
        step = r.get("step")
        out.append((int(step) if isinstance(step, int | float) and math.isfinite(step) else i, float(v)))
    return out


def compute_objective(records: Iterable[Mapping[str, Any]], key: str, *, direction: str = "min",
                      reduce: str = "best", upto: int | None = None) -> float | None:
    """One number from a run's metrics: the best (min or max by ``direction``), last or median
    value of ``key`` (of its first ``upto`` values when given: a pruned trial's, as far as the
    pruner saw them); None when the run logged no finite value of it."""
    values = np.array([v for _, v in objective_series(records, key)][:upto])
    if not len(values):
        return None
    if reduce == "last":
        return float(values[-1])
    if reduce == "median":
        return float(np.median(values))
    return float(values.min() if direction == "min" else values.max())
