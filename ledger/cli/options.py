"""Option bundles and parameter types shared by every command, and how a command
opens its ledger: as the embedding host (admin) or as a token's principal."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import wraps
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ledger.application import Ledger
from ledger.domain import Kind
from ledger.errors import AccessDeniedError, LedgerError
from ledger.persistence import resolve_url
from ledger.session import Session

F = TypeVar("F", bound=Callable[..., Any])

URL_HELP = (
    "Ledger URL (memory:, sqlite:///path.db, postgresql://…). "
    "Default: $PROVLEDGER_URL, else sqlite:///provledger.db."
)
TOKEN_HELP = "Bearer token of the principal acting (from `provledger token issue`)."
KINDS = [k.value for k in Kind]
EVENT_TYPES = (
    "Proposed, Accepted, Rejected, Revoked, MarkedStale, Superseded, Revalidated, Delivered, "
    "CorrectionIssued, SnapshotErased"
)

STATUS_STYLE = {
    "ACCEPTED": "bold green",
    "CANDIDATE": "bold yellow",
    "STALE": "bold dark_orange",
    "REVOKED": "bold red",
    "REJECTED": "dim",
}
VALIDITY_STYLE = {"VALID": "green", "NEEDS_REVALIDATION": "yellow", "INVALID": "red"}
OUTCOME_STYLE = {"FOUND": "bold green", "MISSING": "bold yellow", "CONFLICT": "bold red"}


def printable(text: object) -> str:
    """``text`` on one line, with anything a terminal cannot show escaped."""
    one_line = str(text).replace("\r", "\\r").replace("\n", "\\n")
    return one_line.encode("utf-8", "backslashreplace").decode("utf-8")


def errors_exit_1(fn: F) -> F:
    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LedgerError as exc:
            click.echo(f"error: {printable(exc)}", err=True)
            sys.exit(1)
        except OSError as exc:  # reading FILE or writing -o FILE
            where = f"{exc.filename}: " if exc.filename else ""
            click.echo(f"error: {printable(where)}{printable(exc.strerror or exc)}", err=True)
            sys.exit(1)
        except (ValueError, UnicodeError) as exc:  # a path Python cannot open (NUL, surrogate)
            if not isinstance(exc, UnicodeError) and "null" not in str(exc):
                raise
            click.echo(f"error: cannot use that path: {printable(exc)}", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def parse_json(value: str) -> Any:
    """A JSON document; ValueError names what is wrong with it (not the whole text)."""
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{value[:40]!r} is not JSON ({exc.msg})") from None
    except (ValueError, RecursionError) as exc:  # huge integers, deep nesting
        kind = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ValueError(f"{value[:40]!r}… is not usable JSON ({kind})") from None


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
            return datetime.fromisoformat(str(value))
        except ValueError:
            self.fail(
                f"{value!r} is not an ISO 8601 date-time (e.g. 2026-05-01T12:00:00+00:00)",
                param,
                ctx,
            )


JSON = JSONType()
DATETIME = DateTimeType()


def url_option(fn: F) -> F:
    return click.option(
        "--url", envvar="PROVLEDGER_URL", show_envvar=True, default=None, help=URL_HELP
    )(fn)


def token_option(fn: F) -> F:
    return click.option(
        "--token", envvar="PROVLEDGER_TOKEN", show_envvar=True, required=True, help=TOKEN_HELP
    )(fn)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")(fn)


# -- opening the ledger ---------------------------------------------------------------


@dataclass(frozen=True)
class AsOf:
    """The past moment ``provledger as-of`` asked for (kept in the click context)."""

    position: int | None
    time: datetime | None


@contextmanager
def host_ledger(url: str | None, command: str) -> Iterator[Ledger]:
    """The ledger as its embedding host: only a local embedded database qualifies."""
    backend = resolve_url(url)
    if backend.kind not in ("sqlite", "memory"):
        raise AccessDeniedError(
            f"{command} refused: admin and maintenance commands run without a token only on "
            f"a local embedded database (sqlite:///path.db), not on a shared {backend.kind} "
            "server; run them from the embedding host's code (Ledger.admin(), Ledger.rebuild())"
        )
    with Ledger.open(url) as led:
        yield led


@contextmanager
def principal_session(url: str | None, token: str) -> Iterator[tuple[Ledger, Session]]:
    """The ledger and the session of the token's principal (as of a past moment under as-of)."""
    with Ledger.open(url) as led:
        session = led.authenticate(token)
        ctx = click.get_current_context(silent=True)
        moment = ctx.find_object(AsOf) if ctx is not None else None
        if moment is not None:
            session = session.as_of(position=moment.position, time=moment.time)
        yield led, session


def claim_options(fn: F) -> F:
    """``--scope``, ``--claim``, ``--at``, ``--context`` and ``--kind``: the question a
    read or an explanation asks."""
    for option in reversed(
        (
            click.option("--scope", required=True, help="The scope to read in."),
            click.option(
                "--claim-key", "--claim", "claim_key", required=True, help="The question asked."
            ),
            click.option("--at", type=DATETIME, help="Validity at this instant (default: now)."),
            click.option(
                "--context",
                type=JSON,
                help='Applicability context as JSON, e.g. {"api_version": "v2"}.',
            ),
            click.option(
                "--kind", "kinds", multiple=True, type=click.Choice(KINDS), help="Only these kinds."
            ),
        )
    ):
        fn = option(fn)
    return fn
