"""app.analysis.run: see docs/architecture.md."""
