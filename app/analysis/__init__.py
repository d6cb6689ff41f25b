"""app.analysis: tables in, tables out. Pure functions, no UI, no plotting."""
