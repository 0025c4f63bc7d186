"""An SQLite ledger's file before it is opened: whether it holds a ledger, whether
this process can write it, and the URI that opens it read-only."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from ledger.errors import LedgerNotFoundError, StorageError

__all__ = [
    "check_writable",
    "foreign_file",
    "holds_ledger",
    "holds_no_event",
    "others_tables",
    "read_only_uri",
    "unwritable",
]


def foreign_file(path: str) -> str | None:
    """What the file at ``path`` is, said of one that holds no ledger ("not an
    SQLite database", "an SQLite database without a ledger in it"); None when there
    is no file, it is empty, or it cannot be read."""
    if os.path.isdir(path):
        return "a directory"
    # Asked of SQLite first: closing any handle a process has on a file drops every
    # lock the process holds on it (POSIX), SQLite's included, and with them the
    # WAL a writer of this process relies on (another process would then check
    # it into the file and delete it: commits confirmed here, lost). SQLite's own
    # connections share the process's locks. Only a file SQLite cannot read as a
    # database, which no connection here can hold, is read with ``open``.
    try:
        size = os.path.getsize(path)
        c = sqlite3.connect(f"{Path(path).absolute().as_uri()}?mode=ro", uri=True)
        try:
            c.execute("PRAGMA schema_version").fetchone()
            return "an SQLite database without a ledger in it" if size else None
        finally:
            c.close()
    except (OSError, sqlite3.Error):
        pass
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return None
    if head and head != b"SQLite format 3\x00":
        return "not an SQLite database"
    return "an SQLite database without a ledger in it" if head else None


def others_tables(path: str) -> list[str]:
    """The tables of the SQLite file at ``path`` that are not a ledger's (a ledger's
    are ``stored_events`` and ``pl_…``), read-only; [] when there is no file, it
    is empty or unreadable, and ``["(not an SQLite database)"]`` for another
    kind of file."""
    if foreign_file(path) == "not an SQLite database":
        return ["(not an SQLite database)"]
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return []
    try:
        c = sqlite3.connect(f"{Path(path).absolute().as_uri()}?mode=ro", uri=True)
        try:
            names = [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        finally:
            c.close()
    except sqlite3.Error:
        return []
    return sorted(n for n in names if n != "stored_events" and not n.startswith(("pl_", "sqlite_")))


def holds_ledger(path: str) -> bool:
    """Whether the SQLite file at ``path`` exists and holds a ledger's events table;
    opened read-only, so nothing in it is changed and no file is created where
    there is none (beside a database in WAL mode, SQLite may leave its ``-wal``
    and ``-shm``, as any reader does).

    Raises:
        StorageError: the file holds a ledger that SQLite cannot open where it is
            (a ledger in WAL mode needs to create its ``-shm`` file beside it, which
            a read-only directory or file system refuses), or it is an SQLite file
            SQLite cannot read (damaged: "database disk image is malformed").
        sqlite3.OperationalError: the file could not be read for another reason
            (a full disk, a lock, an I/O error): whether it holds a ledger is not
            known, so it is not answered "no".
    """
    if not os.path.isfile(path):
        return False
    uri = Path(path).absolute().as_uri()
    try:
        return _has_events_table(f"{uri}?mode=ro")
    except sqlite3.OperationalError as exc:
        cannot_open = _cannot_share(exc)
        if not cannot_open:
            raise
    except sqlite3.Error as exc:
        if foreign_file(path) != "an SQLite database without a ledger in it":
            return False  # not a database at all
        raise StorageError(
            f"the SQLite file at {path} cannot be read: {exc}; whether it holds a "
            "ledger is not known (a damaged file: restore it from a copy)"
        ) from None
    try:
        held = cannot_open and _has_events_table(f"{uri}?mode=ro&immutable=1")
    except sqlite3.Error:
        return False
    if held:
        raise _not_writable(
            path,
            "SQLite cannot create its -wal and -shm files beside it (a read-only "
            "directory or file system, or no permission to write there)",
        )
    return False


def holds_no_event(path: str) -> bool:
    """Whether the SQLite file at ``path`` holds a ledger's tables with nothing in
    them (all or some of them, as an ``init`` or a ``copy`` that did not finish
    leaves them), read-only: its events table and at least one of the ledger's own
    (``pl_…``: an events table alone may be another eventsourcing application's),
    none holding a row but the views' layout and position (``pl_tracking``) and
    PostgreSQL's mark. False when there is no file, or it cannot be read as asked
    (opening it says why)."""
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return False
    try:
        c = sqlite3.connect(f"{Path(path).absolute().as_uri()}?mode=ro", uri=True)
        try:
            names = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            own = {n for n in names if n.startswith("pl_")}
            if "stored_events" not in names or not own:
                return False
            held = ("stored_events", *sorted(own - {"pl_tracking", "pl_schema"}))
            return not any(c.execute(f'SELECT 1 FROM "{t}" LIMIT 1').fetchone() for t in held)
        finally:
            c.close()
    except sqlite3.Error:
        return False


def check_writable(path: str) -> None:
    """Refuse to open the existing SQLite ledger at ``path`` for writing where this
    process cannot write it (:func:`unwritable`): every command, and a read's run,
    would fail otherwise.

    Raises:
        StorageError: naming why, and the read-only URL that opens it.
    """
    why = unwritable(path)
    if why is not None:
        raise _not_writable(path, why)


def unwritable(path: str) -> str | None:
    """Why this process cannot write the existing SQLite ledger at ``path``: the
    file itself, or the directory where SQLite must create its ``-wal`` and
    ``-shm`` files; None if it can, or there is no file."""
    if not os.path.isfile(path):
        return None
    real = os.path.realpath(path)
    if not os.access(real, os.W_OK):
        return "the file is not writable (no permission, or a read-only file system)"
    beside = [f"{real}-wal", f"{real}-shm"]
    if not os.access(os.path.dirname(real), os.W_OK) and not all(
        os.access(f, os.W_OK) for f in beside
    ):
        return (
            "SQLite cannot create its -wal and -shm files beside it (a read-only "
            "directory or file system, or no permission to write there)"
        )
    for kept, remedy in (  # left by an open while the file was read-only, or another user's
        (beside[0], "make it writable (never remove it: it may hold the newest transactions)"),
        (beside[1], "make it writable, or remove it while no process has the ledger open"),
    ):
        if os.path.exists(kept) and not os.access(kept, os.W_OK):
            return (
                f"its {kept[len(real) :]} file is not writable (made while the ledger was "
                f"read-only, or another user's): {remedy}"
            )
    return None


def _not_writable(path: str, why: str) -> StorageError:
    return StorageError(
        f"the ledger at {path} cannot be opened for writing where it is: {why}; open it "
        f"read-only (sqlite:///{path}?mode=ro: reads, audit, verify and bundles) or copy "
        "the file to a writable directory (nothing was changed)"
    )


def _cannot_share(exc: sqlite3.OperationalError) -> bool:
    """Whether SQLite refused a read-only open for want of its ``-shm`` file: "unable
    to open" where the file system is read-only, "attempt to write a readonly
    database" where the directory may not be written."""
    return "unable to open" in str(exc) or "readonly database" in str(exc)


def read_only_uri(path: str) -> str:
    """The SQLite URI that opens the ledger at ``path`` read-only (``mode=ro``).

    Where SQLite cannot create the ``-shm`` file a WAL database needs beside it
    (a read-only directory or file system), the file is opened as immutable:
    only when no ``-wal`` file with content is beside it, since an immutable
    open does not read the WAL, and its transactions would be silently missing.
    Immutable, the file is read as it was when opened: what a writer adds
    through another path later is not seen until it is opened again.

    Raises:
        LedgerNotFoundError: no file at ``path``, or no ledger in it.
        StorageError: the file cannot be read where it is.
    """
    if not os.path.isfile(path):
        raise LedgerNotFoundError(f"no ledger at {path} (nothing was created)")
    if foreign_file(path) == "not an SQLite database":
        raise LedgerNotFoundError(
            f"no ledger at {path}: the file there is not an SQLite database (nothing was changed)"
        )
    uri = Path(path).absolute().as_uri()
    read_only = f"{uri}?mode=ro"
    try:
        held = _has_events_table(read_only)
    except sqlite3.OperationalError as exc:
        if not _cannot_share(exc):
            raise StorageError(f"cannot open the ledger at {path} read-only: {exc}") from None
        wal = Path(f"{os.path.realpath(path)}-wal")  # where SQLite looks: beside the file
        if wal.is_file() and wal.stat().st_size > 0:
            raise StorageError(
                f"cannot open the ledger at {path} read-only where it is: its -wal file "
                "holds transactions not yet in the main file, and SQLite cannot create "
                "the -shm file it needs to read them (a read-only directory or file "
                "system); copy the file with its -wal file to a writable directory, or "
                "checkpoint it where it was written (nothing was changed)"
            ) from None
        read_only = f"{uri}?mode=ro&immutable=1"
        try:
            held = _has_events_table(read_only)
        except sqlite3.Error as again:
            raise StorageError(f"cannot open the ledger at {path} read-only: {again}") from None
    except sqlite3.Error as exc:
        raise StorageError(f"cannot open the ledger at {path} read-only: {exc}") from None
    if not held:
        found = foreign_file(path)
        raise LedgerNotFoundError(
            f"no ledger at {path}"
            + ("" if found is None else f": the file there is {found}")
            + " (nothing was changed)"
        )
    return read_only


def _has_events_table(uri: str) -> bool:
    """Whether the database at ``uri`` has the events table.

    Raises:
        sqlite3.Error: it cannot be opened or read as asked.
    """
    c = sqlite3.connect(uri, uri=True)
    try:
        found = c.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='stored_events'"
        ).fetchone()
    finally:
        c.close()
    return found is not None
