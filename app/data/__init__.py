"""app.data: files → tables. Loads runs (through profiler_agent.runformat) and traces into pandas."""
