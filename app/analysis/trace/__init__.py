"""app.analysis.trace: see docs/architecture.md."""
