"""Option bundles and parameter types shared by every command, and how a command
opens its ledger: as the embedding host (admin) or as a token's principal."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar
from urllib.parse import parse_qs, urlsplit

import click
from click.core import ParameterSource

from ledger.application import Ledger
from ledger.cli.moments import as_of_said, as_of_words
from ledger.domain import Kind
from ledger.errors import (
    AccessDeniedError,
    AuthenticationError,
    InvalidInputError,
    InvalidURLError,
    LedgerError,
    LedgerNotFoundError,
    ReadOnlyError,
    StorageError,
    UnknownDeliveryError,
    UnknownRecordError,
    UnknownTokenError,
)
from ledger.persistence import foreign_file, resolve_url, unwritable
from ledger.persistence.urls import redacted
from ledger.session import Session
from ledger.validation import asked_key, from_iso

F = TypeVar("F", bound=Callable[..., Any])

URL_HELP = (
    "Ledger URL (sqlite:///path.db, postgresql://…). "
    "Default: $PROVLEDGER_URL, else sqlite:///provledger.db."
)
TOKEN_HELP = "Bearer token of the principal acting (from `provledger token issue`)."
KINDS = [k.value for k in Kind]

#: The colours of the pictures (ledger.diagram.STATUS_COLOURS): STALE orange, REVOKED red.
STATUS_STYLE = {
    "ACCEPTED": "bold green",
    "CANDIDATE": "bold yellow",
    "STALE": "bold #e65100",
    "REVOKED": "bold #d32f2f",
    "REJECTED": "dim",
    "SUPERSEDED": "bold #1565c0",
}
VALIDITY_STYLE = {"VALID": "green", "NEEDS_REVALIDATION": "yellow", "INVALID": "red"}
OUTCOME_STYLE = {"FOUND": "bold green", "MISSING": "bold yellow", "CONFLICT": "bold red"}


def printable(text: object) -> str:
    """``text`` on one line, with anything a terminal cannot show escaped."""
    one_line = str(text).replace("\r", "\\r").replace("\n", "\\n")
    return one_line.encode("utf-8", "backslashreplace").decode("utf-8")


class _NotJSON(ValueError):
    """A number JSON has no way to write (Python's ``json`` reads them)."""


def _constant(name: str) -> Any:
    raise _NotJSON(f"{name} is not a JSON number")


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose names are each given once: ``{"a": 1, "a": 2}`` would keep
    the last silently, losing what the first said."""
    out: dict[str, Any] = {}
    for name, item in pairs:
        if name in out:
            raise _NotJSON(f"the name {name[:40]!r} is given twice in one object")
        out[name] = item
    return out


def _finite(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise _NotJSON(f"{text[:40]} is beyond the range of a 64-bit float")
    return number


def parse_json(value: str) -> Any:
    """A JSON document, strictly: no ``NaN`` or ``Infinity``, nor a number too large
    for a float, nor a name given twice in one object (Python's ``json`` reads all
    four); ValueError names what is wrong with it (not the whole text)."""
    try:
        return json.loads(
            value, parse_constant=_constant, parse_float=_finite, object_pairs_hook=_unique
        )
    except json.JSONDecodeError as exc:
        raise ValueError(f"{value[:40]!r} is not JSON ({exc.msg})") from None
    except _NotJSON as exc:
        raise ValueError(f"{value[:40]!r} is not JSON ({exc})") from None
    except RecursionError:
        raise ValueError(f"{value[:40]!r}… is not usable JSON (nested too deeply)") from None
    except ValueError as exc:  # an integer of more digits than Python converts
        if "digits" not in str(exc):
            raise
        raise ValueError(
            f"{value[:40]!r}… is not usable JSON (an integer of more than "
            f"{sys.get_int_max_str_digits()} digits)"
        ) from None


# -- parameter types ---------------------------------------------------------------

if TYPE_CHECKING:
    _ParamType = click.ParamType[Any]
else:  # subscripting it at run time needs a newer click than type checking does
    _ParamType = click.ParamType


class JSONType(_ParamType):
    """A JSON document given on the command line."""

    name = "json"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return parse_json(value)
        except ValueError as exc:
            self.fail(printable(exc), param, ctx)


class DateTimeType(_ParamType):
    """An ISO 8601 date-time; give an offset (naive ones are refused by the ledger)."""

    name = "datetime"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, datetime):
            return value
        try:
            parsed = from_iso(str(value))
        except ValueError:
            self.fail(
                f"{value!r} is not an ISO 8601 date-time (e.g. 2026-05-01T12:00:00+00:00)",
                param,
                ctx,
            )
        if parsed.tzinfo is None:
            self.fail(
                f"{value!r} has no timezone; add an offset, e.g. {parsed.isoformat()}+00:00",
                param,
                ctx,
            )
        return parsed


JSON = JSONType()
DATETIME = DateTimeType()


#: Set in the root context once a password in --url has been warned about.
_WARNED_PASSWORD = "provledger.warned_password"


def _password_in_argv(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Warn, once a command, when ``--url`` given on the command line holds a password:
    other users read it there (``ps``), masked as it is in every message (a URL
    from $PROVLEDGER_URL is not warned about)."""
    given = ctx.get_parameter_source(param.name or "") is ParameterSource.COMMANDLINE
    root = ctx.find_root().meta
    if (
        given
        and not ctx.resilient_parsing  # completing what is typed: no warning
        and value is not None
        and not value.lstrip().startswith(("sqlite:", "memory:"))
        and redacted(value.strip()) != value.strip()
        and not root.get(_WARNED_PASSWORD)
    ):
        root[_WARNED_PASSWORD] = True
        click.echo(
            "warning: --url on the command line holds a password, visible to other users "
            "(ps, /proc/PID/cmdline); export PROVLEDGER_URL instead, or leave the password "
            "out of the URL and give it in $PGPASSWORD or ~/.pgpass",
            err=True,
        )
    return value


def url_option(fn: F) -> F:
    return click.option(
        "--url",
        envvar="PROVLEDGER_URL",
        show_envvar=True,
        default=None,
        callback=_password_in_argv,
        help=URL_HELP,
    )(fn)


class TokenOption(click.Option):
    """A token's option: one given empty (or blank), or with white space at an end,
    on the command line or in its variable, is a usage error that says so. (click
    takes an empty variable for none, and would say "Missing option '--token'" of a
    variable that is there.)
    ``whose``: what the token is and where it comes from, for the message."""

    def __init__(self, *args: Any, whose: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.whose = whose

    def process_value(self, ctx: click.Context, value: Any) -> Any:
        variable = self.envvar if isinstance(self.envvar, str) else None
        option = max(self.opts, key=len)
        if isinstance(value, str) and not value.strip():
            source = ctx.get_parameter_source(self.name or "")
            if variable is not None and source is ParameterSource.ENVIRONMENT:
                raise click.UsageError(self._set_but_empty(variable, option), ctx)
            also = f", or leave {option} out and export {variable}" if variable else ""
            raise click.UsageError(f"{option} is empty: give {self.whose}{also}", ctx)
        if isinstance(value, str) and value.strip() != value:
            # No token holds white space: a line end ``$(cat file)`` left (\r of a
            # file with CRLF line ends) would be refused as "unknown".
            source = ctx.get_parameter_source(self.name or "")
            given = f"${variable}" if source is ParameterSource.ENVIRONMENT else option
            end = "begins" if value.lstrip() != value else "ends"
            char = value[0] if end == "begins" else value[-1]
            raise click.UsageError(
                f"{given} {end} with white space ({char!r}): a token holds none; remove it"
                + (" (a file with CRLF line ends? tr -d '\\r')" if char == "\r" else ""),
                ctx,
            )
        try:
            return super().process_value(ctx, value)
        except click.MissingParameter:
            if variable is not None and variable in os.environ:
                raise click.UsageError(self._set_but_empty(variable, option), ctx) from None
            raise

    def _set_but_empty(self, variable: str, option: str) -> str:
        return f"{variable} is set but empty: put {self.whose} in it, or unset it and give {option}"


def admin_token_option(fn: F) -> F:
    return click.option(
        "--admin-token",
        envvar="PROVLEDGER_ADMIN_TOKEN",
        show_envvar=True,
        default=None,
        cls=TokenOption,
        whose="the admin token `provledger init` printed",
        help="The admin token `provledger init` printed (needed on PostgreSQL and on a "
        "file you do not own).",
    )(fn)


def admin_options(fn: F) -> F:
    """``--url`` and ``--admin-token``: what every admin and maintenance command takes."""
    return url_option(admin_token_option(fn))


def token_option(fn: F) -> F:
    return click.option(
        "--token",
        envvar="PROVLEDGER_TOKEN",
        show_envvar=True,
        required=True,
        cls=TokenOption,
        whose="the principal's token (`provledger token issue SUBJECT` prints one)",
        help=TOKEN_HELP,
    )(fn)


def run_option(fn: F) -> F:
    """``--run RUN`` / ``$PROVLEDGER_RUN``: act inside a run started earlier."""
    return click.option(
        "--run",
        "run_id",
        envvar="PROVLEDGER_RUN",
        show_envvar=True,
        default=None,
        metavar="RUN",
        help="Inside this run (`provledger run start`): reads are recorded in it and "
        "proposals carry them as observed dependencies (ignored under as-of; refused "
        "on a ledger opened read-only).",
    )(fn)


def within(session: Session, run_id: str | None) -> Any:
    """``session``, or the run ``run_id`` it started earlier, resumed (not under as-of:
    a past state is not what a task reads).

    Raises:
        ReadOnlyError: a run on a ledger opened read-only (its reads could not be
            recorded in it).
    """
    if run_id is None or session.position is not None:
        return session
    if session.read_only:
        raise ReadOnlyError(
            f"--run {run_id!r} refused: the ledger is opened read-only (mode=ro), so "
            "reads cannot be recorded in a run; leave --run (and $PROVLEDGER_RUN) out"
        )
    try:
        return session.run(run_id).resume()
    except InvalidInputError as exc:  # the run was never started, or has ended
        if os.environ.get("PROVLEDGER_RUN") != run_id:
            raise
        # Say where the run came from: the variable outlives the task it was set for.
        raise type(exc)(
            f"{exc} (the run is $PROVLEDGER_RUN's: unset it to act outside a run)"
        ) from None


def json_option(fn: F) -> F:
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help='Print machine-readable JSON; a refusal prints {"error": {"type": …, '
        '"message": …}} there too (usage errors, exit 2, are text).',
    )(fn)


# -- opening the ledger ---------------------------------------------------------------


@dataclass(frozen=True)
class AsOf:
    """The past moment ``provledger as-of`` asked for (kept in the click context)."""

    position: int | None
    time: datetime | None


def open_ledger(
    url: str | None,
    *,
    create: bool = False,
    catch_up: bool = True,
    one_process: bool = False,
    writable: bool = False,
) -> Ledger:
    """The ledger at ``url``; unless ``create``, one that does not exist is refused
    and nothing is created (no file, no tables). ``catch_up``: see ``Ledger.open``.
    ``memory:`` is refused unless ``one_process`` (a command whose whole use of the
    ledger is in this process, as the demo's): each command is a process of its
    own, and what one wrote there would be gone when it exits. An SQLite ledger
    this user cannot write is opened read-only, saying so, unless ``writable``
    (a server's) or its URL asks for ``mode=rw``: then it is refused."""
    backend = resolve_url(url)
    if backend.path is not None and os.path.isdir(backend.path):
        inside = os.path.join(backend.path, "provledger.db")
        in_it = f"give the path of a file in it (sqlite:///{inside})"
        if create:  # init, demo: there is no ledger to miss there, but one to make
            raise StorageError(
                f"cannot create a ledger at {backend.url}: {backend.path} is a directory; {in_it}"
            )
        raise LedgerNotFoundError(
            f"no ledger at {backend.url}: {backend.path} is a directory; {in_it}"
        )
    if not one_process and backend.kind == "memory":
        raise InvalidURLError(
            "memory: keeps a ledger only inside one process, and each command is a "
            "process of its own (what it wrote would be gone when it exits): give a "
            "sqlite:///path.db file or a postgresql:// database (`provledger demo "
            "--url memory:` runs the demo in one process)"
        )
    sqlite = backend.kind == "sqlite" and backend.path is not None and not backend.read_only
    asked = writable or create or backend.writable_asked
    why = unwritable(str(backend.path)) if sqlite and not asked else None
    if why is not None:  # as SQLite itself would, but said: reads answer, writes refused
        click.echo(
            f"warning: opened the ledger at {backend.path} read-only, as this user cannot "
            f"write it: {why}; reads, audit, verify and bundles answer, writes are refused",
            err=True,
        )
        url = backend.url + ("&" if "?" in backend.url else "?") + "mode=ro"
    try:
        return Ledger.open(url, create=create, catch_up=catch_up)
    except LedgerNotFoundError:
        backend = resolve_url(url)
        given = _url_given()
        found = foreign_file(backend.path) if backend.path is not None else None
        if found is not None:  # a file of something else: `init` is no answer
            raise LedgerNotFoundError(
                f"no ledger at {backend.url}: the file there is {found}; check {given}"
            ) from None
        folder = None if backend.path is None else os.path.dirname(backend.path) or "."
        if folder is not None and not os.path.isdir(folder):  # nor can init there
            raise LedgerNotFoundError(
                f"no ledger at {backend.url}: the directory {printable(folder)} does not "
                f"exist; check {given}"
            ) from None
        if backend.read_only:  # init creates, which read-only cannot
            raise LedgerNotFoundError(
                f"no ledger at {backend.url} (opened read-only: nothing was created); "
                f"check the path or {given}"
            ) from None
        raise LedgerNotFoundError(
            f"no ledger at {backend.url}; run `provledger init` to create one, put "
            f"back a backup if it was lost, or check {given}"
        ) from None


def warn_public_schema(url: str | None, command: str) -> None:
    """Warn that a PostgreSQL ``url`` naming no schema has ``command`` put the ledger
    into ``public``, beside whatever else the database keeps there (a URL that
    cannot be resolved: the command's own refusal says why)."""
    try:
        backend = resolve_url(url)
    except LedgerError:
        return
    if backend.kind == "postgresql" and "schema" not in parse_qs(urlsplit(backend.url).query):
        click.echo(
            f"warning: {printable(backend.url)} names no schema: {command} puts the "
            "ledger into schema 'public', beside whatever else the database keeps "
            "there; give it one of its own with ?schema=NAME",
            err=True,
        )


def _url_given() -> str:
    """Where the ledger's URL came from, as a refusal names it: ``--url`` or
    ``$PROVLEDGER_URL`` (the default file: either, to give one)."""
    context = click.get_current_context(silent=True)
    source = None if context is None else context.get_parameter_source("url")
    if source is ParameterSource.COMMANDLINE:
        return "--url"
    if source is ParameterSource.ENVIRONMENT:
        return "PROVLEDGER_URL"
    return "--url or PROVLEDGER_URL"


#: The most a --value-file is read (a value is at most 1 MiB stored by default;
#: its JSON text is longer).
VALUE_FILE_BYTES = 64 * 1024 * 1024


def json_file_text(stream: BinaryIO) -> str:
    """The JSON text of a ``--value-file`` (UTF-8, a byte order mark at its start
    allowed), refused as a usage error when it is larger than
    :data:`VALUE_FILE_BYTES` or no UTF-8."""
    data = stream.read(VALUE_FILE_BYTES + 1)
    name = printable(getattr(stream, "name", "-"))
    if len(data) > VALUE_FILE_BYTES:
        raise click.BadParameter(
            f"{name} holds more than {VALUE_FILE_BYTES:,} bytes", param_hint="--value-file"
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise click.BadParameter(
            f"{name} is not UTF-8 text (byte {exc.start})", param_hint="--value-file"
        ) from None


def not_the_ledger(output: str | None, url: str | None, command: str) -> None:
    """Refuse, before anything is done, a file to write that is the ledger's own
    (its SQLite file, or that file's ``-wal``, ``-shm`` or ``-journal``, by any
    name or link): writing it would destroy the ledger."""
    if output is None or output == "-":
        return
    try:
        path = resolve_url(url).path
    except LedgerError:
        return  # the command itself says what is wrong with the URL
    if path is None:
        return
    real = os.path.realpath(path)  # SQLite puts its -wal and -shm beside the file itself
    wanted = os.path.realpath(output)
    for name in (real, f"{real}-wal", f"{real}-shm", f"{real}-journal"):
        # By name (a -wal or -shm SQLite has not made yet, or removed, is its own all
        # the same), and by file (a hard link to one)
        try:
            same = wanted == name or os.path.samefile(output, name)
        except (OSError, ValueError):  # either one missing (or unnamable): not the same
            same = False
        if same:
            raise InvalidInputError(
                f"{command} refused: {printable(output)} is the ledger's own file "
                f"({printable(name)}); writing it would destroy the ledger; nothing was "
                "written: give another file"
            )


def owns_file(path: str | None) -> bool:
    """Whether this process's user owns the SQLite file at ``path``."""
    try:
        return path is not None and os.stat(path).st_uid == os.geteuid()
    except (OSError, AttributeError):  # AttributeError: no geteuid on this platform
        return False


@contextmanager
def host_ledger(
    url: str | None,
    command: str,
    admin_token: str | None = None,
    *,
    create: bool = False,
    catch_up: bool = True,
) -> Iterator[Ledger]:
    """The ledger as its administrator: with a valid admin token, or without one on
    an in-memory ledger or a local SQLite file this user owns (``catch_up``: see
    ``Ledger.open``)."""
    backend = resolve_url(url)
    with open_ledger(url, create=create, catch_up=catch_up) as led:
        if admin_token is None:
            if backend.kind == "postgresql" or (
                backend.kind == "sqlite" and not owns_file(backend.path)
            ):
                whose = (
                    f"a shared {backend.kind} database"
                    if backend.kind == "postgresql"
                    else f"{printable(backend.path)}, a file another user owns"
                )
                # click takes an empty variable for none: say it is there, but empty.
                give = (
                    "PROVLEDGER_ADMIN_TOKEN is set but empty: put the admin token "
                    "`provledger init` printed in it (or give --admin-token)"
                    if os.environ.get("PROVLEDGER_ADMIN_TOKEN") == ""
                    else "give the admin token `provledger init` printed (--admin-token or "
                    "$PROVLEDGER_ADMIN_TOKEN)"
                )
                raise AccessDeniedError(
                    f"{command} refused: it is an admin command on {whose}; {give}"
                )
        else:
            warn_token_in_argv(admin_token, "--admin-token", "PROVLEDGER_ADMIN_TOKEN")
            try:
                led.admin(admin_token)
            except AuthenticationError as exc:
                raise from_variable(exc, "admin_token", "PROVLEDGER_ADMIN_TOKEN") from None
        yield led


def warn_token_in_argv(
    token: str, option: str = "--token", variable: str = "PROVLEDGER_TOKEN"
) -> None:
    """A token given as ``option`` is readable by other users in the process list
    (a token that is only a command's argument, e.g. the one ``token revoke``
    withdraws, is not warned about)."""
    argv = sys.argv[1:]
    given = f"{option}={token}" in argv or any(
        flag == option and value == token for flag, value in pairwise(argv)
    )
    if given:
        click.echo(
            f"warning: {option} on the command line is visible to other users "
            f"(ps, /proc/PID/cmdline); export {variable} instead",
            err=True,
        )


def from_variable(exc: AuthenticationError, name: str, variable: str) -> AuthenticationError:
    """``exc``, the refusal of the token a command's parameter ``name`` holds, saying
    when the token came from ``variable``: one left there for another ledger is
    otherwise hard to tell from the token meant."""
    ctx = click.get_current_context(silent=True)
    if ctx is None or ctx.get_parameter_source(name) is not ParameterSource.ENVIRONMENT:
        return exc
    if isinstance(exc, UnknownTokenError):
        return type(exc)(f"{exc} (the token in ${variable}: one left there for another ledger?)")
    return type(exc)(f"{exc} (the token in ${variable})")


@contextmanager
def principal_session(url: str | None, token: str) -> Iterator[tuple[Ledger, Session]]:
    """The ledger and the session of the token's principal (as of a past moment under as-of)."""
    ctx = click.get_current_context(silent=True)
    moment = ctx.find_object(AsOf) if ctx is not None else None
    if (
        ctx is not None
        and moment is not None
        and (moment.position is None) == (moment.time is None)
    ):
        # Named against ``as-of`` itself, so the usage and example shown are its own.
        owner = ctx
        while owner.parent is not None and owner.parent.find_object(AsOf) is moment:
            owner = owner.parent
        raise click.UsageError("as-of: give exactly one of --position or --time", owner)
    warn_token_in_argv(token)
    with open_ledger(url) as led:
        try:
            session = led.authenticate(token)
        except AuthenticationError as exc:
            raise from_variable(exc, "token", "PROVLEDGER_TOKEN") from None
        if moment is not None:
            try:
                session = session.as_of(position=moment.position, time=moment.time)
            except InvalidInputError as exc:
                command = None if ctx is None else ctx.info_name
                raise type(exc)(as_of_words(str(exc), command)) from None
        try:
            yield led, session
        except (UnknownRecordError, UnknownDeliveryError) as exc:
            raise as_of_said(exc, session) from None


def shown_key(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """An option's claim key (or prefix) as given, or, when it is given as tables
    show a key an earlier version took (a JSON string), that key as stored."""
    return value if value is None else asked_key(value)


def claim_options(fn: F) -> F:
    """``--scope``, ``--claim``, ``--at``, ``--context`` and ``--kind``: the question a
    read or an explanation asks."""
    for option in reversed(
        (
            click.option("--scope", required=True, help="The scope to read in."),
            click.option(
                "--claim-key",
                "--claim",
                "claim_key",
                required=True,
                callback=shown_key,
                help="The question asked (a key tables show as a JSON string may be given so).",
            ),
            click.option("--at", type=DATETIME, help="Validity at this instant (default: now)."),
            click.option(
                "--context",
                type=JSON,
                help='Applicability context as JSON, e.g. {"api_version": "v2"}.',
            ),
            click.option(
                "--kind",
                "kinds",
                multiple=True,
                type=click.Choice(KINDS),
                help="Only these kinds (repeat it: --kind fact --kind inference).",
            ),
        )
    ):
        fn = option(fn)
    return fn
