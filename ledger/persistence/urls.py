"""Ledger URLs: ``memory:``, ``sqlite:///path.db`` or ``postgresql://…`` become an
eventsourcing environment naming this package's recorder for that backend."""

from __future__ import annotations

import importlib.util
import os
import re
import uuid
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlparse

from eventsourcing.utils import get_topic

from ledger.errors import InvalidURLError, StorageError
from ledger.persistence.sqlite import LedgerSQLiteFactory, LedgerSQLiteRecorder

DEFAULT_PATH = "provledger.db"


@dataclass(frozen=True)
class Backend:
    """What a ledger URL resolved to."""

    kind: str  # "memory", "sqlite" or "postgresql"
    url: str  # credentials replaced by ``***``
    env: dict[str, str] = field(repr=False)  # holds the password
    path: str | None = None


def resolve_url(url: str | None) -> Backend:
    """Turn a ledger URL into a backend description.

    ``None`` means ``$PROVLEDGER_URL``, else ``sqlite:///./provledger.db``.

    Raises:
        InvalidURLError: the URL names no supported backend.
    """
    if url is None:
        url = os.environ.get("PROVLEDGER_URL") or f"sqlite:///{DEFAULT_PATH}"
    if not isinstance(url, str) or not url.strip():
        raise InvalidURLError(f"ledger URL {url!r} is empty or not a string")
    recorder_topic = get_topic(LedgerSQLiteRecorder)
    if url in ("memory:", "memory://"):
        # An in-process SQLite database shared by the connections of this ledger only.
        name = f"file:provledger-{uuid.uuid4().hex}?mode=memory&cache=shared"
        env = {
            "PERSISTENCE_MODULE": get_topic(LedgerSQLiteFactory),
            "SQLITE_DBNAME": name,
            "APPLICATION_RECORDER_TOPIC": recorder_topic,
        }
        return Backend(kind="memory", url=url, env=env)
    if url.startswith("sqlite:"):
        parsed = urlparse(url)
        if not url.startswith("sqlite:///"):
            raise InvalidURLError(
                f"ledger URL {url!r} is not sqlite:///relative/path or sqlite:////absolute/path"
            )
        path = unquote(parsed.path[1:]) if parsed.path.startswith("/") else parsed.path
        if not path or path.endswith("/"):
            raise InvalidURLError(f"ledger URL {url!r} names no database file")
        if "\x00" in path:
            raise InvalidURLError(f"ledger URL {url!r} has a NUL character in its path")
        timeout = parse_qs(parsed.query).get("timeout", ["30"])[-1]
        if not timeout.isascii() or not timeout.isdigit() or not 0 < int(timeout) <= 86_400:
            raise InvalidURLError(
                f"ledger URL {url!r}: timeout must be whole seconds between 1 and 86400"
            )
        env = {
            "PERSISTENCE_MODULE": get_topic(LedgerSQLiteFactory),
            "SQLITE_DBNAME": path,
            "SQLITE_LOCK_TIMEOUT": timeout,
            "APPLICATION_RECORDER_TOPIC": recorder_topic,
        }
        return Backend(kind="sqlite", url=url, env=env, path=path)
    if url.startswith(("postgresql://", "postgres://")):
        if not _installed("psycopg"):
            raise StorageError(
                f"ledger URL {redacted(url)!r} needs PostgreSQL support, which is not "
                "installed: pip install 'provledger[postgres]'"
            )
        return _postgres_backend(url)
    url = redacted(url)
    raise InvalidURLError(
        f"ledger URL {url!r} is not memory:, sqlite:///path or postgresql://user@host/db"
    )


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ValueError, ImportError):  # e.g. blocked with sys.modules[module] = None
        return False


_PG_OPTIONS = {
    "schema": "POSTGRES_SCHEMA",
    "pool_size": "POSTGRES_POOL_SIZE",
    "max_overflow": "POSTGRES_MAX_OVERFLOW",
    "lock_timeout": "POSTGRES_LOCK_TIMEOUT",
    "connect_timeout": "POSTGRES_CONNECT_TIMEOUT",
}
_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def redacted(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for messages, reprs and logs)."""
    try:
        parsed = urlparse(url)
        password = parsed.password
    except ValueError:
        return url
    if not password:
        return url
    netloc = parsed.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return parsed._replace(netloc=f"{user}:***@{netloc[1]}").geturl()


def _postgres_backend(full: str) -> Backend:
    url = redacted(full)  # what messages and ``Ledger.url`` show
    parsed = urlparse(full)
    dbname = unquote(parsed.path.lstrip("/"))
    if not parsed.hostname or not dbname:
        raise InvalidURLError(
            f"ledger URL {url!r} is not postgresql://user:password@host:port/dbname?schema=…"
        )
    query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    unknown = sorted(set(query) - set(_PG_OPTIONS))
    if unknown:
        raise InvalidURLError(
            f"ledger URL {url!r}: unknown option {unknown[0]!r} "
            f"(known: {', '.join(sorted(_PG_OPTIONS))})"
        )
    schema = query.get("schema", "public")
    if not _SCHEMA.match(schema):
        raise InvalidURLError(
            f"ledger URL {url!r}: schema {schema!r} is not a plain lowercase name"
        )
    for option in ("pool_size", "max_overflow", "lock_timeout", "connect_timeout"):
        if option in query and not query[option].isdigit():
            raise InvalidURLError(f"ledger URL {url!r}: {option} must be a whole number")
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": dbname,
        "POSTGRES_HOST": parsed.hostname,
        "POSTGRES_PORT": str(parsed.port or 5432),
        "POSTGRES_USER": unquote(parsed.username or os.environ.get("USER", "postgres")),
        "POSTGRES_PASSWORD": unquote(parsed.password or ""),
        "POSTGRES_POOL_SIZE": "2",
        "POSTGRES_MAX_OVERFLOW": "8",
        "POSTGRES_LOCK_TIMEOUT": "30",
        # A topic, not the class: psycopg loads only when the ledger opens.
        "APPLICATION_RECORDER_TOPIC": "ledger.persistence.postgres:LedgerPostgresRecorder",
    }
    for option, value in query.items():
        env[_PG_OPTIONS[option]] = value
    return Backend(kind="postgresql", url=url, env=env)
