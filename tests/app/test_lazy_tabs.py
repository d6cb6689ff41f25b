"""The Run and Compare pages build only the open tab; the open tab is kept in the URL (issue 16)."""
from __future__ import annotations

from streamlit.testing.v1 import AppTest

from app.ui.run_view import RUN_TABS
from tests.app.helpers import APP, assert_clean, open_app, show_tab
from tests.app.test_compare_page import open_compare


def _built(at: AppTest) -> list[str]:
    """Labels of the tabs that hold any element (the page's top-level tab strip)."""
    return [t.label for t in at.tabs if t.label in {m.TITLE for m in RUN_TABS} and len(t.children)]


def test_run_page_builds_only_the_open_tab(monkeypatch, make_run) -> None:  # noqa: ANN001
    run = make_run("lazy")
    calls: list[str] = []
    for module in RUN_TABS:  # count every tab's render
        monkeypatch.setattr(module, "render", _counting(module.render, module.TITLE, calls))
    at = open_app(monkeypatch, run.parent, run=run.name)
    assert_clean(at)
    assert [t.label for t in at.tabs][: len(RUN_TABS)] == [m.TITLE for m in RUN_TABS]  # the strip shows every tab
    assert calls == ["Overview"] and _built(at) == ["Overview"]
    logs = show_tab(at, "Logs")  # a click: the page reruns for that tab alone
    assert_clean(at)
    assert calls == ["Overview", "Logs"] and _built(at) == ["Logs"] and len(logs.children)


def test_run_page_deep_link_opens_its_tab(monkeypatch, make_run) -> None:  # noqa: ANN001
    run = make_run("linked")
    monkeypatch.setenv("TORCHSCOPE_RUNS", str(run.parent))
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["run"] = run.name
    at.query_params["run_tab"] = "Config"  # /run?run=<id>&run_tab=Config
    at.switch_page("app_pages/run.py")
    at.run()
    assert_clean(at)
    assert _built(at) == ["Config"]


def test_compare_page_builds_only_the_open_tab(monkeypatch, make_run) -> None:  # noqa: ANN001
    import app.ui.compare_cache as compare_cache

    base = make_run("base", step_time_s=0.05)
    cand = make_run("cand", step_time_s=0.03)
    advised: list[object] = []
    original = compare_cache.cached_findings_diff
    monkeypatch.setattr(compare_cache, "cached_findings_diff", lambda *a: advised.append(a) or original(*a))
    at = open_compare(monkeypatch, base.parent, f"{base.name},{cand.name}")
    assert_clean(at)
    built = [t.label for t in at.tabs if len(t.children)]
    assert built == ["Where the time went"] and not advised  # no advisor diff until its tab opens
    show_tab(at, "Advisor", key="compare_tab")
    assert_clean(at)
    assert [t.label for t in at.tabs if len(t.children)] == ["Advisor"] and len(advised) == 1


def _counting(render, title: str, calls: list[str]):  # noqa: ANN001, ANN202
    def counted(ctx):  # noqa: ANN001, ANN202
        calls.append(title)
        return render(ctx)

    return counted




def test_the_memory_tab_is_loaded_in_the_background_while_another_is_open(monkeypatch, make_run,  # noqa: ANN001
                                                                          shared_data) -> None:  # noqa: ANN001
    import shutil

    import app.ui.memory_views as memory_views
    from app.ui import prefetch
    from profiler_agent.runformat import layout

    run = make_run("prefetched")
    name = layout.memory_timeline_file_name("host_1_rank0", 1)
    (run / layout.MEMORY_DIR).mkdir(exist_ok=True)
    shutil.copy(shared_data / "memory" / "memory_timeline.raw.gz", run / layout.MEMORY_DIR / name)
    built: list[int] = []
    original = memory_views._category_view
    monkeypatch.setattr(memory_views, "_category_view", lambda raw: built.append(len(raw)) or original(raw))
    monkeypatch.setenv(prefetch.PREFETCH_ENV, "1")
    monkeypatch.setattr(prefetch, "IDLE_EXIT_S", 0.05)
    at = open_app(monkeypatch, run.parent, run=run.name)
    assert_clean(at)
    prefetch.wait_idle()
    assert len(built) == 1, "the Memory tab's categories were built while the Overview was open"
    memory = show_tab(at, "Memory")
    assert_clean(at)
    assert len(built) == 1, "the switch found them in the cache"
    assert memory.get("vega_lite_chart"), "and drew them"
    show_tab(at, "Logs")  # another visit of the same run queues nothing new
    prefetch.wait_idle()
    assert len(built) == 1
    assert prefetch.wait_stopped(10), "the worker leaves once idle"


def test_the_findings_tab_is_advised_in_the_background_while_another_is_open(monkeypatch, make_run) -> None:  # noqa: ANN001
    # The advisor was the whole of the Findings tab's first switch (1.3x an empty page in the
    # browser benchmark): now it runs while the Overview is read, and the switch draws the cache.
    import app.ui.tabs.findings as findings
    from app.ui import prefetch

    run = make_run("advised")
    advised: list[object] = []
    original = findings.advise
    monkeypatch.setattr(findings, "advise", lambda evidence: advised.append(1) or original(evidence))
    monkeypatch.setenv(prefetch.PREFETCH_ENV, "1")
    monkeypatch.setattr(prefetch, "IDLE_EXIT_S", 0.05)
    at = open_app(monkeypatch, run.parent, run=run.name)
    assert_clean(at)
    prefetch.wait_idle()
    assert advised == [1], "the run was advised while the Overview was open"
    tab = show_tab(at, "Findings")
    assert_clean(at)
    assert advised == [1], "the switch found the advice in the cache"
    assert tab.get("expander") or tab.get("markdown"), "and showed it"
    assert prefetch.wait_stopped(10), "the worker leaves once idle"


def test_a_failing_prefetch_is_dropped_and_the_next_one_runs(monkeypatch, tmp_path) -> None:  # noqa: ANN001
    from app.data.runs import RunData
    from app.ui import prefetch
    from app.ui.tabs import RunContext

    monkeypatch.setenv(prefetch.PREFETCH_ENV, "0")
    ctx = RunContext(run_dir=tmp_path / "r0", run=RunData.__new__(RunData))
    assert prefetch.prefetch_tabs(ctx, [("fine", lambda: object)], signature=(1.0,)) == 0  # turned off
    monkeypatch.setenv(prefetch.PREFETCH_ENV, "1")
    monkeypatch.setattr(prefetch, "IDLE_EXIT_S", 0.05)

    ran: list[str] = []

    class Broken:
        @staticmethod
        def prefetch(ctx: RunContext) -> None:
            raise OSError("the disk went away")

    class Fine:
        @staticmethod
        def prefetch(ctx: RunContext) -> None:
            ran.append(ctx.run_dir.name)

    ctx = RunContext(run_dir=tmp_path / "r1", run=RunData.__new__(RunData))
    assert prefetch.prefetch_tabs(ctx, [("broken", lambda: Broken), ("fine", lambda: Fine)], signature=(1.0,)) == 2
    prefetch.wait_idle()
    assert ran == ["r1"]
    assert prefetch.prefetch_tabs(ctx, [("fine", lambda: Fine)], signature=(1.0,)) == 0  # already done
    assert prefetch.prefetch_tabs(ctx, [("fine", lambda: Fine)], signature=(2.0,)) == 1  # the run changed
    prefetch.wait_idle()
    assert ran == ["r1", "r1"]
    live = RunContext(run_dir=tmp_path / "r2", run=ctx.run, live=True)
    assert prefetch.prefetch_tabs(live, [("fine", lambda: Fine)], signature=(1.0,)) == 0  # a running job's files move
    assert prefetch.wait_stopped(10), "the worker leaves once idle: no thread outlives the pages"
    assert prefetch.prefetch_tabs(ctx, [("fine", lambda: Fine)], signature=(3.0,)) == 1  # and comes back
    prefetch.wait_idle()
    assert ran == ["r1", "r1", "r1"] and prefetch.wait_stopped(10)
    monkeypatch.setattr(prefetch, "REQUEUE_S", 0.0)  # queued long ago: its caches may have expired
    assert prefetch.prefetch_tabs(ctx, [("fine", lambda: Fine)], signature=(3.0,)) == 1
    prefetch.wait_idle()
    assert len(ran) == 4 and prefetch.wait_stopped(10)
