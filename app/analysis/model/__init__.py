"""app.analysis.model: see docs/architecture.md."""
