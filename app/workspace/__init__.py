"""app.workspace: see docs/architecture.md."""
