"""The one error tree of provledger.

Every refused command raises a subclass of :class:`LedgerError` and leaves the
event log and the views exactly as they were::

    LedgerError
    ├── InvalidInputError (ValueError)
    │   ├── InvalidIdError
    │   ├── InvalidValueError
    │   ├── ValueTooLargeError
    │   ├── NaiveDatetimeError
    │   ├── ExpiryInPastError
    │   ├── InvalidKindError
    │   ├── InvalidRoleError
    │   ├── InvalidURLError
    │   ├── InvalidKeyError
    │   ├── InvalidHeadError
    │   ├── GraphTooLargeError
    │   └── InvalidNamespaceLabelError
    │       └── NamespaceLabelError (langgraph's InvalidNamespaceError; in
    │           ledger.integrations.langgraph)
    ├── UnknownRecordError (KeyError)
    ├── DuplicateRecordError
    ├── InvalidParentError
    │   └── CycleError
    ├── InvalidTransitionError
    ├── SelfApprovalError
    ├── AcceptanceCheckError
    │   └── SlowCheckError
    ├── RetentionRuleError
    ├── NotUsableError
    ├── UnknownDeliveryError (KeyError)
    ├── AuthenticationError
    │   └── UnknownTokenError
    ├── AccessDeniedError (PermissionError)
    ├── ReadOnlyError
    ├── ConcurrencyError
    ├── SnapshotIntegrityError
    ├── SnapshotErasedError
    ├── UnknownSnapshotError (KeyError)
    ├── CorruptEventError
    ├── StorageError
    │   ├── DiskFullError
    │   ├── ConnectionLostError
    │   └── LedgerNotFoundError (FileNotFoundError)
    ├── ClosedLedgerError
    ├── RenderError
    │   └── RenderBusyError
    ├── MemoryConflictError
    └── UnsupportedStoreOperationError (NotImplementedError)
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar


class LedgerError(Exception):
    """Base class of every error the ledger raises on purpose."""

    def __str__(self) -> str:
        # KeyError subclasses would otherwise print their message quoted.
        return str(self.args[0]) if self.args else self.__class__.__name__


_E = TypeVar("_E", bound=LedgerError)


def retold(exc: _E, message: str) -> _E:
    """``exc`` told anew: an error of its class with ``message``, its other
    attributes (an :class:`InvalidParentError`'s ``dependency``, …) kept."""
    told = type(exc)(message)
    told.__dict__.update(exc.__dict__)
    return told


class InvalidInputError(LedgerError, ValueError):
    """An argument has the wrong type or shape."""


class InvalidIdError(InvalidInputError):
    """A record id does not match ``^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$``."""


class InvalidValueError(InvalidInputError):
    """A value cannot be stored (not msgpack-serialisable, NaN, too deep)."""


class ValueTooLargeError(InvalidInputError):
    """A value or content is larger than the configured limit."""


class NaiveDatetimeError(InvalidInputError):
    """A datetime without a timezone was given."""


class ExpiryInPastError(InvalidInputError):
    """A new record's expiry is not in the future."""


class InvalidKindError(InvalidInputError):
    """An unknown record kind was given."""


class InvalidRoleError(InvalidInputError):
    """An unknown role was given to a grant."""


class InvalidURLError(InvalidInputError):
    """The ledger URL names no supported backend."""


class InvalidKeyError(InvalidInputError):
    """A signing or verification key file is missing, unreadable or not Ed25519."""


class InvalidHeadError(InvalidInputError):
    """A signed tree head (or a line of a heads file) is malformed."""


class GraphTooLargeError(InvalidInputError):
    """A dependency graph asked for holds more records than may be sent back
    (``count`` over ``limit``: see :data:`ledger.graph.MAX_SERVED_NODES`)."""

    def __init__(self, message: str, count: int = 0, limit: int = 0) -> None:
        super().__init__(message)
        self.count = count
        self.limit = limit


class InvalidNamespaceLabelError(InvalidInputError):
    """A LangGraph namespace label or key cannot be part of a ledger scope or claim key."""


class UnknownRecordError(LedgerError, KeyError):
    """No record with that id exists, or the caller may not see it."""


class DuplicateRecordError(LedgerError):
    """A record with that id already exists in a scope the caller can see (an id
    taken only in a scope it cannot see is free to it: ids are unique per scope)."""


class InvalidParentError(LedgerError):
    """A parent (or observed dependency) is missing, unreadable or unusable.

    ``dependency`` names the dependency when it is one the caller can see that is
    not usable now (withdrawn, STALE, a CANDIDATE, expired): a state that may
    change, where None is a dependency unknown to the caller, a cycle or a rule.

    A proposal naming several bad parents is refused once, naming each of them
    (:func:`ledger.rules.check_dependencies_refused`): ``dependency`` is then None
    if any of them is unknown to the caller (or not readable by it), else the
    first of them in the order given. A cycle is refused first, as a
    :class:`CycleError`, and a taken id before that."""

    def __init__(self, message: str, dependency: str | None = None) -> None:
        super().__init__(message)
        self.dependency = dependency


class CycleError(InvalidParentError):
    """The given parents would make a record depend on itself."""


class InvalidTransitionError(LedgerError):
    """The status machine does not allow this command in the record's status.

    ``status`` is the record's status when that is why (None when the refusal is
    about something else: an expiry, an erased capture, a supersession), and
    ``allowed`` the statuses the command needs then (the HTTP API gives both in
    its 409 body).
    """

    def __init__(
        self, message: str, *, status: str | None = None, allowed: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message)
        self.status = status
        self.allowed = allowed


class SelfApprovalError(LedgerError):
    """A principal tried to approve or revalidate its own proposal."""


class AcceptanceCheckError(LedgerError):
    """An acceptance check registered by the application refused the record."""


class SlowCheckError(AcceptanceCheckError):
    """Acceptance checks that kept a PostgreSQL command's transaction waiting past
    the server's idle-in-transaction limit, which ended it: told as such (nothing of
    the record but its id), not as the connection lost. ``checks`` names them,
    ``took`` is how long they took together and ``limit`` the server's wait, in
    seconds."""

    command: str = ""
    checks: tuple[str, ...] = ()
    took: float = 0.0
    limit: float = 0.0

    @classmethod
    def of(
        cls, command: str, checks: tuple[str, ...], took: float, limit: float, shown: str
    ) -> SlowCheckError:
        """The refusal of ``command`` on the record shown as ``shown``."""
        which = (
            f"acceptance check {checks[0]!r} took"
            if len(checks) == 1
            else f"acceptance checks {', '.join(map(repr, checks))} took together"
        )
        error = cls(
            f"{command} refused: {which} {took:.1f} s on record {shown!r}, and a "
            f"PostgreSQL ledger's transaction may wait {limit:g} s (the URL's "
            "idle_timeout): the server ended it, and nothing was written; make the "
            "checks quicker, or raise idle_timeout"
        )
        error.command, error.checks, error.took, error.limit = command, checks, took, limit
        return error

    def named(self, shown: str) -> SlowCheckError:
        """The same refusal naming the record as ``shown``."""
        return SlowCheckError.of(self.command, self.checks, self.took, self.limit, shown)


class RetentionRuleError(LedgerError):
    """A proposal breaks a retention rule set for its kind when the ledger was opened."""


class NotUsableError(LedgerError):
    """The record is not usable now (needed to deliver it)."""


class UnknownDeliveryError(LedgerError, KeyError):
    """No delivery with that id exists, or the caller may not see it."""


class AuthenticationError(LedgerError):
    """A token is unknown, revoked or expired."""


class UnknownTokenError(AuthenticationError):
    """The ledger never issued that token (or, for an admin token, its issuing
    event is gone from the log: ``provledger verify`` looks). A revoked or
    expired token raises its parent, :class:`AuthenticationError`."""


class AccessDeniedError(LedgerError, PermissionError):
    """The authenticated principal lacks the role in that scope."""


class ReadOnlyError(LedgerError):
    """A write was attempted on a read-only (as-of) session, or on a ledger
    opened read-only (``sqlite:///path.db?mode=ro``)."""


class ConcurrencyError(LedgerError):
    """A lock on the ledger's tables stayed held by another session past the wait
    (other writers, or an administrator's lock); the command was not applied, and
    the same command may be sent again."""


class SnapshotIntegrityError(LedgerError):
    """Stored snapshot bytes no longer match their content hash."""


class SnapshotErasedError(LedgerError):
    """The snapshot's bytes were erased by an admin (the erasure is in the log)."""


class UnknownSnapshotError(LedgerError, KeyError):
    """No snapshot with that reference exists, or the caller may not read it."""


class CorruptEventError(LedgerError):
    """A stored event cannot be decoded."""


class StorageError(LedgerError):
    """The ledger's database cannot be opened, reached or written (the message says
    why, with the server's own reason; credentials never appear in it). A command
    refused with it was not applied unless the message says otherwise."""


class DiskFullError(StorageError):
    """The disk (or the database server's disk) holding the ledger is full; the
    command was not applied. Free space and try again."""


class ConnectionLostError(StorageError):
    """The connection to the database server was lost (the server restarted, or its
    backend was terminated); the ledger opens a fresh connection for the next call."""


class LedgerNotFoundError(StorageError, FileNotFoundError):
    """``Ledger.open(url, create=False)`` found no ledger there (nothing was created)."""


class ClosedLedgerError(LedgerError):
    """The ledger was closed."""


class RenderError(LedgerError):
    """Graphviz could not draw a picture (it failed, or drew nothing)."""


class RenderBusyError(RenderError):
    """A server is drawing as many pictures as it draws at once
    (:data:`ledger.graph.RENDERS_AT_ONCE`): nothing was drawn; try again."""


class MemoryConflictError(LedgerError):
    """A LangGraph store read found usable records of one key that disagree; the
    ledger picks none."""


class UnsupportedStoreOperationError(LedgerError, NotImplementedError):
    """A LangGraph store feature the ledger does not offer (semantic query, field
    index, TTL)."""


def install_hint(extra: str) -> str:
    """How to install the optional packages of the ``extra`` extra: from
    provledger's source directory (the README's set-up commands), or where it
    was installed as a package (an auditor's machine, say)."""
    return (
        f"install the {extra!r} extra: pip install -e '.[{extra}]' in provledger's source "
        f"directory, or pip install 'provledger[{extra}]' where it was installed as a package"
    )


def require_extra(extra: str, who: str, *modules: str) -> None:
    """Import ``modules``, the packages ``who`` (a module of provledger) needs from
    the ``extra`` extra; one missing is a ``ModuleNotFoundError`` saying which extra
    to install, not only which package is absent."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            package = (exc.name or module).split(".")[0]
            raise ModuleNotFoundError(
                f"{who} needs the {package!r} package, which is not installed; "
                + install_hint(extra),
                name=exc.name,
            ) from None


@contextmanager
def naming_file(path: str | os.PathLike[str]) -> Iterator[None]:
    """An ``OSError`` raised inside names ``path`` if it names no file (a failed
    ``write`` does not: a full disk would read as if stdout had failed)."""
    try:
        yield
    except OSError as exc:
        if not exc.filename:
            exc.filename = os.fspath(path)
        raise
