"""app.analysis.memory.events: see docs/architecture.md."""
