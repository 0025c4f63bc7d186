"""Stored values of a type the ledger never writes: found with ``typeof`` and named.

An SQLite column keeps whatever type a value is given, whatever its declared type:
whoever edits the file can store an event's bytes as text. Reading such a value
fails (text that is not UTF-8) or gives text where bytes belong, so verify names it
as the tampering it is, by position. PostgreSQL columns hold only their declared
type: there the fallbacks below find nothing, and a failed read is raised as is.

What :mod:`ledger.verification` reads through this module, and what each names:

- events (:func:`read_events`, :func:`mistyped_event`): a ``state``,
  ``originator_version``, ``topic`` or ``originator_id`` of another type, text that
  is not UTF-8, an id that is not 32 lower-case hex digits;
- Merkle leaves (:func:`read_leaves`, :func:`first_mistyped_leaf`): a hash stored
  as another type than bytes;
- snapshots (:func:`snapshots_statement`, :func:`snapshot_row`,
  :func:`mistyped_snapshot`): a reference not stored as text, content not stored
  as bytes;
- views (:func:`readable`): text that is not UTF-8, which no projection writes.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from eventsourcing.persistence import PersistenceError

from ledger.errors import CorruptEventError
from projections.base import SQLITE, Cursor, Dialect, fetch_in_chunks

if TYPE_CHECKING:
    from ledger.engine import Engine

#: What reading a value of the wrong type raises (decoding text, making a UUID or
#: bytes of it), in the driver or in the recorder.
READ_ERRORS = (sqlite3.Error, PersistenceError, TypeError, ValueError, AttributeError)

#: SQLite's storage classes (``typeof``), as the reports name them.
STORAGE_CLASSES = {
    "blob": "bytes",
    "text": "text",
    "integer": "an integer",
    "real": "a real number",
    "null": "NULL",
}

#: The storage class the ledger writes in each column of the events table.
_EVENT_COLUMNS = (
    ("originator_id", "text"),
    ("originator_version", "integer"),
    ("topic", "text"),
    ("state", "blob"),
)


def _kind_of(value: object) -> str:
    """A value read back, named as :data:`STORAGE_CLASSES` names its storage class."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return STORAGE_CLASSES["blob"]
    if isinstance(value, str):
        return STORAGE_CLASSES["text"]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return STORAGE_CLASSES["null"] if value is None else type(value).__name__
    return STORAGE_CLASSES["integer" if isinstance(value, int) else "real"]


def _stored_as(what: str, column: str, found: str, wanted: str) -> str:
    return (
        f"{what} holds its {column} as {found} where the ledger stores {STORAGE_CLASSES[wanted]}: "
        "it was changed after it was appended"
    )


# -- events ---------------------------------------------------------------------------------


def mistyped_event(note: Any) -> str | None:
    """Why an event read back holds a value of a type the ledger never writes, or None."""
    what = f"the event at position {note.id}"
    for column, value, wanted in (
        ("originator_version", note.originator_version, "integer"),
        ("topic", note.topic, "text"),
        ("state", note.state, "blob"),
    ):
        found = _kind_of(value)
        if found != STORAGE_CLASSES[wanted]:
            return _stored_as(what, column, found, wanted)
    return None


def read_events(
    engine: Engine, c: Cursor, after: int, limit: int
) -> tuple[list[Any], tuple[int, str] | None]:
    """A batch of at most ``limit`` stored events after ``after``. When one cannot be
    read because it holds a value the ledger never writes: the events before it, and
    its position and problem."""
    try:
        return engine.recorder.read_after(c, after, limit), None
    except (*READ_ERRORS, CorruptEventError):
        found = _first_unreadable_event(engine, c, after, limit)
        if found is None:
            raise
    table = engine.recorder.events_table
    c.execute(f"SELECT COUNT(*) AS n FROM {table} WHERE rowid > ? AND rowid < ?", (after, found[0]))
    before = int(c.fetchone()["n"])
    return (engine.recorder.read_after(c, after, before) if before else []), found


def _first_unreadable_event(
    engine: Engine, c: Cursor, after: int, limit: int
) -> tuple[int, str] | None:
    """The first event of a batch after ``after`` (on SQLite) holding a value the
    recorder cannot read, and why; None if there is none."""
    if engine.dialect.name != SQLITE.name:
        return None
    types = ", ".join(f"typeof({col}) AS {col}_type" for col, _ in _EVENT_COLUMNS)
    c.execute(
        f"SELECT rowid AS position, {types}, CAST(originator_id AS BLOB) AS originator_id, "
        f"CAST(topic AS BLOB) AS topic FROM {engine.recorder.events_table} "
        "WHERE rowid > ? ORDER BY rowid LIMIT ?",
        (after, limit),
    )
    for row in c.fetchall():
        what = f"the event at position {row['position']}"
        for column, wanted in _EVENT_COLUMNS:
            found = str(row[f"{column}_type"])
            if found != wanted:
                return int(row["position"]), _stored_as(
                    what, column, STORAGE_CLASSES.get(found, found), wanted
                )
        for column in ("originator_id", "topic"):
            try:
                text = bytes(row[column]).decode()
            except UnicodeDecodeError:
                return int(row["position"]), (
                    f"{what} holds its {column} as text that is not UTF-8: it was changed "
                    "after it was appended"
                )
            if column == "originator_id" and not _is_hex_id(text):
                return int(row["position"]), (
                    f"{what} holds an originator_id that is not an aggregate id as the "
                    "ledger writes it (32 lower-case hex digits): it was changed after it "
                    "was appended"
                )
    return None


def _is_hex_id(text: str) -> bool:
    return len(text) == 32 and all(ch in "0123456789abcdef" for ch in text)


# -- Merkle leaves --------------------------------------------------------------------------


def read_leaves(
    engine: Engine, c: Cursor, after: int, upto: int | None
) -> tuple[dict[int, bytes], dict[int, str]]:
    """The stored Merkle leaves after ``after`` up to ``upto`` (None: all), and the
    problem of each one stored as a type the ledger never writes (left out of the first)."""
    try:
        return dict(engine.recorder.leaves(c, after, upto)), {}
    except READ_ERRORS as exc:
        if engine.dialect.name != SQLITE.name:
            raise
        failed = exc
    bound = "" if upto is None else " AND position <= ?"
    c.execute(
        engine.dialect.q(
            "SELECT position, typeof(leaf) AS type, "
            "CASE WHEN typeof(leaf) = 'blob' THEN leaf END AS leaf "
            f"FROM {{t}}pl_merkle_leaves WHERE position > ?{bound} ORDER BY position"
        ),
        (after,) if upto is None else (after, upto),
    )
    stored: dict[int, bytes] = {}
    odd: dict[int, str] = {}
    for row in fetch_in_chunks(c):
        position, found = int(row["position"]), str(row["type"])
        if found == "blob":
            stored[position] = bytes(row["leaf"])
        else:
            what = f"the Merkle leaf at position {position}"
            odd[position] = _stored_as(what, "hash", STORAGE_CLASSES.get(found, found), "blob")
    if not odd:
        raise failed  # not a value of the wrong type: a failure to report as such
    return stored, odd


def first_mistyped_leaf(engine: Engine, c: Cursor) -> str | None:
    """The problem of the first Merkle leaf stored as another type than bytes (on
    SQLite), or None."""
    if engine.dialect.name != SQLITE.name:
        return None
    c.execute(
        "SELECT position, typeof(leaf) AS type FROM pl_merkle_leaves "
        "WHERE typeof(leaf) <> 'blob' ORDER BY position LIMIT 1"
    )
    row = c.fetchone()
    if row is None:
        return None
    found = str(row["type"])
    what = f"the Merkle leaf at position {row['position']}"
    return _stored_as(what, "hash", STORAGE_CLASSES.get(found, found), "blob")


# -- snapshots ------------------------------------------------------------------------------


def snapshots_statement(d: Dialect) -> str:
    """Every stored snapshot: its reference, the storage class of its content, and
    the content when it is bytes. On SQLite, where a column keeps any type, the
    reference is read as bytes and the content only when it is bytes, so a value
    of another type (text that is not UTF-8 among them) is named, not a crash."""
    if d.name == SQLITE.name:
        return (
            "SELECT CAST(ref AS BLOB) AS ref, typeof(ref) AS ref_type, typeof(content) AS type, "
            "CASE WHEN typeof(content) = 'blob' THEN content END AS content "
            "FROM pl_snapshots ORDER BY ref"
        )
    return d.q(
        "SELECT ref, 'text' AS ref_type, 'blob' AS type, content FROM {t}pl_snapshots ORDER BY ref"
    )


def snapshot_row(row: Any) -> tuple[str, str, str, bytes]:
    """(reference, storage class of the reference, of the content, content) of a row
    of :func:`snapshots_statement` (the content is empty unless stored as bytes)."""
    ref = row["ref"]
    if isinstance(ref, (bytes, bytearray, memoryview)):
        # Printable whatever was stored: a reference is ASCII when the ledger wrote it.
        ref = bytes(ref).decode("utf-8", "backslashreplace")
    content = row["content"]
    kinds = str(row["ref_type"]), str(row["type"])
    return str(ref), *kinds, b"" if content is None else bytes(content)


def mistyped_snapshot(ref: str, ref_found: str, found: str) -> str | None:
    """Why a snapshot whose reference and content are stored as the storage classes
    ``ref_found`` and ``found`` (see :func:`snapshot_row`) was changed, or None."""
    if ref_found != "text":
        return (
            f"snapshot {ref}: its reference is stored as "
            f"{STORAGE_CLASSES.get(ref_found, ref_found)} where the ledger stores text: it "
            "was changed after it was captured"
        )
    if found != "blob":
        return (
            f"snapshot {ref}: its content is stored as {STORAGE_CLASSES.get(found, found)} where "
            "the ledger stores bytes: it was changed after it was captured"
        )
    return None


# -- views ----------------------------------------------------------------------------------


class UnreadableViewError(Exception):
    """A live view holds text that is not UTF-8 (SQLite keeps it; no projection writes it)."""


def readable(table: str, rows: Iterator[tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
    """``rows`` of the live view ``table``; text that cannot be decoded is named as
    the change it is (never printed: it is not text)."""
    try:
        yield from rows
    except (sqlite3.OperationalError, PersistenceError) as exc:
        found = _UNDECODABLE.search(str(exc))
        if found is None:
            raise
        raise UnreadableViewError(
            f"view {table} holds text that is not UTF-8 in its column {found[1]!r}, which "
            "no projection writes: the view was changed behind the ledger's back"
        ) from None


#: How the sqlite3 module says a stored text value is not UTF-8.
_UNDECODABLE = re.compile(r"Could not decode to UTF-8 column '([^']*)'")


__all__ = [
    "READ_ERRORS",
    "STORAGE_CLASSES",
    "UnreadableViewError",
    "first_mistyped_leaf",
    "mistyped_event",
    "mistyped_snapshot",
    "read_events",
    "read_leaves",
    "readable",
    "snapshot_row",
    "snapshots_statement",
]
