"""Names for people (presentation layer): op, kernel and module names shortened for table cells
and kept distinct; the one mapping of the agent's metric keys and the app's summary keys to human
names with their display unit (``metric_label``, ``metric_display``, ``field_label``), and the name of
a metric's final value (``final_name``)."""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["distinct_short_names", "short_name", "MetricDisplay", "metric_display", "metric_label",
           "field_label", "final_name", "FIELD_LABELS", "display_table"]


@dataclass(frozen=True)
class MetricDisplay:
    """How a logged metric is shown: its ``label`` (unit included), the factor from the logged
    value to the shown one, and the shown ``unit`` ("ms", "MiB" or "")."""

    label: str
    scale: float = 1.0
    unit: str = ""


# The agent's own metrics.jsonl keys (docs/run-format.md); one unit per quantity across the app:
# times in ms, memory in MiB.
_AGENT_METRICS = {
    "loss": MetricDisplay("training loss"),
    "val_loss": MetricDisplay("validation loss"),
    "lr": MetricDisplay("learning rate"),
    "grad_norm": MetricDisplay("gradient norm"),
    "samples": MetricDisplay("samples per step"),
    "tokens": MetricDisplay("tokens per step"),
    "step_time_s": MetricDisplay("step time (ms)", 1e3, "ms"),
    "data_time_s": MetricDisplay("data loading time (ms)", 1e3, "ms"),
    "cpu_time_s": MetricDisplay("CPU time per step (ms)", 1e3, "ms"),
    "compile_s": MetricDisplay("compile time (ms)", 1e3, "ms"),
    "contention": MetricDisplay("CPU contention (share of the machine)"),
    "steal": MetricDisplay("CPU steal (share of the machine)"),
    "backward_calls": MetricDisplay("backward calls per step"),
    "accuracy": MetricDisplay("training accuracy"),
    "val_accuracy": MetricDisplay("validation accuracy"),
}
_NUMBERED = re.compile(r"^(lr|val_loss)_(\d+)$")


def metric_display(key: str) -> MetricDisplay:
    """The display of a metrics.jsonl key: the agent's keys by name (``lr_1`` → "learning rate
    (group 1)", ``data_time_s`` → "data loading time (ms)", ×1000), other ``*_s`` keys in ms,
    ``*_bytes`` keys in MiB; a user's other keys as logged."""
    if key in _AGENT_METRICS:
        return _AGENT_METRICS[key]
    m = _NUMBERED.match(key)
    if m:
        base = _AGENT_METRICS[m.group(1)].label
        return MetricDisplay(f"{base} (group {m.group(2)})" if m.group(1) == "lr" else f"{base} ({m.group(2)})")
    if key.endswith("_time_s"):
        return MetricDisplay(f"{key[:-2].replace('_', ' ')} (ms)", 1e3, "ms")
    if key.endswith("_bytes"):
        return MetricDisplay(f"{key[:-6].replace('_', ' ')} (MiB)", 1 / (1 << 20), "MiB")
    return MetricDisplay(key)


def metric_label(key: str) -> str:
    """``metric_display(key).label``."""
    return metric_display(key).label


# Keys of the app's own summaries (catalog rows, sweep tables, run summaries) as column titles.
FIELD_LABELS = {
    "median_step_time_s": "median step time", "step_time_s": "step time", "peak_memory_bytes": "peak memory",
    "final_loss": "final loss", "final_val_loss": "final validation loss", "steps": "steps",
    "throughput": "throughput", "samples_per_s": "samples/s", "duration_s": "duration",
    "peak_rss_bytes": "peak host memory (RSS)", "step_time_ms": "step time (ms)",
}


# Summary keys shown scaled: one unit per quantity (times in ms, memory in MiB).
_FIELD_DISPLAY = {
    "median_step_time_s": MetricDisplay("median step time (ms)", 1e3, "ms"),
    "step_time_s": MetricDisplay("step time (ms)", 1e3, "ms"),
    "peak_memory_bytes": MetricDisplay("peak memory (MiB)", 1 / (1 << 20), "MiB"),
    "samples_per_s": MetricDisplay("samples/s"),
    "final_loss": MetricDisplay("final loss"),
    "best_loss": MetricDisplay("best loss"),
}


def display_table(table: Any, keys: Sequence[str]) -> tuple[Any, dict[str, str]]:
    """A copy of ``table`` (a DataFrame) for people: the columns ``keys`` renamed to their human
    names with their unit (``median_step_time_s`` → "median step time (ms)", values × 1000;
    ``peak_memory_bytes`` → "peak memory (MiB)"; ``config.lr`` → "lr"), and the renaming."""
    out = table.copy()
    names: dict[str, str] = {}
    for k in keys:
        if k not in out.columns:
            continue
        d = _FIELD_DISPLAY.get(k) or (MetricDisplay(k.removeprefix("config.")) if k.startswith("config.")
                                      else metric_display(k))
        if d.scale != 1.0:
            out[k] = out[k] * d.scale
        names[k] = d.label
    return out.rename(columns=names), names


def field_label(key: str) -> str:
    """A readable column title for a summary key: FIELD_LABELS, else metric_label's rules."""
    return FIELD_LABELS.get(key) or metric_label(key)


def _collapse(text: str, open_: str, close: str) -> str:
    """Replace every outermost ``open_ … close`` group by ``open_…close``."""
    out, depth = [], 0
    for ch in text:
        if ch == open_:
            if depth == 0:
                out.append(open_ + "…")
            depth += 1
        elif ch == close and depth:
            depth -= 1
            if depth == 0:
                out.append(close)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def short_name(name: Any, width: int = 80) -> str:
    """An op or kernel name that fits a table cell: template and argument lists collapsed
    (``gemm<…>(…)``), then cut to ``width`` characters."""
    text = str(name)
    if len(text) > width:
        text = _collapse(_collapse(text.removeprefix("void "), "<", ">"), "(", ")")
    return text if len(text) <= width else text[: width - 1] + "…"


def _middle_cut(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def distinct_short_names(names: Sequence[Any], width: int = 80) -> list[str]:
    """``short_name`` of each name, except that names whose short forms collide are shown less
    shortened, until every distinct name has a distinct text: first with argument lists
    collapsed but template arguments kept (cut in the middle, so a name's head and its suffix
    stay), then in full. Equal names stay equal."""
    levels = (lambda t: short_name(t, width),
              lambda t: _middle_cut(_collapse(t.removeprefix("void "), "(", ")"), width),
              lambda t: _middle_cut(t, width),
              lambda t: t)
    texts = [str(n) for n in names]
    level = dict.fromkeys(texts, 0)
    while True:
        shown = {t: levels[level[t]](t) for t in level}
        owners: dict[str, set[str]] = {}
        for t, v in shown.items():
            owners.setdefault(v, set()).add(t)
        clashes = [t for group in owners.values() if len(group) > 1 for t in group if level[t] < len(levels) - 1]
        if not clashes:
            return [shown[t] for t in texts]
        for t in clashes:
            level[t] += 1


def final_name(key: str) -> str:
    """The metric's name in the label of its final value (app.analysis.run.final_value.final_label
    puts "final " before it): "loss" for ``loss`` (the Runs page's "Final loss", ``ls``, the
    Overview tile, Compare), "validation loss" for ``val_loss``; a metric's label otherwise.
    The Metrics tab's chart names the series itself "training loss"; its final value stays the
    "final loss" every other page shows."""
    named = FIELD_LABELS.get(f"final_{key}")
    return named.removeprefix("final ") if named else metric_label(key)
