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


