"""The bootstrap: arms the agent without importing torch, chains to the site's sitecustomize, respects layers."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from profiler_agent.launcher import BOOTSTRAP_DIR
from profiler_agent.options import RUN_DIR_ENV
from profiler_agent.runformat import create_run, layout

from .helpers import PROJECT_ROOT, env


def _run(code: str, run_dir: Path, extra_path: str = "") -> subprocess.CompletedProcess[str]:
    paths = [str(BOOTSTRAP_DIR), *([extra_path] if extra_path else []), str(PROJECT_ROOT)]
    job_env = {**env(), RUN_DIR_ENV: str(run_dir), "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run([sys.executable, "-c", code, str(run_dir)], capture_output=True, text=True, env=job_env, timeout=120)


def test_processes_without_torch_pay_nothing_and_write_nothing(tmp_path: Path) -> None:
    run_dir, _ = create_run(tmp_path, "no-torch")
    code = ("import sys, argparse; argparse.ArgumentParser().parse_args([])\n"
            "print('torch' in sys.modules, 'profiler_agent.session' in sys.modules)")
    out = _run(code, run_dir)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]
    assert [p.name for p in run_dir.iterdir()] == [layout.MANIFEST]


def test_importing_torch_activates_the_agent(tmp_path: Path) -> None:
    run_dir, _ = create_run(tmp_path, "torch")
    code = ("import sys, torch\nfrom profiler_agent.session import get_session\n"
            "s = get_session(); print(s is not None and str(s.run_dir) == sys.argv[1])\n"
            "print(torch.__spec__.loader.__class__.__name__)")
    out = _run(code, run_dir)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split()
    assert lines[0] == "True"
    assert lines[1] != "_ActivatingLoader"  # torch keeps its own loader


def test_the_sites_own_sitecustomize_still_runs(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['SITE_CUSTOMIZED'] = 'yes'\n")
    run_dir, _ = create_run(tmp_path, "chain")
    out = _run("import os, sitecustomize; print(os.environ.get('SITE_CUSTOMIZED'), sitecustomize.__file__)",
               run_dir, extra_path=str(site))
    assert out.returncode == 0, out.stderr
    flag, path = out.stdout.split()
    assert flag == "yes" and path == str(site / "sitecustomize.py")


def test_agent_never_imports_the_app() -> None:
    offenders = []
    for path in (PROJECT_ROOT / "profiler_agent").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n == "app" or n.startswith("app.")]
    assert offenders == []
