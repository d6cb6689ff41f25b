"""TensorBoard event files: scalars read with tensorboard's reader, runs found as TensorBoard finds
them, and bad input (empty, not an event file, corrupt, cut short, no scalars, no tensorboard)."""
from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

from app.data.log_import import plan_log_import
from app.data.tfevents import read_event_file, scan_event_runs
from app.errors import UsageError
from profiler_agent import runformat as rf


def _write(folder: Path, steps: int = 4, *, text_only: bool = False) -> Path:
    """A log dir written by torch's SummaryWriter; returns its main event file."""
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(folder)) as w:
        for i in range(steps):
            if text_only:
                w.add_text("notes", f"step {i}", i)
                continue
            w.add_scalar("Loss/train", 1.0 / (i + 1), i)
            w.add_scalar("loss", 2.0, i, new_style=True)  # tensor-valued summary, and an agent key
            w.add_scalars("Acc", {"train": 0.5, "val": 0.25}, i)
    (main,) = [f for f in folder.iterdir() if f.is_file() and "tfevents" in f.name]
    return main


def _record_starts(data: bytes) -> list[int]:
    starts, at = [], 0
    while at + 12 <= len(data):
        starts.append(at)
        (length,) = struct.unpack("<Q", data[at:at + 8])
        at += length + 16
    return starts


def test_reads_simple_and_tensor_scalars_with_keys(tmp_path: Path) -> None:
    scalars = read_event_file(_write(tmp_path / "run"))
    by_key: dict[str, list[tuple[int, float]]] = {}
    for p in scalars.points:
        by_key.setdefault(p.key, []).append((p.step, p.value))
    assert by_key["Loss/train"] == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3)), (3, 0.25)]
    assert by_key["tb/loss"] == [(i, 2.0) for i in range(4)]  # "loss" is the agent's key
    assert scalars.first_wall_time <= min(p.wall_time for p in scalars.points)


def test_scan_finds_nested_runs_and_folds_add_scalars_folders(tmp_path: Path) -> None:
    _write(tmp_path / "logs" / "a")
    _write(tmp_path / "logs" / "group" / "b")
    _write(tmp_path / "logs" / ".hidden")
    run_dir, _ = rf.create_run(tmp_path / "logs", "already-a-run")
    _write(run_dir)  # inside a Torchscope run: not a TensorBoard run to import
    scan = scan_event_runs(tmp_path / "logs")
    assert sorted(r.folder.relative_to(tmp_path / "logs").as_posix() for r in scan.runs) == ["a", "group/b"]
    (a,) = [r for r in scan.runs if r.folder.name == "a"]
    assert {p.key for p in a.points} == {"Loss/train", "tb/loss", "Acc/train", "Acc/val"}  # not "Acc"
    assert len(a.files) == 3 and {f.parent.name for f in a.files} == {"a", "Acc_train", "Acc_val"}
    assert [p.step for p in a.points] == sorted(p.step for p in a.points)
    assert not scan.skipped


def test_a_last_record_cut_short_keeps_what_came_before(tmp_path: Path) -> None:
    main = _write(tmp_path / "run")
    data = main.read_bytes()
    main.write_bytes(data[:-5])  # the job was killed while writing its last record
    points = read_event_file(main).points
    assert 0 < len(points) < len(read_event_file(_write(tmp_path / "whole")).points)


def test_corrupt_record_names_the_file_and_the_byte(tmp_path: Path) -> None:
    main = _write(tmp_path / "run")
    data = bytearray(main.read_bytes())
    third = _record_starts(bytes(data))[2]
    data[third + 14] ^= 0xFF  # inside the third record's data: its checksum fails
    main.write_bytes(bytes(data))
    expected = rf"{main.name}: corrupt at byte {third:,} of {len(data):,} .*2 good record"
    with pytest.raises(UsageError, match=expected):
        read_event_file(main)
    # In a folder it is skipped, with the same reason, and the rest of the folder still imports.
    scan = scan_event_runs(tmp_path / "run")
    assert [s.path for s in scan.skipped] == [main] and "corrupt at byte" in scan.skipped[0].reason
    assert {p.key for r in scan.runs for p in r.points} == {"Acc/train", "Acc/val"}


@pytest.mark.parametrize(("content", "reason"), [
    (b"", "the file is empty"),
    (b"garbage that is no TFRecord at all, not even close", "not a TensorBoard event file"),
    (b"\x05\x00\x00", "holds no complete event"),
])
def test_unreadable_event_files(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "events.out.tfevents.123.host"
    path.write_bytes(content)
    with pytest.raises(UsageError, match=reason) as e:
        read_event_file(path)
    assert str(path) in str(e.value)
    with pytest.raises(UsageError, match=reason):  # imported on its own: the same clear error
        plan_log_import(path)


def test_empty_folder_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    with pytest.raises(UsageError, match=r"no trace files found .*; and no TensorBoard event files"):
        plan_log_import(tmp_path / "logs")


def test_folder_of_bad_event_files_names_them(tmp_path: Path) -> None:
    (tmp_path / "logs" / "exp").mkdir(parents=True)
    (tmp_path / "logs" / "exp" / "events.out.tfevents.1.host").write_bytes(b"")
    with pytest.raises(UsageError, match=r"exp/events\.out\.tfevents\.1\.host: the file is empty"):
        plan_log_import(tmp_path / "logs")


def test_event_files_without_scalars_are_skipped_with_the_reason(tmp_path: Path) -> None:
    _write(tmp_path / "logs" / "text", text_only=True)
    _write(tmp_path / "logs" / "scalars")
    plan = plan_log_import(tmp_path / "logs")
    assert [r.name for r in plan.runs] == ["scalars"]
    (skipped,) = plan.skipped
    assert skipped.path.name == "text" and "without scalars" in skipped.reason
    with pytest.raises(UsageError, match="no trace files and no TensorBoard scalars"):
        plan_log_import(tmp_path / "logs" / "text")


def test_missing_tensorboard_names_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    main = _write(tmp_path / "run")
    monkeypatch.setitem(sys.modules, "tensorboard.backend.event_processing.event_file_loader", None)
    with pytest.raises(UsageError, match=r"needs the 'tensorboard' package.*pip install tensorboard"):
        plan_log_import(main.parent)


def test_a_folder_without_event_files_needs_no_tensorboard(shared_data: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorboard.backend.event_processing.event_file_loader", None)
    plan = plan_log_import(shared_data / "traces" / "cpu_only")
    assert [r.traces is not None and r.events is None for r in plan.runs] == [True]


def test_public_surface() -> None:
    from app.data import log_import, tfevents

    for module in (tfevents, log_import):
        for name in module.__all__:
            assert getattr(module, name) is not None, (module.__name__, name)
