"""A copy's target before anything is written to it: which database it is, whether
it is the source's own (asked of the servers, for PostgreSQL), and whether it is
empty (no ledger rows, no other program's tables), read without opening it as a
ledger, which would create tables or catch up views; under the copy's writers'
lock, whether it was written to meanwhile; and after a failure, what the copy left
there: no row, and no file it created (removed only while its path still names
that file).

A new SQLite file is built beside its name, in the hidden ``.NAME.partial-PID``
(:func:`claim_partial`), and given the name only once it is complete, checked and
one self-contained file (:func:`put_in_place`): a copy killed midway leaves no
file at the name, where one would open as an empty ledger that verifies, and
the next copy into that folder removes what it left.
"""

from __future__ import annotations

import os
import re
import sqlite3
import stat
import threading
import time
from collections.abc import Sequence
from contextlib import closing, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote
from uuid import UUID

from ledger.errors import CorruptEventError, InvalidURLError, LedgerError, StorageError
from ledger.merkle import LogDigest, root_of
from ledger.persistence.base import PRIMARY_TABLES
from ledger.persistence.sqlite_files import foreign_file, others_tables
from ledger.persistence.urls import Backend, resolve_url

__all__ = [
    "EVENT_TABLES",
    "PRIMARY_TABLES",
    "Made",
    "Server",
    "claim_file",
    "claim_partial",
    "clear_dead_partials",
    "failure",
    "insert_events",
    "not_empty",
    "occupant",
    "partial_url",
    "put_in_place",
    "refuse_occupied",
    "refuse_same",
    "remove_claimed",
    "remove_partial",
    "server_of",
    "set_sequence",
    "target_of",
]

#: The names a ledger's events table has (eventsourcing's, on SQLite and PostgreSQL).
EVENT_TABLES = ("stored_events", "provledger_events")
#: A PostgreSQL server and database as the server names them (:func:`server_of`):
#: its system identifier (None where ``pg_control_system()`` is not permitted),
#: when it started, and the database's name.
Server = tuple[str | None, str, str]


def target_of(target: str) -> Backend:
    """The target's backend; ``memory:`` and read-only URLs refused."""
    if not isinstance(target, str):
        raise InvalidURLError(f"copy target must be a URL string, got {type(target).__name__}")
    into = resolve_url(target)
    if into.kind == "memory":
        raise InvalidURLError(
            "copy refused: the target memory: would be gone once copied; give a "
            "sqlite:///path.db file or a postgresql:// schema (nothing was written)"
        )
    if into.read_only:
        raise InvalidURLError(
            f"copy refused: the target {into.url!r} is opened read-only (mode=ro); "
            "nothing was written"
        )
    return into


def refuse_same(source: Backend, into: Backend, server: Server | None = None) -> None:
    """Refuse a target that is the source's own file or schema. For PostgreSQL,
    ``server`` is the source's (:func:`server_of`; None: not known): a target
    naming the same schema is asked which server and database it is on, since
    two URLs' hosts may be one server (``localhost`` and ``127.0.0.1``)."""
    if source.kind != into.kind:
        return
    if into.kind == "sqlite" and source.path is not None and into.path is not None:
        same = os.path.realpath(source.path) == os.path.realpath(into.path)
        with suppress(OSError):  # the target does not exist yet
            same = same or os.path.samefile(source.path, into.path)
        # SQLite's own files beside the source: the next opening of the source
        # would remove (or take for its log) the copy written there.
        beside = {os.path.realpath(source.path) + end for end in ("-wal", "-shm", "-journal")}
        if os.path.realpath(into.path) in beside:
            raise InvalidURLError(
                f"copy refused: the target {into.url!r} is a file SQLite keeps beside the "
                "source ledger (its -wal, -shm or -journal); give another file (nothing "
                "was written)"
            )
    else:
        keys = ("POSTGRES_HOST", "POSTGRES_PORT", "POSTGRES_DBNAME", "POSTGRES_SCHEMA")
        same = all(source.env.get(k) == into.env.get(k) for k in keys)
        schema = source.env.get("POSTGRES_SCHEMA") == into.env.get("POSTGRES_SCHEMA")
        if not same and schema and server is not None:
            same = _same_server(server, _target_server(into.env))
    if same:
        raise InvalidURLError(
            f"copy refused: the target {into.url!r} is the source ledger itself; give "
            "another file or schema (nothing was written)"
        )


def server_of(c: Any) -> Server:
    """The server and database the PostgreSQL connection or cursor ``c`` is on
    (:data:`Server`), asked of the server: its system identifier only where
    ``pg_control_system()`` may be called (a superuser's, or granted).

    Raises:
        psycopg.Error: the server could not be asked.
    """
    c.execute(
        "SELECT extract(epoch FROM pg_postmaster_start_time())::text AS started, "
        "current_database() AS db, "
        "has_function_privilege('pg_catalog.pg_control_system()', 'EXECUTE') AS may"
    )
    started, db, may = _values(c.fetchone())
    system = None
    if may:
        c.execute("SELECT system_identifier::text AS system FROM pg_catalog.pg_control_system()")
        system = _values(c.fetchone())[0]
    return system, str(started), str(db)


def _values(row: Any) -> tuple[Any, ...]:
    """A row's values, whether the cursor gives tuples or dicts."""
    return tuple(row.values()) if isinstance(row, dict) else tuple(row)


def _target_server(env: dict[str, str]) -> Server | None:
    """The target's :data:`Server` (None when it cannot be reached: opening it
    then says why)."""
    import psycopg

    from ledger.persistence.pg_pool import plain_connection

    try:
        with plain_connection(env) as conn:
            return server_of(conn.cursor())
    except psycopg.Error:
        return None


def _same_server(ours: Server, theirs: Server | None) -> bool:
    """Whether two :data:`Server` are one server's database (a system identifier
    not known on either side is not compared: the start time, to the microsecond,
    tells servers apart, a primary from its replica too)."""
    if theirs is None:
        return False
    systems = None in (ours[0], theirs[0]) or ours[0] == theirs[0]
    return systems and ours[1:] == theirs[1:]


def refuse_occupied(into: Backend) -> None:
    """Refuse a target holding ledger rows or another program's tables, read
    without opening it as a ledger (which would create or catch up tables)."""
    if into.kind == "postgresql":
        from ledger.persistence.pg_pool import others_pg_tables

        where = f"schema {into.env['POSTGRES_SCHEMA']!r} of {into.url}"
        others = others_pg_tables(into.env)
        held = None if others else _pg_rows(into.env)
    else:
        assert into.path is not None
        where = into.path
        found = "a directory" if os.path.isdir(into.path) else foreign_file(into.path)
        if found in ("a directory", "not an SQLite database"):
            raise StorageError(
                f"copy refused: the target {into.path} is {found}; give the path of a new "
                "file (nothing was written)"
            )
        others = others_tables(into.path)
        held = None if others else _sqlite_rows(into.path)
    if others:
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        raise StorageError(
            f"copy refused: the target {where} holds {shown}, not a ledger's tables; give "
            "a new file or a schema of its own (nothing was written)"
        )
    if held is not None:
        raise not_empty(where, *held)


def not_empty(where: str, table: str, newest: int | None) -> StorageError:
    """The refusal of a target (``where``) whose ``table`` holds rows (``newest``:
    the newest log position, when it is the events table)."""
    ledger = "" if newest is None else f" (a ledger at log position {newest})"
    return StorageError(
        f"copy refused: the target {where} is not empty: its table {table} holds rows"
        f"{ledger}; copy into a new file or an empty schema (nothing was written)"
    )


def _sqlite_rows(path: str) -> tuple[str, int | None] | None:
    """The first ledger table of the SQLite file at ``path`` holding rows, and its
    newest log position if it is the events table (read-only); None if none."""
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return None
    uri = f"{Path(path).absolute().as_uri()}?mode=ro"
    try:
        with closing(sqlite3.connect(uri, uri=True)) as con:
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            for table in (*EVENT_TABLES, *PRIMARY_TABLES):
                if table in names and con.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone():
                    newest = None
                    if table in EVENT_TABLES:
                        newest = int(con.execute(f"SELECT MAX(rowid) FROM {table}").fetchone()[0])
                    return table, newest
    except sqlite3.Error as exc:
        raise StorageError(
            f"copy refused: the target {path} cannot be read ({exc}); nothing was written"
        ) from None
    return None


def _pg_rows(env: dict[str, str]) -> tuple[str, int | None] | None:
    """:func:`_sqlite_rows` for a PostgreSQL schema (None also when the server
    cannot be reached: opening the target then says why)."""
    import psycopg

    from ledger.persistence.pg_pool import plain_connection

    schema = env["POSTGRES_SCHEMA"]
    try:
        with plain_connection(env) as conn:
            for table in (*EVENT_TABLES, *PRIMARY_TABLES):
                name = f"{schema}.{table}"
                found = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()
                if not found or not found[0]:
                    continue
                if conn.execute(f"SELECT 1 FROM {name} LIMIT 1").fetchone():
                    newest = None
                    if table in EVENT_TABLES:
                        row = conn.execute(f"SELECT MAX(notification_id) FROM {name}").fetchone()
                        newest = int(row[0]) if row else None
                    return table, newest
    except psycopg.Error:
        return None
    return None


def claim_file(path: str) -> tuple[int, int] | None:
    """Create the copy's new SQLite file at ``path``, empty, readable and writable by
    its owner alone (0600), and return its device and inode (:func:`remove_claimed`).
    None where the path names something already (a file another process made
    since it was looked at, a link) or nothing can be created there (opening it
    says why): the copy then removes nothing."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return None
    try:
        made = os.fstat(fd)
    finally:
        os.close(fd)
    return made.st_dev, made.st_ino


def remove_claimed(path: str, claimed: tuple[int, int]) -> None:
    """Remove the SQLite file a failed copy created (:func:`claim_file`), with its
    ``-wal``, ``-shm`` and ``-journal``, if ``path`` still names that file: one
    another process put there since is its own."""
    try:
        found = os.lstat(path)
    except OSError:
        return
    if (found.st_dev, found.st_ino) != claimed:
        return
    for end in ("", "-wal", "-shm", "-journal"):
        with suppress(OSError):
            Path(f"{path}{end}").unlink(missing_ok=True)


# -- a new SQLite file, built beside its name ----------------------------------------

#: What SQLite names its own files beside a database file ``NAME``: ``NAME-wal``…
_SIDE_FILES = ("-journal", "-wal", "-shm")
#: What a failed copy into a new SQLite file left: nothing at its name.
_PARTIAL_LEFT = "no file was made at the target (the copy built beside it is removed)"
#: The partial files this process builds copies in (:func:`claim_partial`): two
#: threads' copies into one new file would share one.
_building: set[str] = set()
_building_lock = threading.Lock()


def claim_partial(path: str) -> str | None:
    """For a copy into the new SQLite file ``path``: the hidden file beside it that
    the copy is built in, ``.NAME.partial-PID``, created empty and readable and
    writable by its owner alone (0600), as a new ledger file is; given the name
    ``path`` once complete (:func:`put_in_place`). Partials in its folder left by
    copies (or backups) whose process is gone are removed first, whatever
    ``path`` names (:func:`clear_dead_partials`). None where ``path`` names
    something already (it is copied into where it is) or no file can be made
    beside it (opening the target says why).

    Raises:
        StorageError: the partial's own files' names would be too long for the
            folder, or another copy into ``path`` is running in this process.
    """
    clear_dead_partials(path)
    if os.path.lexists(path):
        return None
    refuse_stale_side_files(path, "copy")
    target = Path(path)
    partial = str(target.with_name(f".{target.name}.partial-{os.getpid()}"))
    longest = f"{Path(partial).name}-journal"
    limit = _name_max(target.parent)
    if len(os.fsencode(longest)) > limit:
        raise StorageError(
            f"copy refused: the name {target.name!r} is too long: the copy is built beside "
            f"it in {longest!r}, longer than the {limit} bytes a name may have there; give "
            "a shorter name (nothing was written)"
        )
    with _building_lock:
        # Known by where it is, not how the path was spelt (a link to the folder).
        partial = os.path.join(os.path.realpath(target.parent), Path(partial).name)
        if partial in _building:
            raise StorageError(
                f"copy refused: another copy into {path} is running in this process; wait "
                "for it to end (nothing was written)"
            )
        _unlink_all(partial)  # an earlier process's of this pid: it is gone
        try:
            os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except OSError:
            return None
        _building.add(partial)
    return partial


#: The size of a write-ahead log's header: a shorter ``-wal`` holds no frame.
_WAL_HEADER = 32


def refuse_stale_side_files(path: str, doing: str) -> None:
    """Refuse to give a finished copy the name ``path`` while SQLite files of an
    earlier database at that name lie beside it (its file deleted without them):
    the first open of the copy would replay that ``-wal`` or roll back that
    ``-journal`` into it, destroying it. An empty ``-wal`` (as a read-only open
    leaves one) and a ``-shm`` are harmless: SQLite rebuilds the one from the
    other.

    Raises:
        StorageError: naming the file and what to do (nothing was written there).
    """
    for end, least in (("-wal", _WAL_HEADER), ("-journal", 1)):
        try:
            size = os.lstat(f"{path}{end}").st_size
        except OSError:
            continue
        if size >= least:
            raise StorageError(
                f"{doing} refused: {path}{end} lies at the name, left by an earlier "
                f"database there whose file is gone; SQLite would apply it to the new "
                "file when first opened: move it aside (nothing was written there)"
            )


def _name_max(folder: Path) -> int:
    """The longest name, in bytes, a file in ``folder`` may have (255 if not known)."""
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def partial_url(url: str, partial: str) -> str:
    """The ledger URL of the partial file ``partial`` of the SQLite target ``url``,
    with the target's options."""
    query = url.partition("?")[2]
    return f"sqlite:///{quote(partial, safe='/')}" + (f"?{query}" if query else "")


def remove_partial(partial: str) -> None:
    """Remove a copy's partial file (:func:`claim_partial`) and SQLite's files beside
    it: once it has its name, or once the copy failed."""
    _unlink_all(partial)
    with _building_lock:
        _building.discard(partial)


def _unlink_all(path: str) -> None:
    for end in ("", *_SIDE_FILES):
        with suppress(OSError):
            Path(f"{path}{end}").unlink(missing_ok=True)


#: How long a partial to another name must have been left untouched (it, and its
#: SQLite files) before it is taken for a killed process's: a writer this process
#: cannot see (another PID namespace, such as another container on a shared
#: volume) looks gone, but keeps touching its files.
UNTOUCHED_FOR = 15 * 60
_PARTIAL = re.compile(r"\.(.+)\.partial-([0-9]{1,10})(-journal|-wal|-shm)?")


def clear_dead_partials(path: str) -> None:
    """Remove what copies and backups killed midway left in ``path``'s folder (a
    hidden ``.NAME.partial-PID``, with SQLite's files: a whole copy, that a later
    erasure would never reach): a regular file whose process is no longer running.
    One to ``path``'s own name goes whenever its process is gone; one to another
    name (copies and backups named by date may never be made to the same name
    again) only if it is this user's, readable by it alone, as partials are made,
    and it and its SQLite files were left untouched for :data:`UNTOUCHED_FOR`
    seconds."""
    target = Path(path)
    for found in target.parent.glob(".*.partial-*"):
        match = _PARTIAL.fullmatch(found.name)
        if match is None or int(match[2]) == os.getpid():
            continue
        try:
            held = found.lstat()
        except OSError:
            continue
        if not stat.S_ISREG(held.st_mode):
            continue  # a copy writes no link, no folder
        if match[1] != target.name and not _left_long_ago(found, match, held):
            continue
        try:
            os.kill(int(match[2]), 0)
            continue  # running (another user's, maybe): not ours to remove
        except ProcessLookupError:  # gone: nobody writes that copy any more
            pass
        except (OSError, OverflowError):  # not ours to tell, or no process id at all
            continue
        with suppress(OSError):  # not ours to remove (a sticky folder): the copy goes on
            found.unlink()


def _left_long_ago(found: Path, match: re.Match[str], held: os.stat_result) -> bool:
    """Whether the partial ``found`` (to another name) is this user's alone and was
    left untouched, with its SQLite files, for :data:`UNTOUCHED_FOR` seconds."""
    if held.st_uid != os.geteuid() or held.st_mode & 0o077:
        return False
    base = found.with_name(f".{match[1]}.partial-{match[2]}")
    newest = held.st_mtime
    for end in ("", "-journal", "-wal", "-shm"):
        with suppress(OSError):
            newest = max(newest, Path(f"{base}{end}").lstat().st_mtime)
    return time.time() - newest >= UNTOUCHED_FOR


def put_in_place(partial: str, path: str, digest: LogDigest, events: int) -> None:
    """Give the copy committed in ``partial`` the name ``path``, once it is one
    self-contained file (its write-ahead log checked into it, journal mode DELETE:
    no ``-wal`` beside it holds a row), holding ``events`` events whose digest is
    ``digest``, and synced to disk; with a hard link, which never replaces a file
    made at ``path`` meanwhile. The partial's name is removed after
    (:func:`remove_partial`). Every connection to it must be closed.

    Raises:
        StorageError: a file was made at ``path`` meanwhile, or the partial could
            not be made one file, does not hold the copy, or cannot be linked.
    """
    left = _PARTIAL_LEFT
    try:
        uri = f"{Path(partial).absolute().as_uri()}?mode=rw"
        with closing(sqlite3.connect(uri, uri=True, isolation_level=None)) as con:
            busy = con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            mode = str(con.execute("PRAGMA journal_mode=DELETE").fetchone()[0]).lower()
            if busy or mode != "delete":
                raise StorageError(
                    f"copy failed: the copy into {path} is still open elsewhere, so its "
                    f"write-ahead log cannot be checked into its file; {left}"
                )
            found = _file_digest(con)
            n = int(con.execute("SELECT COUNT(*) FROM stored_events").fetchone()[0])
        if (found, n) != (digest, events):
            raise StorageError(
                f"copy failed: the copy into {path}, closed, holds {n} events of digest "
                f"{found}, not the {events} of {digest} it committed; {left}"
            )
        fd = os.open(partial, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        refuse_stale_side_files(path, "copy")  # (again: one may have appeared since)
        os.link(partial, path)
    except FileExistsError:
        raise StorageError(
            f"copy refused: {path} was made by another process while the copy was "
            "written; it is left as it is, and the copy built beside it is removed: copy "
            "into a new file"
        ) from None
    except (OSError, sqlite3.Error) as exc:
        raise StorageError(
            f"copy failed: the complete copy could not be put at {path} ({exc}); {left}"
        ) from None
    _sync_folder(Path(path).parent)


def _file_digest(con: sqlite3.Connection) -> LogDigest:
    """The digest of the ledger ``con`` is open on, from its stored Merkle leaves."""
    last = 0

    def leaves() -> Any:
        nonlocal last
        for position, leaf in con.execute(
            "SELECT position, leaf FROM pl_merkle_leaves ORDER BY position"
        ):
            last = int(position)
            yield bytes(leaf)

    size, root = root_of(leaves())
    return LogDigest(size=size, position=last, root=root.hex())


def _sync_folder(folder: Path) -> None:
    """Make a new name in ``folder`` durable (where the platform allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    with suppress(OSError):
        os.fsync(fd)
    os.close(fd)


# -- under the copy's writers' lock, and after ---------------------------------------


def occupant(rec: Any, w: Any, shown: str) -> StorageError | None:
    """Under the target's writers' lock (``w``; ``rec``: its recorder): the refusal
    of a target written to since it was first looked at (None: it is still empty)."""
    newest = rec.max_position(w)
    if newest:
        return not_empty(shown, rec.events_table.rsplit(".", 1)[-1], newest)
    for table in PRIMARY_TABLES:
        w.execute(rec.dialect.q(f"SELECT 1 AS found FROM {{t}}{table} LIMIT 1"))
        if w.fetchone() is not None:
            return not_empty(shown, table, None)
    return None


def insert_events(dst: Any, w: Any, rows: Sequence[Any]) -> None:
    """Insert stored events at their own positions (the aggregate id as the target
    stores it: hex text on SQLite, a UUID on PostgreSQL)."""
    table = dst.events_table
    if dst.dialect.name == "postgresql":
        curs: Any = w
        statement = (
            f"COPY {table} (originator_id, originator_version, topic, state, notification_id) "
            "FROM STDIN (FORMAT BINARY)"
        )
        with curs.copy(statement) as copy:
            copy.set_types([dst.datastore.originator_id_type, "int8", "text", "bytea", "int8"])
            for position, oid, version, topic, state in rows:
                oid = oid if isinstance(oid, UUID) else UUID(hex=str(oid))
                copy.write_row((oid, version, topic, bytes(state), position))
        return
    w.executemany(
        f"INSERT INTO {table} (rowid, originator_id, originator_version, topic, state) "
        "VALUES (?, ?, ?, ?, ?)",
        [
            (position, oid.hex if isinstance(oid, UUID) else oid, version, topic, bytes(state))
            for position, oid, version, topic, state in rows
        ],
    )


def set_sequence(rec: Any, w: Any) -> None:
    """On PostgreSQL, move the events' sequence to the newest copied position (the
    next command appends after it). Last before the commit: ``setval`` is not
    rolled back."""
    if rec.dialect.name != "postgresql":
        return
    table = rec.events_table
    w.execute(
        f"SELECT setval(pg_get_serial_sequence('{table}', 'notification_id'), "
        f"(SELECT MAX(notification_id) FROM {table})) WHERE EXISTS (SELECT 1 FROM {table})"
    )


@dataclass
class Made:
    """What a copy made of its target: the hidden partial file a new SQLite file is
    built in (:func:`claim_partial`; None: none, the target is written where it
    is); the SQLite file it created at the target (device and inode,
    :func:`claim_file`; None: none); whether a file there stays after a failure
    (``keep``: one refused as written to meanwhile is another's; one that failed
    as it committed may hold the copy); ``committing``: the digest of a copy that
    failed as it committed; whether it committed."""

    partial: str | None = None
    file: tuple[int, int] | None = None
    keep: bool = False
    committing: str | None = None
    committed: bool = False


def failure(exc: LedgerError, opened: str, shown: str, into: Backend, made: Made) -> LedgerError:
    """The copy's failure ``exc`` as raised: naming the source as ``shown`` (not as
    ``opened``, its URL as opened), the target by its URL and path (not its
    partial file's), and saying what is left on the target."""
    message = str(exc) if opened == shown else str(exc).replace(opened, shown)
    if made.partial is not None and into.path is not None:  # removed, whatever it holds
        message = message.replace(partial_url(into.url, made.partial), into.url)
        message = message.replace(made.partial, into.path)
        left = _PARTIAL_LEFT
    elif made.committing is not None:
        return type(exc)(
            f"{message}; the copy may have been committed: check the target before "
            f"copying again (provledger verify --url '{into.url}' --against {made.committing})"
        )
    elif made.keep:  # refused as written to: its message says nothing was written
        exc.args = (message, *exc.args[1:])
        return exc
    else:
        left = _left(into, made.file is not None)
    if isinstance(exc, CorruptEventError):
        return CorruptEventError(
            f"copy refused: the source ledger {shown!r} holds an event that is not what "
            f"the ledger appended ({message}); `provledger verify` on it names every "
            f"problem; {left}"
        )
    return type(exc)(f"{message}; {left}")


def _left(into: Backend, created: bool) -> str:
    """What a failed copy left on the target: no row."""
    if into.kind == "postgresql":
        return (
            f"no row was written to the target (schema {into.env['POSTGRES_SCHEMA']!r} "
            "holds an empty ledger's tables: copy into it again, or drop it)"
        )
    if created:
        return "no row was written to the target (the file the copy created is removed)"
    return "no row was written to the target (it holds an empty ledger: copy into it again)"
