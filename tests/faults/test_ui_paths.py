"""Hostile URLs and planted runs against the UI: a run named by ``?run=`` / ``?runs=`` resolves only
inside the store, and no file of a run is shown through a symlink out of it (AppTest and the
workspace functions the pages call)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app.errors import UsageError
from app.workspace.artifacts import UnsafePath, read_run_text, read_text_artifact, run_file_folder
from app.workspace.refs import resolve_store_run
from profiler_agent import runformat as rf
from profiler_agent.runformat import layout
from tests.app.helpers import open_app, show_tab, texts
from tests.conftest import write_run

SECRET = "root:x:0:0:SECRET-LINE-NEVER-SHOWN:/root:/bin/bash"

URL = "URL leaves the store"
LINK = "symlink out of a run"


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A store with one clean run and one whose stdout.log links to a secret file; a run planted
    outside the store (by another local user, say) with its logs linked the same way."""
    base = tmp_path_factory.mktemp("planted")
    secret = base / "passwd"
    secret.write_text(SECRET + "\n")
    store = base / "store"
    clean = write_run(store, "clean")
    linked = write_run(store, "linked")
    (linked / layout.STDOUT_LOG).unlink()
    (linked / layout.STDOUT_LOG).symlink_to(secret)
    (linked / layout.STDERR_LOG).unlink()
    (linked / layout.STDERR_LOG).symlink_to("../../" + os.path.relpath(secret, store.parent))  # relative link out
    outside = write_run(base / "elsewhere", "evil")
    (outside / layout.STDOUT_LOG).unlink()
    (outside / layout.STDOUT_LOG).symlink_to(secret)
    return {"store": store, "clean": clean, "linked": linked, "outside": outside, "secret": secret}


def _everything(at) -> str:  # noqa: ANN001 - an AppTest
    parts = [texts(getattr(at, kind)) for kind in ("title", "markdown", "code", "warning", "error", "info",
                                                    "caption", "text", "exception")]
    return "\n".join(parts)


# --- the resolver the pages call ----------------------------------------------------------------


@pytest.mark.fault(URL)
def test_store_run_by_id_name_and_inner_path(planted):
    store, clean = planted["store"], planted["clean"]
    assert resolve_store_run(clean.name, store) == clean
    assert resolve_store_run("clean", store) == clean
    assert resolve_store_run(str(clean), store) == clean.resolve()  # an absolute path inside the store


@pytest.mark.fault(URL)
@pytest.mark.parametrize("ref", ["ABS", "../elsewhere/RUN", "RUN_IN_STORE/../../elsewhere/RUN", "/", "..", "/etc"])
def test_refs_leaving_the_store_are_refused(planted, ref):
    outside = planted["outside"]
    ref = ref.replace("ABS", str(outside)).replace("RUN_IN_STORE", planted["clean"].name).replace("RUN", outside.name)
    with pytest.raises(UsageError, match="outside the run store"):
        resolve_store_run(ref, planted["store"])


@pytest.mark.fault(URL)
def test_symlinked_path_out_of_the_store_is_refused(planted, tmp_path):
    store = tmp_path / "store"
    write_run(store, "real")
    (store / "sub").mkdir()
    (store / "sub" / "door").symlink_to(planted["outside"])
    with pytest.raises(UsageError, match="outside the run store"):
        resolve_store_run("sub/door", store)


@pytest.mark.fault(URL)
def test_run_next_to_the_servers_working_folder_is_not_found(planted, monkeypatch):
    monkeypatch.chdir(planted["outside"].parent)  # `evil-…` is a run folder relative to the cwd
    with pytest.raises(rf.TorchscopeError) as e:
        resolve_store_run(planted["outside"].name, planted["store"])
    assert planted["outside"].name in str(e.value)


@pytest.mark.fault(URL)
@pytest.mark.parametrize("ref", ["x" * 256, "é" * 200, "a/" + "b" * 300, "x" * 100_000, "bad\x00name"])
def test_overlong_or_nul_ref_is_a_message(planted, ref):
    with pytest.raises(UsageError, match=r"longer than a file name can be|which no file name can") as e:
        resolve_store_run(ref, planted["store"])
    assert len(str(e.value)) < 400  # quoted, not echoed whole


# --- a run's files ----------------------------------------------------------------------------


@pytest.mark.fault(LINK)
@pytest.mark.parametrize("log", [layout.STDOUT_LOG, layout.STDERR_LOG], ids=["absolute-link", "relative-link"])
def test_log_linked_out_of_the_run_is_refused(planted, log):
    with pytest.raises(UnsafePath, match="link out of the run"):
        read_text_artifact(planted["linked"], log)


@pytest.mark.fault(LINK)
def test_links_inside_the_run_are_read(tmp_path):
    run = write_run(tmp_path / "store", "inner")
    (run / "logs" / "copy.log").symlink_to(run / layout.STDOUT_LOG)
    assert "epoch 0 step 0" in (read_text_artifact(run, "logs/copy.log") or "")
    assert read_text_artifact(run, "logs/missing.log") is None
    (run / "logs" / "dangling.log").symlink_to(tmp_path / "nowhere")
    with pytest.raises(UnsafePath):  # points out of the run, even if nothing is there
        read_text_artifact(run, "logs/dangling.log")


@pytest.mark.fault(LINK)
def test_tb_mirror_links_may_point_into_the_folder_they_mirror_only(tmp_path, monkeypatch):
    """The mirror store that the app builds itself holds links into the tb log folder: allowed
    there, and only there (a planted run claiming to be imported from / is refused)."""
    from app.data.tbprofiler import mirror_tb_folder

    monkeypatch.setenv("TORCHSCOPE_CACHE", str(tmp_path / "cache"))
    logs = tmp_path / "tb"
    (logs / "exp1").mkdir(parents=True)
    trace = {"traceEvents": [{"ph": "X", "name": "aten::mm", "cat": "cpu_op", "ts": 1, "dur": 5,
                              "pid": 1, "tid": 1}], "schemaVersion": 1}
    (logs / "exp1" / "host_1.1700000000000.pt.trace.json").write_text(json.dumps(trace))
    store = mirror_tb_folder(logs)
    assert store is not None
    (run,) = [p for p, _ in rf.list_runs(store).runs]
    (link,) = list((run / layout.TRACES_DIR).iterdir())
    assert link.is_symlink()
    assert run_file_folder(run, link) == (logs / "exp1").resolve()
    assert '"aten::mm"' in read_run_text(run, link)
    (run / layout.LOGS_DIR).mkdir(exist_ok=True)
    (run / layout.STDOUT_LOG).symlink_to(tmp_path / "secret.txt")
    (tmp_path / "secret.txt").write_text(SECRET)
    with pytest.raises(UnsafePath):
        read_text_artifact(run, layout.STDOUT_LOG)
    # a run elsewhere claiming the same origin gets no exception
    fake = write_run(tmp_path / "other", "fake", extra={"imported_from": str(logs / "exp1")})
    (fake / layout.TRACES_DIR).mkdir()
    (fake / layout.TRACES_DIR / link.name).symlink_to(link.resolve())
    with pytest.raises(UnsafePath):
        read_run_text(fake, fake / layout.TRACES_DIR / link.name)


# --- the pages (AppTest) ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.fault(URL)
def test_run_page_url_outside_the_store(monkeypatch, planted):
    at = open_app(monkeypatch, planted["store"], run=str(planted["outside"]))
    assert not at.exception
    assert "outside the run store" in texts(at.warning)
    shown = _everything(at)
    assert SECRET not in shown and "evil" not in texts(at.title)
    assert at.selectbox(key="run_picker").value != planted["outside"].name


@pytest.mark.slow
@pytest.mark.fault(URL)
def test_run_page_url_longer_than_a_file_name(monkeypatch, planted):
    at = open_app(monkeypatch, planted["store"], run="r" * 5000)
    assert not at.exception
    assert "longer than a file name" in texts(at.warning)


@pytest.mark.slow
@pytest.mark.fault(LINK)
def test_run_page_logs_linked_out_are_not_shown(monkeypatch, planted):
    at = open_app(monkeypatch, planted["store"], run=planted["linked"].name)
    assert not at.exception
    show_tab(at, "Logs")  # only the open tab is built
    assert not at.exception
    assert SECRET not in _everything(at)
    assert "link out of the run folder" in texts(at.warning)


@pytest.mark.slow
@pytest.mark.fault(URL)
def test_compare_page_url_outside_the_store(monkeypatch, planted):
    monkeypatch.setenv(layout.ROOT_ENV, str(planted["store"]))
    from streamlit.testing.v1 import AppTest

    from tests.app.helpers import APP

    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["runs"] = f"{planted['clean'].name},{planted['outside']},../elsewhere/{planted['outside'].name}"
    at.switch_page("app_pages/compare.py")
    at.run()
    assert not at.exception
    warned = texts(at.warning)
    assert warned.count("outside the run store") == 2
    assert SECRET not in _everything(at)
    assert planted["outside"].name not in str(at.query_params.get("runs"))


@pytest.mark.fault(URL)
def test_names_holding_slashes_or_too_long_for_a_file_still_match_by_name(tmp_path):
    store = tmp_path / "store"
    slashed = write_run(store, "lr/0.1 ../x")
    long_name = "n" * 400
    long_run = write_run(store, long_name)
    assert resolve_store_run("lr/0.1 ../x", store) == slashed
    assert resolve_store_run(long_name, store) == long_run


@pytest.mark.slow
@pytest.mark.fault("public bind")
def test_public_bind_locks_the_store_picker(monkeypatch, planted):
    """Bound to 0.0.0.0, a visitor cannot point the app at another folder of the machine."""
    from streamlit import config
    from streamlit.testing.v1 import AppTest

    from tests.app.helpers import APP

    before = config.get_option("server.address")
    config.set_option("server.address", "0.0.0.0")
    try:
        monkeypatch.setenv(layout.ROOT_ENV, str(planted["store"]))
        at = AppTest.from_file(APP, default_timeout=120)
        at.session_state["root"] = str(planted["outside"].parent)  # what typing in the sidebar would set
        at.query_params["run"] = planted["outside"].name
        at.switch_page("app_pages/run.py")
        at.run()
        assert not at.exception
        picker = at.sidebar.text_input(key="root_locked")
        assert picker.disabled and picker.value == str(planted["store"].resolve())
        assert at.selectbox(key="run_picker").value != planted["outside"].name
        assert SECRET not in _everything(at)
    finally:
        config.set_option("server.address", before)
