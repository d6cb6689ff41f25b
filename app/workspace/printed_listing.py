"""``ls --json`` printed from the catalog index's per-run texts, before app.cli is imported (workspace layer, stdlib only).

Each entry of the store's catalog index keeps its run's ``ls --json`` record as printed, cut in two
around the store's path (``printed`` table, app.data.catalog_index), in the order ``ls`` lists the
runs. When nothing can have changed since the listing that wrote the entries, ``torchscope ls
--json [--root DIR]`` joins these texts in SQLite and prints them, without listing the store's
folders, ``stat``-ing a run or importing json, pathlib or argparse:

- the store folder's ``stat`` (device, inode, mtime, ctime: its *stamp*) is the one stored with the
  entries by a listing that found every sub-folder a run with an entry (``folders_stamp``; any
  folder added, removed, renamed or replaced in the store changes its mtime and ctime). A listing
  stores the stamp only when the folder's last change is more than :data:`STAMP_AGE_NS` older than
  its ``stat``, so that a change in the same clock tick as that ``stat`` cannot keep the stamp;
- the change journal is exactly as far as the entries consumed it (token and size), and small
  enough to need no compaction (app.data.change_journal);
- no entry is of a run recorded as running (its shown status follows the clock) or whose steps wait
  "in trace" (the trace analysis may have them now);
- the index is of this format and of these rules (:func:`rules_digest`: the code that computes the
  rows and prints them).

Anything else, or any doubt (no index, a file SQLite cannot read, a URL, a ``~`` to expand), and
the store is listed the normal way (app.workspace.catalog_records), which stores the stamp again.
docs/catalog.md, "``ls --json`` of a store where nothing changed". The same checks give
:func:`unchanged_token`, with which the Runs page reuses a listing while nothing changed (app/ui/store.py).
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
import zlib
from _json import encode_basestring_ascii as _json_str  # json.dumps of a str: json's own C encoder
from collections.abc import Sequence

__all__ = ["STAMP_AGE_NS", "rules_digest", "path_text", "store_stamp", "printed_parts", "problem_items", "json_document",
           "print_from_index", "unchanged_token"]

_APP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The code whose rules decide a row's numbers and its printed text: a change to any of these
# recomputes every entry (app.workspace.signatures.open_index).
RULES_SOURCES = ("workspace/catalog_rows.py", "workspace/catalog_listing.py", "workspace/catalog_records.py",
                 "workspace/cached_steps.py", "workspace/signatures.py", "workspace/printed_listing.py",
                 "data/change_journal.py", "data/store_rows.py", "data/runs.py", "data/catalog_index.py",
                 "analysis/run/step_time.py", "analysis/run/final_value.py")
_INDEX = os.path.join(".torchscope", "catalog.sqlite3")  # catalog_index.INDEX_DIR / INDEX_FILE
_INDEX_FORMAT = "4"  # catalog_index.INDEX_FORMAT
_COMPACT_BYTES = 256 * 1024  # change_journal.COMPACT_BYTES: a bigger journal is compacted by a listing
# A stamp is stored only when the store folder's last change is at least this much older than the
# stat that read it: a file system's timestamps come from a clock that ticks every few ms.
STAMP_AGE_NS = 1_000_000_000


def rules_digest() -> str:
    """A digest of :data:`RULES_SOURCES` (an entry made by other code is not reused).

    CRC-32 and Adler-32 of the sources, and their length: a key of the code version, not a
    security boundary, and zlib is loaded already where hashlib would load OpenSSL."""
    crc, adler, size = 0, 1, 0
    for rel in RULES_SOURCES:
        try:
            with open(os.path.join(_APP, rel), "rb") as f:
                data = f.read()
        except OSError:
            data = rel.encode()
        crc, adler, size = zlib.crc32(data, crc), zlib.adler32(data, adler), size + len(data)
    return f"{crc:08x}{adler:08x}-{size}"


def path_text(value: str) -> str:
    """``str(pathlib.PurePosixPath(value))`` without pathlib: empty and ``.`` parts dropped, a
    leading ``//`` kept (POSIX), ``.`` for nothing. Not for Windows paths (no caller there)."""
    root = "//" if value.startswith("//") and not value.startswith("///") else ("/" if value.startswith("/") else "")
    parts = [p for p in value.split("/") if p and p != "."]
    return root + "/".join(parts) if (root or parts) else "."


def store_stamp(store: str, now_ns: int | None = None) -> str | None:
    """The store folder's stamp (device, inode, mtime and ctime in ns), or None when it is not a
    folder or changed too recently for its stamp to show the next change (:data:`STAMP_AGE_NS`).
    Take it *before* listing the folder: a change after it then gives another stamp."""
    try:
        st = os.stat(store)
    except (OSError, ValueError):
        return None
    if (st.st_mode & 0o170000) != 0o040000:
        return None
    now = time.time_ns() if now_ns is None else now_ns
    if now - max(st.st_mtime_ns, st.st_ctime_ns) < STAMP_AGE_NS:
        return None
    return _stamp(st)


def _stamp(st: os.stat_result) -> str:
    return f"{st.st_dev} {st.st_ino} {st.st_mtime_ns} {st.st_ctime_ns}"


def printed_parts(folder: str, record_text: str, path_json: str, prefix: str) -> tuple[bytes, int, bytes]:
    """(base, cut, out) of a record text as the ``"runs"`` array prints it (indented by 4) for a
    store whose path prefix is ``prefix`` (signatures.path_prefix): ``out`` is the printed record,
    ``base`` the prefix as it appears in it (JSON-escaped), at byte ``cut``: the record of the same
    run in a store spelled another way is ``out[:cut] + <that prefix> + out[cut + len(base):]``
    (``path_json``: the JSON of the placeholder path the record text holds)."""
    head, _, tail = record_text.rpartition(path_json)
    head_b = ("    " + head.replace("\n", "\n    ") + '"').encode("utf-8", "surrogateescape")
    base = _json_str(prefix)[1:-1].encode("ascii")
    tail_b = (_json_str(folder)[1:-1] + '"' + tail.replace("\n", "\n    ")).encode("utf-8", "surrogateescape")
    return base, len(head_b), head_b + base + tail_b


def problem_items(problems: Sequence[str]) -> str:
    """The problems as their JSON strings, one a line (how the index keeps them: ``printed.problems``)."""
    return "\n".join(_json_str(str(p)) for p in problems)


def json_document(root: str, runs_text: bytes, problems: Sequence[str]) -> bytes:
    """``json.dumps({"root": root, "runs": [...], "problems": problems}, indent=2)`` as UTF-8 bytes,
    with the runs array given as its printed bytes, so that 10,000 stored records are joined, not
    encoded or decoded again."""
    return _document_bytes(root, runs_text, [_json_str(str(p)) for p in problems])


def _document_bytes(root: str, runs_text: bytes, items: Sequence[str]) -> bytes:
    # ``items``: the problems as JSON strings; json.dumps(problems, indent=2) nested one level down
    probs = "[\n    " + ",\n    ".join(items) + "\n  ]" if items else "[]"
    head = f'{{\n  "root": {_json_str(root)},\n  "runs": '.encode()
    return head + runs_text + f',\n  "problems": {probs}\n}}\n'.encode("utf-8", "surrogateescape")


# The records joined in SQLite, in the table's order: a scan of a WITHOUT ROWID table that names no
# index (NOT INDEXED) walks its primary key, which is the printed order. Measured 2-3x faster than
# the same with a subquery's ORDER BY (a co-routine) and than joining 10,000 rows in Python;
# tests/workspace/test_printed_listing.py compares the order with the normal listing's. A record
# stored for the same spelling of the store's path is taken as it is (~2x faster than cutting it).
_RUNS_SQL = ("SELECT CAST(group_concat(CASE WHEN base = ?1 THEN out ELSE substr(out, 1, cut) || ?1 || "
             "substr(out, cut + length(base) + 1) END, ',' || char(10)) AS BLOB) "
             "FROM printed NOT INDEXED WHERE out IS NOT NULL")


def _vouched(conn: sqlite3.Connection, st: os.stat_result, token: str, size: int) -> bool:
    """Whether the open index ``conn`` vouches that nothing changed since the listing that wrote its
    entries (the module docstring's checks), for the store folder's ``stat`` ``st`` and the change
    journal's ``token`` and ``size`` as read before. Call it inside a read transaction."""
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    want = {"format": _INDEX_FORMAT, "rules": rules_digest(), "journal_token": token,
            "journal_offset": str(size), "folders_stamp": _stamp(st)}
    if any(meta.get(k) != v for k, v in want.items()):
        return False
    return conn.execute("SELECT 1 FROM printed WHERE live LIMIT 1").fetchone() is None


def _open_vouched(store: str) -> tuple[sqlite3.Connection, str] | None:
    """(an index connection inside a read transaction that vouches for the store, the state it vouches
    for: the store folder's stamp and the journal's token and size), or None on any doubt."""
    index = os.path.join(store, _INDEX)
    if not os.path.isfile(index):
        return None
    from app.workspace.ls_snapshot import journal_position

    token, size = journal_position(store)
    if size > _COMPACT_BYTES or (token and not (token.isascii() and token.isalnum())):
        return None
    try:
        st = os.stat(store)
    except (OSError, ValueError):
        return None
    try:
        conn = sqlite3.connect(index, timeout=5.0, isolation_level=None)
    except sqlite3.Error:
        return None
    try:
        conn.execute("BEGIN")  # one read transaction: the checks and what is read after them belong together
        if _vouched(conn, st, token, size):
            return conn, f"{_stamp(st)} {token} {size}"
    except sqlite3.Error:
        pass
    conn.close()
    return None


def unchanged_token(store: str) -> str | None:
    """A token of the store's state, for a cache of its listing (the Runs page's store view,
    app/ui/store.py): the store folder's stamp and the change journal's token and size, given only
    while the index vouches that nothing changed since its last listing (the same checks as
    ``ls --json`` printed from the index: every journal line consumed, the stamp the one stored,
    no live entry, this format and these rules). None on any doubt.

    Take it *before* listing: when a later call gives the same token, no run was added, removed,
    renamed or replaced in the store and none changed through the run format's writers (a tag
    edited, a run finishing: each appends to the journal) since then, so that listing is still
    right. Like ``ls`` itself, it does not see an edit by another tool (docs/catalog.md)."""
    opened = _open_vouched(store)
    if opened is None:
        return None
    conn, token = opened
    conn.close()
    return token


def _document(store: str, value: str) -> list[bytes] | None:
    """The whole ``ls --json`` document of ``store`` from its index, in pieces (6 MB for 10,000 runs:
    not copied into one), or None when the index cannot vouch for it (see the module docstring)."""
    opened = _open_vouched(store)
    if opened is None:
        return None
    conn = opened[0]
    try:
        shown = path_text(value)
        base = "" if shown == "." else os.path.join(shown, "")
        (runs,) = conn.execute(_RUNS_SQL, (_json_str(base)[1:-1].encode("ascii"),)).fetchone()
        listing_p: list[str] = []
        row_p: list[str] = []
        for level, lines in conn.execute("SELECT listing_level, problems FROM printed "
                                         "WHERE problems IS NOT NULL ORDER BY folder DESC"):
            (listing_p if level else row_p).append(lines)
        conn.execute("COMMIT")
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    items = [item for lines in (*listing_p, *row_p) for item in lines.split("\n")]
    if runs is None:
        return [_document_bytes(shown, b"[]", items)]
    head, _, tail = _document_bytes(shown, b"\0", items).partition(b"\0")  # no NUL in a JSON text
    return [head + b"[\n", runs, b"\n  ]" + tail]


def print_from_index(argv: Sequence[str]) -> bool:
    """Print ``ls --json``'s document from the store's index when ``argv`` is ``ls --json [--root
    DIR]`` and the index vouches for it; False (nothing printed) otherwise, and on any doubt."""
    from app.workspace.ls_snapshot import json_root, root_value

    ok, root = json_root(argv)
    if not ok:
        return False
    value = root_value(root)
    if ":" in value or value.startswith(("-", "~")):  # a store URL (read through its mirror), an option, a home
        return False
    pieces = _document(value, value)
    if pieces is None:
        return False
    out = sys.stdout
    buffer = getattr(out, "buffer", None)
    if buffer is None:  # a StringIO put in its place
        out.write(b"".join(pieces).decode("utf-8", "surrogateescape"))
        return True
    out.flush()
    for piece in pieces:
        buffer.write(piece)
    buffer.flush()
    return True
