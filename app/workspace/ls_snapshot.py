"""``ls --json`` of a store where nothing changed, printed before anything else is imported (workspace layer, stdlib only).

The last whole ``ls --json`` document of a store is kept in ``<store>/.torchscope/ls-json.snapshot``
with its key: the ``--root`` value as given (the printed paths follow its spelling), every run
folder's name and inode from one directory listing, the change journal's token and size
(app.data.change_journal), and the modification time and size of each source file of the code
that prints it. ``torchscope ls --json
[--root DIR]`` compares that key first (app/__main__.py and app.cli.main, before argparse): one directory listing,
one read of the journal's header, one read of the file, no ``stat`` of any run, nor sqlite3,
json, pathlib or argparse imported. Anything else (another key, a URL, other options) lists the
store the normal way (app.workspace.catalog_records.list_store_json), which writes the file again.

The file is written only under the catalog index's write lock, only while the index's entries are
those the document was made from (their generation and journal position unchanged: a compare
and set), and deleted by every write of entries (app.data.catalog_index.CatalogIndex.write): a
listing that changed an entry (``ls --refresh`` finding an outside edit, a run turning crashed) is
never hidden behind it. A run whose change no journal line announces (an edit by another tool)
is not seen here either: ``ls --refresh`` (docs/catalog.md).
"""

from __future__ import annotations

import marshal
import os
import sys
from collections.abc import Sequence
from io import BufferedReader

__all__ = ["SNAPSHOT_FILE", "json_root", "root_value", "store_folders", "journal_position", "snapshot_key", "print_if_current",
           "write_snapshot", "remove_snapshot"]

SNAPSHOT_FILE = os.path.join(".torchscope", "ls-json.snapshot")  # in the store's meta folder (layout.STORE_META_DIR)
_MAGIC = b"torchscope-ls-json-snapshot 1\n"
_ROOT_ENV = "TORCHSCOPE_RUNS"  # layout.ROOT_ENV
_DEFAULT_ROOT = "runs"  # layout.DEFAULT_ROOT
_JOURNAL = os.path.join(".torchscope", "journal")  # layout.JOURNAL
_JOURNAL_MAGIC = b"torchscope-journal 1 "  # layout.JOURNAL_MAGIC
_APP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The code that decides the printed bytes: the rows' rules (app.workspace.printed_listing.RULES_SOURCES),
# the record texts and the document (printed_listing, ls_cmd), and this module.
_CODE = ("workspace/catalog_rows.py", "workspace/catalog_listing.py", "workspace/catalog_records.py",
         "workspace/cached_steps.py", "workspace/signatures.py", "workspace/ls_snapshot.py",
         "workspace/printed_listing.py", "data/change_journal.py",
         "data/store_rows.py", "data/runs.py", "data/catalog_index.py", "analysis/run/step_time.py",
         "analysis/run/final_value.py", "cli/ls_cmd.py")


def root_value(root: str | None) -> str:
    """The store as ``layout.resolve_root`` picks it, as text: ``root``, else $TORCHSCOPE_RUNS, else runs."""
    return root if root else (os.environ.get(_ROOT_ENV) or _DEFAULT_ROOT)


def store_folders(store: str) -> list[tuple[str, int]]:
    """The store's sub-folders but dot-folders, each with its inode, name descending (one listing, no stat)."""
    with os.scandir(store) as it:
        folders = [(e.name, e.inode()) for e in it if not e.name.startswith(".") and e.is_dir()]
    folders.sort(reverse=True)
    return folders


def journal_position(store: str) -> tuple[str, int]:
    """(token, size) of the store's change journal as its header names it; ("", 0) when there is none."""
    try:
        with open(os.path.join(store, _JOURNAL), "rb") as f:
            header = f.readline(256)
            size = os.fstat(f.fileno()).st_size
    except FileNotFoundError:
        return "", 0
    token = header[len(_JOURNAL_MAGIC):-1] if header.startswith(_JOURNAL_MAGIC) and header.endswith(b"\n") else b"!"
    return token.decode("ascii", "replace"), size


def _code_version() -> tuple[tuple[int, int], ...]:
    """(mtime in ns, size) of each source file that decides the printed bytes: a changed file
    (an update, a checkout) gives another key. A stat each, no read: the check must stay cheap."""
    out = []
    for rel in _CODE:
        try:
            st = os.stat(os.path.join(_APP, rel))
            out.append((st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((-1, -1))
    return tuple(out)


def snapshot_key(value: str, folders: list[tuple[str, int]], journal: tuple[str, int]) -> bytes:
    """The exact key (marshal format 2: equal inputs, equal bytes; compared whole, not hashed)."""
    return marshal.dumps((value, folders, tuple(journal), _code_version()), 2)


def _store_dir(value: str) -> str:
    return os.path.expanduser(value)


def json_root(argv: Sequence[str]) -> tuple[bool, str | None]:
    """(whether ``argv`` is exactly ``ls --json [--root DIR]``, DIR)."""
    if not argv or argv[0] != "ls":
        return False, None
    root: str | None = None
    seen_json = False
    rest = list(argv[1:])
    while rest:
        arg = rest.pop(0)
        if arg == "--json" and not seen_json:
            seen_json = True
        elif arg == "--root" and rest and root is None:
            root = rest.pop(0)
        elif arg.startswith("--root=") and root is None:
            root = arg[len("--root="):]
        else:
            return False, None
    return seen_json and root != "", root


def print_if_current(argv: Sequence[str]) -> bool:
    """Print the stored document when ``argv`` is ``ls --json [--root DIR]`` and its key still holds;
    False (nothing printed) otherwise, and on any doubt."""
    ok, root = json_root(argv)
    if not ok:
        return False
    value = root_value(root)
    if ":" in value or value.startswith("-"):  # a store URL (read through its mirror), or an option
        return False
    store = _store_dir(value)
    try:
        with open(os.path.join(store, SNAPSHOT_FILE), "rb") as f:
            head = f.read(len(_MAGIC) + 8)
            if len(head) != len(_MAGIC) + 8 or not head.startswith(_MAGIC):
                return False
            size = int.from_bytes(head[len(_MAGIC):], "little")
            if f.read(size) != snapshot_key(value, store_folders(store), journal_position(store)):
                return False
            _copy_out(f)
    except (OSError, ValueError):
        return False
    return True


def _copy_out(f: BufferedReader) -> None:
    """The rest of ``f`` to stdout: by ``os.sendfile`` (no copy through Python) when stdout is a
    file or a pipe, else read and written."""
    out = sys.stdout
    buffer = getattr(out, "buffer", None)
    if buffer is None:  # a StringIO put in its place
        out.write(f.read().decode("utf-8", "surrogateescape"))
        return
    out.flush()
    buffer.flush()
    offset, end = f.tell(), os.fstat(f.fileno()).st_size
    try:
        target = buffer.fileno()
    except (OSError, ValueError, AttributeError):  # a BytesIO
        target = -1
    while target >= 0 and offset < end:
        try:
            sent = os.sendfile(target, f.fileno(), offset, end - offset)
        except OSError:
            break  # not supported here: the rest below
        if sent <= 0:
            break
        offset += sent
    if offset < end:
        f.seek(offset)
        buffer.write(f.read())
        buffer.flush()


def write_snapshot(store: str, value: str, folders: list[tuple[str, int]], journal: tuple[str, int],
                   document: bytes) -> None:
    """Keep ``document`` for the key (call it with the index's write lock held); never raises."""
    key = snapshot_key(value, folders, journal)
    path = os.path.join(store, SNAPSHOT_FILE)
    tmp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        with open(tmp, "xb") as f:
            f.write(_MAGIC + len(key).to_bytes(8, "little") + key)
            f.write(document)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def remove_snapshot(store: str) -> None:
    try:
        os.unlink(os.path.join(store, SNAPSHOT_FILE))
    except OSError:
        pass
