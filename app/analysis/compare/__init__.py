"""app.analysis.compare.comparison: see docs/architecture.md."""
