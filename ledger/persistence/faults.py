"""Storage failures as ledger errors.

Whatever the database or the disk reports — a full disk, a lost connection, a lock
held too long, a server refusing a connection — becomes one typed
:class:`~ledger.errors.LedgerError` with a one-line message naming the ledger (its
URL redacted) and the server's own reason. psycopg is never imported here: its
errors are recognised by their module and SQLSTATE, so an SQLite-only process does
not load it.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from collections.abc import Iterator
from typing import Any

from eventsourcing.persistence import PersistenceError

from ledger.errors import (
    ConcurrencyError,
    ConnectionLostError,
    CorruptEventError,
    DiskFullError,
    StorageError,
)

#: SQLite primary result codes the ledger tells apart.
_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_IOERR, _SQLITE_FULL = 5, 6, 10, 13

#: Free bytes below which an SQLite I/O error on write is taken for a full disk.
_NEARLY_FULL = 1 << 20

#: SQLSTATEs of a lost connection: the server ended the session (terminated
#: backend, shutdown, crash, idle-in-transaction timeout) or cannot be reached.
_LOST_STATES = ("57P01", "57P02", "57P03", "25P03")
#: SQLSTATEs of a conflict with another transaction (the command is tried again).
_BUSY_STATES = ("40001", "40P01")
#: SQLSTATE of a lock not granted within ``lock_timeout`` (already waited: not retried).
_LOCK_TIMEOUT = "55P03"
#: SQLSTATE of a statement cancelled (``statement_timeout``, ``pg_cancel_backend``).
_CANCELLED = "57014"

#: Errors a backend raises for the database (wrapped by eventsourcing or not).
DATABASE_ERRORS: tuple[type[BaseException], ...] = (PersistenceError, sqlite3.Error)


class CommitFailed(Exception):
    """The database failed while committing a write transaction (its cause says how):
    on a lost connection, the command may or may not have been applied."""


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then what caused it (``__cause__``, else ``__context__``), each once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def root_cause(exc: BaseException) -> BaseException:
    """The driver's exception behind eventsourcing's wrapper (or ``exc`` itself)."""
    for current in _chain(exc):
        if isinstance(current, (sqlite3.Error, OSError)) or _is_psycopg(current):
            return current
    return exc


def closed_connection(exc: BaseException) -> bool:
    """Whether ``exc`` is a driver's refusal of a connection or pool already closed
    (SQLite's "Cannot operate on a closed database", psycopg's "the connection is
    closed", a closed pool), not a failure of the database itself."""
    for current in _chain(exc):
        text = str(current).lower()
        if "closed" in text and ("database" in text or "connection" in text or "pool" in text):
            return True
    return False


def _is_psycopg(exc: BaseException) -> bool:
    return type(exc).__module__.split(".", 1)[0] in ("psycopg", "psycopg_pool")


def reason_of(exc: BaseException, secret: str = "") -> str:
    """The database's own reason, on one line, without ``secret`` (a password)."""
    cause = root_cause(exc)
    # A PostgreSQL server error's own sentence, without the statement and caret
    # (``LINE 1: INSERT INTO …``) that libpq appends: those are not a reason.
    diag = getattr(cause, "diag", None)
    primary = getattr(diag, "message_primary", None) if _is_psycopg(cause) else None
    text = primary or str(cause) or str(exc) or type(cause).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    text = "; ".join(lines) if lines else type(cause).__name__
    # libpq: 'connection failed: connection to server at "h" (…), port 5432 failed:
    # FATAL:  database "x" does not exist' — the server's words come last.
    if "FATAL:" in text:
        where, _, said = text.partition("FATAL:")
        where = where.removeprefix("connection failed:").strip().rstrip(":").strip()
        text = f"{' '.join(said.split())} ({where.removesuffix(' failed')})"
    text = text.removeprefix("connection failed: ").removeprefix("consuming input failed: ")
    text = " ".join(text.split())
    if secret and secret in text:
        text = text.replace(secret, "***")
    return text


def deleted_event(exc: BaseException) -> CorruptEventError | None:
    """The error for a write whose event's Merkle leaf clashed with one stored (an
    ``IntegrityError``): never a race, as writers hold the writers' lock, but an
    event the ledger appended deleted behind its back, whose position the next
    event took; None for any other clash (a version clash, tried again)."""
    if "pl_merkle_leaves" not in str(exc):
        return None
    return CorruptEventError(
        "an event the ledger appended was deleted behind its back (the next event's "
        "position holds a Merkle leaf already); nothing was written: `provledger verify` "
        "names it"
    )


def is_busy(exc: BaseException) -> bool:
    """True if ``exc`` says another writer held a lock or conflicted (the command is
    tried again); a PostgreSQL lock timeout is not: ``lock_timeout`` was waited."""
    cause = root_cause(exc)
    if isinstance(cause, sqlite3.Error):
        code = getattr(cause, "sqlite_errorcode", None)
        if code is not None:
            return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
        message = str(cause).lower()
        return "locked" in message or "busy" in message
    if _is_psycopg(cause):
        return getattr(cause, "sqlstate", None) in _BUSY_STATES
    message = str(exc).lower()
    return any(word in message for word in ("locked", "busy", "lock timeout", "deadlock"))


def storage_error(
    exc: BaseException,
    url: str,
    *,
    path: str | None = None,
    opening: bool = False,
    committing: bool = False,
    secret: str = "",
) -> StorageError | ConcurrencyError:
    """The typed ledger error for a failure of the database behind ``url``.

    Args:
        exc: what the driver (or eventsourcing's wrapper of it) raised.
        url: the ledger URL as shown to users (already redacted).
        path: the SQLite file, to tell a full disk from another I/O error.
        opening: the failure happened while opening the ledger.
        committing: the failure happened while committing a write.
        secret: a password to keep out of the message even if a driver echoed it.

    Raises:
        KeyboardInterrupt: the failure came of one (Ctrl-C landing while the driver
            was busy, which then failed to end its work): it is raised again, so
            that a loop retrying what failed as a ``LedgerError`` still stops.
    """
    for current in _chain(exc):
        if isinstance(current, KeyboardInterrupt):
            raise current
    cause = root_cause(exc)
    reason = reason_of(exc, secret)
    head = f"cannot open ledger {url!r}" if opening else f"ledger {url!r}"
    if is_busy(exc) or getattr(cause, "sqlstate", None) == _LOCK_TIMEOUT:
        return ConcurrencyError(
            f"{head}: another session held a lock on the ledger's tables ({reason}); "
            "nothing was written — try again"
        )
    if _is_full(cause, path):
        return DiskFullError(
            f"{head}: the disk is full ({reason}); nothing was written — free space and try again"
        )
    if getattr(cause, "sqlstate", None) == _CANCELLED and not committing:
        return StorageError(
            f"{head}: the database cancelled a statement ({reason}: the role's or "
            "PGOPTIONS' statement_timeout, or an administrator's cancel); nothing was "
            "written — try again, or raise that timeout"
        )
    folder = _missing_folder(cause, path) if opening else None
    if folder is not None:
        return StorageError(f"{head}: the directory {folder!r} does not exist (create it first)")
    folder = _unwritable_folder(cause, path) if opening else None
    if folder is not None:
        return StorageError(
            f"{head}: the file does not exist and the directory {folder!r} is not writable "
            "(a read-only file system, or no permission): create the ledger elsewhere"
        )
    if not opening and (_is_lost(cause) or (committing and _is_pipeline_stuck(cause))):
        if committing:
            # The driver's words for a connection that died mid-pipeline say nothing
            # a user can act on: what happened is that the connection went.
            why = "" if _is_pipeline_stuck(cause) and not _is_lost(cause) else f" ({reason})"
            return ConnectionLostError(
                f"{head}: the connection to the database server was lost while committing"
                f"{why}; the command may have been applied — check before trying again"
            )
        return ConnectionLostError(
            f"{head}: the connection to the database server was lost ({reason}); "
            "the command was not applied — try again"
        )
    return StorageError(f"{head}: {reason}")


def _missing_folder(cause: BaseException, path: str | None) -> str | None:
    """The directory of the SQLite file ``path`` if SQLite could not open the file
    because that directory does not exist (SQLite says only "unable to open
    database file"), else None."""
    if path is None or not isinstance(cause, sqlite3.Error):
        return None
    if getattr(cause, "sqlite_errorcode", None) != sqlite3.SQLITE_CANTOPEN:
        return None
    folder = os.path.dirname(os.path.abspath(path))
    return None if os.path.isdir(folder) else folder


def _unwritable_folder(cause: BaseException, path: str | None) -> str | None:
    """The directory of the SQLite file ``path`` if SQLite could not create the
    file there because the directory cannot be written, else None."""
    if path is None or not isinstance(cause, sqlite3.Error):
        return None
    if getattr(cause, "sqlite_errorcode", None) != sqlite3.SQLITE_CANTOPEN:
        return None
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.exists(path) or not os.path.isdir(folder) or os.access(folder, os.W_OK):
        return None
    return folder


def _is_full(cause: BaseException, path: str | None) -> bool:
    if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return True
    if _is_psycopg(cause):
        return getattr(cause, "sqlstate", None) == "53100"
    if not isinstance(cause, sqlite3.Error):
        return False
    code = getattr(cause, "sqlite_errorcode", None)
    if code is None:
        return "disk is full" in str(cause)
    if code & 0xFF == _SQLITE_FULL:
        return True
    # A write refused by the file system surfaces as an I/O error: out of space, or
    # the process's file size limit (RLIMIT_FSIZE) reached.
    return code & 0xFF == _SQLITE_IOERR and (_size_limited() or _nearly_full(path))


def _size_limited() -> bool:
    try:
        import resource
    except ImportError:  # pragma: no cover  (not on Windows)
        return False
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return bool(soft != resource.RLIM_INFINITY)


def _nearly_full(path: str | None) -> bool:
    if not path:
        return False
    try:
        stat = os.statvfs(os.path.dirname(os.path.abspath(path)) or ".")
    except (OSError, AttributeError):
        return False
    return stat.f_bavail * stat.f_frsize < _NEARLY_FULL


def _is_pipeline_stuck(cause: BaseException) -> bool:
    """psycopg could not leave pipeline mode after a command's last writes and its
    COMMIT were sent (the server ended the session as they ran): whether the
    COMMIT was applied is unknown, as when the connection is lost."""
    return (
        _is_psycopg(cause)
        and type(cause).__name__ == "OperationalError"
        and "pipeline mode" in str(cause)
    )


def _is_lost(cause: BaseException) -> bool:
    if not _is_psycopg(cause):
        return False
    state: Any = getattr(cause, "sqlstate", None)
    if isinstance(state, str):
        return state.startswith("08") or state in _LOST_STATES
    name = type(cause).__name__
    if name == "PoolTimeout":
        return False
    # Client-side: the socket was closed under the connection.
    message = str(cause).lower()
    return name in ("OperationalError", "InterfaceError") and any(
        word in message for word in ("connection", "server closed", "terminat")
    )


def missing_from_views(exc: BaseException) -> bool:
    """Whether ``exc`` is a query naming a view table or column the database lacks."""
    cause = root_cause(exc)
    if getattr(cause, "sqlstate", None) in ("42703", "42P01"):  # PostgreSQL's undefined
        return True
    text = str(cause)
    return isinstance(cause, sqlite3.OperationalError) and (
        text.startswith("no such column") or text.startswith("no such table")
    )
