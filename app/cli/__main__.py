"""`python -m app.cli ...` is the same as the `torchscope` command."""
from app.cli import entry

entry()
