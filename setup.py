"""The parse's optional C accelerator (app/data/_event_scan.c); everything else is in pyproject.toml.

``optional=True``: where no C compiler is found, the install goes on without it and every trace
is read by the pure-Python parse (same tables, slower: docs/trace-engine.md, "The C accelerator").
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("app.data._event_scan", ["app/data/_event_scan.c"], optional=True,
                             extra_compile_args=["-O2"])])
