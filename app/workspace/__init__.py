"""The workspace layer: the one way in for the front ends (docs/architecture.md, "The workspace").

It resolves what the user names (app.workspace.refs), loads it through app.data, owns the caches
(app.workspace.traces, cached_steps, signatures), and assembles the analysis layer's typed inputs:
comparison sides (sides), catalog rows (catalog), the advisor's evidence (evidence). app.data and
app.analysis never import it; app.cli and app.ui call it. Import the modules, not this package.
"""
