"""`python -m app.cli ...` is the same as the `torchscope` command."""
import sys

from app.cli import main

sys.exit(main())
