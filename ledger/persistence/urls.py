"""Ledger URLs: ``memory:``, ``sqlite:///path.db`` or ``postgresql://…`` become an
eventsourcing environment naming this package's recorder for that backend.

Every option is checked here, and a refusal is an ``InvalidURLError`` naming the
option (the URL in it redacted): an SQLite path is a plain file path (``file:`` URIs
and ``:memory:`` are refused: they would silently open something else); a PostgreSQL
schema is a plain lowercase name that is neither a system schema
(``information_schema``, ``pg_*``) nor a reserved word; pool sizes and timeouts are
whole numbers within :data:`PG_BOUNDS`. An SQLite URL takes ``mode=ro`` to open
the file read-only (see :func:`ledger.persistence.sqlite_files.read_only_uri`),
or ``mode=rw`` to ask for it writable or not at all.
"""

from __future__ import annotations

import importlib.util
import os
import re
import uuid
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlparse

from eventsourcing.utils import get_topic

from ledger.errors import InvalidURLError, LedgerError, StorageError, install_hint
from ledger.persistence.sqlite import LedgerSQLiteFactory, LedgerSQLiteRecorder

DEFAULT_PATH = "provledger.db"


@dataclass(frozen=True)
class Backend:
    """What a ledger URL resolved to."""

    kind: str  # "memory", "sqlite" or "postgresql"
    url: str  # credentials replaced by ``***``
    env: dict[str, str] = field(repr=False)  # holds the password
    path: str | None = None
    #: ``sqlite:///path.db?mode=ro``: opened read-only; nothing is ever written.
    read_only: bool = False
    #: ``sqlite:///path.db?mode=rw``: writable asked for in so many words (the
    #: command line then opens no ledger read-only in its stead).
    writable_asked: bool = False
    #: The password the URL itself holds (messages mask it where a server repeats
    #: the URL); not one taken from ``$PGPASSWORD``, which no server message repeats.
    secret: str = field(default="", repr=False)


def resolve_url(url: str | None) -> Backend:
    """Turn a ledger URL into a backend description.

    ``None`` means ``$PROVLEDGER_URL``, else ``sqlite:///./provledger.db``.

    Raises:
        InvalidURLError: the URL names no supported backend.
    """
    if url is None:
        url = os.environ.get("PROVLEDGER_URL")
        if url is not None and not url.strip():
            # A variable set empty (a lost value, ``export PROVLEDGER_URL=$MISSING``)
            # must not open, or create, the default file instead.
            raise InvalidURLError(
                "$PROVLEDGER_URL is set but empty; give a ledger URL, or unset it for "
                f"the default sqlite:///{DEFAULT_PATH}"
            )
        url = url or f"sqlite:///{DEFAULT_PATH}"
    if not isinstance(url, str):
        raise InvalidURLError(f"ledger URL must be a string, got {type(url).__name__}")
    if not url.strip():
        raise InvalidURLError(f"ledger URL {url!r} is empty")
    if url.strip() != url:
        # A pasted URL's stray space or newline would name another file or database
        # ("a.db " beside "a.db"); one meant is written %20 in the path.
        end = "begins" if url.lstrip() != url else "ends"
        shown = _ANY_USERINFO.sub(r"\1***@", redacted(url.strip()))  # (no shape known yet)
        raise InvalidURLError(
            f"ledger URL {shown!r} {end} with white space "
            f"({url[0] if end == 'begins' else url[-1]!r}); remove it"
            + ("; a file name ending in a space is written %20" if url.endswith(" ") else "")
        )
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
        shown = redacted(url)  # what messages show
        parsed = urlparse(url)
        if not url.startswith("sqlite:///"):
            raise InvalidURLError(
                f"ledger URL {shown!r} is not sqlite:///relative/path or sqlite:////absolute/path"
            )
        try:  # "%FF" is no UTF-8: refused, not read as U+FFFD (one file for many URLs)
            path = unquote(parsed.path[1:], errors="strict")
        except UnicodeDecodeError:
            raise InvalidURLError(
                f"ledger URL {shown!r}: its path is not UTF-8 text once its %-escapes "
                "are decoded (SQLite names its files in UTF-8); give a path of UTF-8 characters"
            ) from None
        path = path if parsed.path.startswith("/") else parsed.path
        if not path or path.endswith("/"):
            raise InvalidURLError(f"ledger URL {shown!r} names no database file")
        if "\x00" in path:
            raise InvalidURLError(f"ledger URL {shown!r} has a NUL character in its path")
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:  # bytes no UTF-8 (a shell's $'\xff'): SQLite cannot name it
            raise InvalidURLError(
                f"ledger URL {shown!r}: its path is not UTF-8 text (SQLite names its files "
                "in UTF-8); give a path of UTF-8 characters"
            ) from None
        if path.lower().startswith("file:") or path == ":memory:":
            raise InvalidURLError(
                f"ledger URL {shown!r}: path {path!r} is not a plain file path (SQLite "
                "would read it as a 'file:' URI or an in-memory database); give "
                "sqlite:///path.db, or memory: for a ledger in memory"
            )
        options = parse_qs(parsed.query, keep_blank_values=True)
        _check_once(shown, options)
        unknown = sorted(set(options) - {"timeout", "mode"})
        if unknown:
            raise InvalidURLError(
                f"ledger URL {shown!r}: unknown option {unknown[0]!r} (known: mode, timeout)"
            )
        mode = options.get("mode", ["rw"])[-1]
        if mode not in ("ro", "rw"):
            raise InvalidURLError(
                f"ledger URL {shown!r}: mode must be ro (read-only) or rw, got {mode[:20]!r}"
            )
        timeout = options.get("timeout", ["30"])[-1]
        if not timeout.isascii() or not timeout.isdigit() or not 0 < int(timeout) <= 86_400:
            raise InvalidURLError(
                f"ledger URL {shown!r}: timeout must be whole seconds between 1 and 86400"
            )
        env = {
            "PERSISTENCE_MODULE": get_topic(LedgerSQLiteFactory),
            "SQLITE_DBNAME": path,
            "SQLITE_LOCK_TIMEOUT": timeout,
            "APPLICATION_RECORDER_TOPIC": recorder_topic,
        }
        asked = "mode" in options and mode == "rw"
        return Backend(
            kind="sqlite", url=url, env=env, path=path, read_only=mode == "ro", writable_asked=asked
        )
    if url.startswith(("postgresql://", "postgres://")):
        if not _installed("psycopg"):
            raise StorageError(
                f"ledger URL {redacted(url)!r} needs PostgreSQL support, which is not "
                f"installed; {install_hint('postgres')}"
            )
        return _postgres_backend(url)
    # No backend's shape: mask whatever may hold a user and password (a URL with a
    # space before it, or ``scheme:user:pw@host``, is no URL ``redacted`` can read).
    shown = _ANY_USERINFO.sub(r"\1***@", redacted(url))
    # A bare file name or path was most likely meant as an SQLite file.
    bare = ":" not in url and url.isprintable() and url.strip() == url
    bare = bare and url.endswith((".db", ".sqlite", ".sqlite3"))
    hint = f" (for the SQLite file {url}: sqlite:///{url})" if bare else ""
    raise InvalidURLError(
        f"ledger URL {shown!r} is not memory:, sqlite:///path or postgresql://user@host/db" + hint
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
    "idle_timeout": "POSTGRES_IDLE_IN_TRANSACTION_SESSION_TIMEOUT",
}

#: Bounds (inclusive) and defaults of the PostgreSQL URL's numeric options: pool
#: sizes in connections, timeouts in whole seconds. ``idle_timeout``: how long a
#: transaction may wait on the ledger's side (an acceptance check, say) before the
#: server ends its session; without it, $POSTGRES_IDLE_IN_TRANSACTION_SESSION_TIMEOUT
#: or 5.
PG_BOUNDS: dict[str, tuple[int, int, int | None]] = {
    "pool_size": (1, 20, 2),
    "max_overflow": (0, 50, 8),
    "lock_timeout": (1, 3600, 30),
    "connect_timeout": (1, 300, 30),
    "idle_timeout": (1, 86_400, None),
}

_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}")

#: PostgreSQL's reserved key words: a schema so named breaks unquoted SQL.
_RESERVED = frozenset(
    " ".join(
        (
            "all analyse analyze and any array as asc asymmetric authorization binary both",
            "case cast check collate collation column concurrently constraint create cross",
            "current_catalog current_date current_role current_schema current_time",
            "current_timestamp current_user default deferrable desc distinct do else end",
            "except false fetch for foreign freeze from full grant group having ilike in",
            "initially inner intersect into is isnull join lateral leading left like limit",
            "localtime localtimestamp natural not notnull null offset on only or order outer",
            "overlaps placing primary references returning right select session_user similar",
            "some symmetric system_user table tablesample then to trailing true union unique",
            "user using variadic verbose when where window with",
        )
    ).split()
)


def _check_schema(url: str, schema: str) -> None:
    if not _SCHEMA.fullmatch(schema):
        raise InvalidURLError(
            f"ledger URL {url!r}: schema {schema!r} is not a plain lowercase name "
            "(letters a-z, digits and _, at most 63, not starting with a digit)"
        )
    if schema == "information_schema" or schema.startswith("pg_"):
        raise InvalidURLError(
            f"ledger URL {url!r}: schema {schema!r} is a PostgreSQL system schema; "
            "name a schema of your own"
        )
    if schema in _RESERVED:
        raise InvalidURLError(
            f"ledger URL {url!r}: schema {schema!r} is a reserved word in PostgreSQL"
        )


#: A query option that may hold a secret (``password``, ``sslpassword``, a name
#: percent-encoded or not): its value is masked, up to the next option.
_SECRET_OPTION = re.compile(r"([?&][^=&]*(?:pass|%70ass|p%61ss)[^=&]*=)[^&]*", re.IGNORECASE)
#: ``scheme://user:PASSWORD@``: the password runs to the last ``@`` (one holding
#: ``#``, ``?`` or ``/`` unencoded is masked whole; masking more is the safe side).
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://[^:/?#@]*:)(.*)@", re.DOTALL)
#: The same with a user part holding ``/``, ``?``, ``#`` or ``@`` unencoded (a parser
#: reads it otherwise, but the password is still there): everything up to the last
#: ``@`` masked where a ``:`` comes before it with no ``/`` between the two (a port
#: is followed by the path's ``/``; ``host:5432/db@x`` holds no password).
_LOOSE_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^:]*:[^/]*@", re.DOTALL)
#: In text of no known shape: everything before the last ``@`` after any scheme
#: and ``//`` (user and password both masked: the safe side).
_ANY_USERINFO = re.compile(r"^(\s*(?:[A-Za-z][A-Za-z0-9+.-]*:)?(?://)?)(.*)@", re.DOTALL)


def _check_once(shown: str, options: dict[str, list[str]]) -> None:
    """Refuse an option given twice (which of the two was meant is not known)."""
    for name, values in options.items():
        if len(values) > 1:
            raise InvalidURLError(
                f"ledger URL {shown!r}: option {name!r} is given {len(values)} times; give it once"
            )


def without_location(text: str, url: str | None) -> str:
    """``text`` (a message) with the ledger's location left out, for the callers of
    a server (its host, user, database and schema, or its file, are the operator's
    to know): the ledger's URL (``url``, as messages show it) named "the ledger",
    an SQLite ledger's file "the ledger's file"."""
    if not url:
        return text
    text = text.replace(f"cannot open ledger {url!r}", "cannot open the ledger")
    text = text.replace(f"ledger {url!r}", "the ledger").replace(repr(url), "the ledger")
    try:
        path = resolve_url(url).path
    except LedgerError:
        path = None
    if path:  # as messages name it, absolute (a relative path is any word or id)
        absolute = os.path.abspath(path)
        text = text.replace(f"the ledger file {absolute!r}", "the ledger's file")
        text = text.replace(repr(absolute), "the ledger's file")
        text = re.sub(rf"(?<![\w/.-]){re.escape(absolute)}(?![\w/.-])", "the ledger's file", text)
    return text


def redacted(url: str) -> str:
    """``url`` with any password, in its user part or as a query option, replaced
    by ``***`` (for messages, reprs and logs). Works on text, not on a parse, so a
    URL too malformed to parse is masked too."""
    masked = _SECRET_OPTION.sub(r"\1***", url)
    shown = _USERINFO.sub(r"\1***@", masked)
    return shown if shown != masked else _LOOSE_USERINFO.sub(r"\1***@", masked)


def _postgres_backend(full: str) -> Backend:
    url = redacted(full)  # what messages and ``Ledger.url`` show
    try:
        parsed = urlparse(full)
    except ValueError as exc:
        raise InvalidURLError(f"ledger URL {url!r} is not a valid URL: {exc}") from None
    dbname = unquote(parsed.path.lstrip("/"))
    if not parsed.hostname or not dbname:
        raise InvalidURLError(
            f"ledger URL {url!r} is not postgresql://user:password@host:port/dbname?schema=…"
        )
    try:
        port = parsed.port or 5432
    except ValueError:
        raise InvalidURLError(
            f"ledger URL {url!r}: the port is not a number from 1 to 65535"
        ) from None
    given = parse_qs(parsed.query, keep_blank_values=True)
    _check_once(url, given)
    query = {k: v[-1] for k, v in given.items()}
    unknown = sorted(set(query) - set(_PG_OPTIONS))
    if unknown:
        raise InvalidURLError(
            f"ledger URL {url!r}: unknown option {unknown[0]!r} "
            f"(known: {', '.join(sorted(_PG_OPTIONS))})"
        )
    schema = query.get("schema", "public")
    _check_schema(url, schema)
    env = {
        # Topics, not the classes: psycopg loads only when the ledger opens.
        "PERSISTENCE_MODULE": "ledger.persistence.pg_pool:LedgerPostgresFactory",
        "POSTGRES_DBNAME": dbname,
        "POSTGRES_HOST": parsed.hostname,
        "POSTGRES_PORT": str(port),
        "POSTGRES_USER": unquote(parsed.username or os.environ.get("USER", "postgres")),
        # A URL without a password takes libpq's $PGPASSWORD, as psql would (the
        # password file, ~/.pgpass, libpq reads itself when this is empty).
        "POSTGRES_PASSWORD": unquote(parsed.password or "") or os.environ.get("PGPASSWORD", ""),
        "POSTGRES_SCHEMA": schema,
        "APPLICATION_RECORDER_TOPIC": "ledger.persistence.postgres:LedgerPostgresRecorder",
    }
    for option, (low, high, default) in PG_BOUNDS.items():
        if option not in query and default is None:
            continue
        value = query.get(option, str(default))
        if not value.isascii() or not value.isdigit() or not low <= int(value) <= high:
            raise InvalidURLError(
                f"ledger URL {url!r}: {option} must be a whole number from {low} to {high}, "
                f"not {value[:20]!r}"
            )
        env[_PG_OPTIONS[option]] = str(int(value))
    return Backend(kind="postgresql", url=url, env=env, secret=unquote(parsed.password or ""))


def idle_limit(backend: Backend) -> float | None:
    """The ``idle_in_transaction_session_timeout`` a PostgreSQL ledger's sessions run
    with (eventsourcing's setting: the URL's ``idle_timeout``, else the environment's,
    else 5 s); None on other backends, or where it is 0 (no limit)."""
    if backend.kind != "postgresql":
        return None
    key = "POSTGRES_IDLE_IN_TRANSACTION_SESSION_TIMEOUT"
    # eventsourcing reads the application's prefixed name first, over the URL's.
    named = os.environ.get(f"PROVLEDGER_{key}")
    try:
        limit = float(named or backend.env.get(key) or os.environ.get(key) or "5")
    except ValueError:
        return None  # eventsourcing refuses it when the ledger opens
    return limit if limit > 0 else None
