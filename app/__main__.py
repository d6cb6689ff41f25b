"""`python -m app ...` is the same as the `torchscope` command."""
import sys

if sys.argv[1:2] == ["ls"]:  # `ls --json` of an unchanged store (its snapshot, else its index): before app.cli's imports
    from app.workspace.ls_snapshot import print_if_current

    if print_if_current(sys.argv[1:]):
        sys.exit(0)
    from app.workspace.printed_listing import print_from_index

    if print_from_index(sys.argv[1:]):
        sys.exit(0)
    from app.cli import entry

    entry(ls_checked=True)
else:
    from app.cli import entry

    entry()
