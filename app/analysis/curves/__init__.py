"""app.analysis.curves.smoothing: see docs/architecture.md."""
