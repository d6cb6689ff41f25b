"""sample_models.record: the memory timeline is off by default (too slow to record) and opt-in."""
from __future__ import annotations

from pathlib import Path

import pytest

from sample_models import record


def test_memory_timeline_off_by_default_and_opt_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[object] = []
    monkeypatch.setattr(record, "launch", lambda request: seen.append(request) or 0)
    assert record.main(["--root", str(tmp_path / "a")]) == 0
    assert len(seen) == 2 and not any(r.options.memory_timeline for r in seen)  # type: ignore[attr-defined]
    assert all(r.options.grad_norm for r in seen)  # type: ignore[attr-defined]
    seen.clear()
    assert record.main(["--root", str(tmp_path / "b"), "--memory-timeline", "--only", "baseline"]) == 0
    assert [r.name for r in seen] == ["baseline"]  # type: ignore[attr-defined]
    assert seen[0].options.memory_timeline and seen[0].options.grad_norm  # type: ignore[attr-defined]
