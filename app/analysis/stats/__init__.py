"""app.analysis.stats.ratio: see docs/architecture.md."""
