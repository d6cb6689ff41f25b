"""The advisor stays in the analysis layer: no streamlit, plotly or torch; a stable public surface."""
from __future__ import annotations

import subprocess
import sys

import app.analysis.advisor as advisor


def test_no_ui_or_torch_imports_in_a_fresh_interpreter():
    code = ("import sys, app.analysis.advisor, app.cli.advise_cmd; "
            "print(','.join(m for m in ('streamlit', 'plotly', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def test_public_surface():
    for name in ("advise", "diff_findings", "diff_advice", "FindingsDiff", "Finding", "Severity",
                 "RunEvidence", "evidence_from_run", "rule", "registered_rules"):
        assert name in advisor.__all__ and hasattr(advisor, name)
    # Loading a reference is the workspace's (app.workspace.evidence), not the analysis layer's.
    assert "load_evidence" not in advisor.__all__ and "advise_path" not in advisor.__all__
