"""app.presentation: see docs/architecture.md."""
