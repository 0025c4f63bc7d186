"""How a command that fails ends: one ``error:`` line on stderr, its exit status
(1 a refusal; 3 a check that could not check), and with ``--json`` the error as
JSON on stdout too; the library's message in the command line's words."""

from __future__ import annotations

import codecs
import errno
import json
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from functools import wraps
from typing import Any, NoReturn, TypeGuard, TypeVar

import click

from ledger.cli.options import printable
from ledger.errors import LedgerError, install_hint

F = TypeVar("F", bound=Callable[..., Any])

#: The optional package behind a feature → the extra that installs it.
EXTRAS = {
    "psycopg": "postgres",
    "psycopg_pool": "postgres",
    "prov": "prov",
    "lxml": "prov",
    "cryptography": "evidence",
    "mcp": "mcp",
    "starlette": "serve",
    "uvicorn": "serve",
    "jinja2": "serve",
    "multipart": "serve",
    "python_multipart": "serve",
    "langgraph": "langgraph",
}

#: A library refusal's opening: the ledger call refused (``revoke_token refused: …``).
_LEDGER_CALL = re.compile(r"^[a-z_]+(?= refused)")
_GENERATED_ID = re.compile(r"'(r-[0-9a-f]{32})'")


def typed_command() -> str | None:
    """The command running, as typed after ``provledger`` (``token issue``,
    ``as-of get``); None outside one."""
    ctx = click.get_current_context(silent=True)
    names: list[str] = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(reversed(names)) or None


def cli_message(exc: LedgerError, given: dict[str, Any]) -> str:
    """The library's message in the command line's words: the command typed instead
    of the ledger call it refused (``token issue refused``, not ``issue_token
    refused``), ``--at`` for the instant a read was given (not ``at``), and "the
    new record" instead of an id generated for it that the user never saw."""
    text = printable(exc)
    command = typed_command()
    call = _LEDGER_CALL.match(text)
    if command is not None and call is not None:
        text = command + text[call.end() :]
    at = given.get("at")
    if isinstance(at, datetime) and text.startswith(f"at {at.isoformat()} "):
        text = "--" + text  # the instant of --at (read, explain), refused by its name
    typed = {str(v) for v in given.values()}

    def unseen(match: re.Match[str]) -> str:
        return match.group(0) if match.group(1) in typed else "the new record"

    return _GENERATED_ID.sub(unseen, text)


#: Why a write to stdout fails (a full disk, a quota, a device error).
_WRITE_FAILURES = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


#: The exit status of a check (``verify``, ``verify-bundle``) that could not run: the
#: ledger or a file could not be opened or read, a token was refused, the storage
#: failed. A check that ran and found a problem exits 1, as every refusal does.
COULD_NOT_CHECK = 3


#: Set in the context's ``meta`` (shared by every context of the command) by a
#: check that found a problem, before it writes its report: the ``error:`` line it
#: prints (without ``error: ``). Should writing the report fail (a full disk), the
#: line is printed all the same and the check exits 1, as it would have: the
#: problem is what it found (:func:`found_problem`).
_FOUND = "provledger.found"
#: Set in the context's ``meta`` while a command streams its JSON answer: what
#: closes the document written so far with an ``"error"`` member, so that a
#: refusal part way leaves stdout one JSON object (:func:`open_json`).
_OPEN_JSON = "provledger.open_json"


def _meta() -> dict[str, Any]:
    ctx = click.get_current_context(silent=True)
    return {} if ctx is None else ctx.meta


def warn_if_empty(size: int, command: str) -> None:
    """Warn on stderr that the log ``command`` checked or signed holds no event
    (``size``: its tree's): ``init`` writes events, so an empty log was never
    used, or is what an init or a copy that did not finish left."""
    if size == 0:
        click.echo(
            f"warning: the log is empty: no events (a ledger nothing was written to, or "
            f"an init or copy that did not finish); {command} holds for that empty log "
            "alone; `verify --against DIGEST` checks a log holds what you expect",
            err=True,
        )


def found_problem(line: str) -> None:
    """Say that the check running found a problem, ``line`` being its ``error:``
    line (without ``error: ``), before its report is written: see :data:`_FOUND`."""
    _meta()[_FOUND] = line


@contextmanager
def open_json(close: Callable[[dict[str, Any]], None]) -> Iterator[None]:
    """While inside, a refusal given ``--json`` calls ``close`` with its ``{"type",
    "message"}`` (to end the JSON document streamed so far with it) instead of
    printing an object of its own after that document's start. Left set when an
    error leaves it: the refusal closes the document."""
    meta = _meta()
    meta[_OPEN_JSON] = close
    yield
    meta.pop(_OPEN_JSON, None)


def _echo_answer(write: Callable[[], None]) -> None:
    """``write`` the JSON answer of a refusal on stdout; one that cannot be written
    (a full disk: the ``error:`` line on stderr says what was refused) is left out,
    but a reader of stdout gone ends the command as every broken pipe does."""
    try:
        write()
    except BrokenPipeError:
        raise
    except OSError:
        pass


def fail(message: str, status: int = 1, answer: dict[str, Any] | None = None) -> NoReturn:
    """Print ``error: message`` on stderr and exit ``status`` (1: a refusal), even
    when the reader of stderr has gone away (not the exit 0 of a reader of stdout
    leaving). ``answer``: also printed on stdout, as JSON (what ``--json`` asked for),
    as the end of a JSON document streamed so far if one is (:func:`open_json`);
    a reader of stdout gone by then ends the command as every broken pipe does."""
    with suppress(BrokenPipeError):
        click.echo(f"error: {message}", err=True)
    close = _meta().pop(_OPEN_JSON, None)
    if answer is not None and close is not None:
        _echo_answer(lambda: close(answer["error"]))
    elif answer is not None:
        _echo_answer(lambda: click.echo(json.dumps(answer, indent=2, ensure_ascii=False)))
    sys.exit(status)


def errors_exit_1(fn: F) -> F:
    """A command whose refusals print one ``error:`` line and exit 1 (with
    ``--json``, the error as JSON on stdout too: :func:`_refusals_exit`)."""
    return _refusals_exit(fn, 1, {})


def errors_exit_3(fn: F) -> F:
    """A check's (``verify``, ``verify-bundle``): an error means it could not check,
    exit 3 (:data:`COULD_NOT_CHECK`), and its JSON says ``"ok": false`` too; the
    check itself exits 1 for a problem it found."""
    return _refusals_exit(fn, COULD_NOT_CHECK, {"ok": False})


def _refusals_exit(fn: F, status: int, fields: dict[str, Any]) -> F:
    """``fn`` with its errors (a LedgerError; an optional package missing; a file it
    could not read or write) printed as one ``error:`` line on stderr and exit
    ``status``. Given ``--json``, stdout also gets ``{**fields, "error": {"type":
    …, "message": …}}``: the error's class and the same message (credentials
    masked as in it), so a script reads why without parsing stderr."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        as_json = bool(kwargs.get("as_json"))

        def refuse(exc: BaseException, message: str, *, answer: bool = True) -> NoReturn:
            shown = {**fields, "error": {"type": type(exc).__name__, "message": message}}
            fail(message, status, shown if as_json and answer else None)

        try:
            return fn(*args, **kwargs)
        except LedgerError as exc:
            refuse(exc, cli_message(exc, kwargs))
        except ModuleNotFoundError as exc:  # an optional package of an extra
            top = (exc.name or "").split(".", 1)[0]
            if top not in EXTRAS:
                raise
            refuse(exc, f"this needs {top}, which is not installed; {install_hint(EXTRAS[top])}")
        except BrokenPipeError:
            raise  # the reader of stdout went away: see ledger.cli._Main.invoke
        except OSError as exc:  # reading FILE or writing -o FILE, or stdout
            if not exc.filename and exc.errno in _WRITE_FAILURES:
                why = printable(exc.strerror or exc)
                found = _meta().get(_FOUND)
                if found is not None:
                    # A check that found a problem: its report is lost, not the
                    # problem, nor its exit status (3 would say it could not check).
                    fail(f"{found} (the report could not be written to stdout: {why})")
                # Writing the answer failed, after the work it answers for: a
                # command's write stands, so this is no refusal of it. (Nor is
                # JSON written where the answer could not be.)
                refuse(
                    exc,
                    f"the answer could not be written to stdout "
                    f"({why}); anything the command wrote to "
                    "the ledger stands (look before running it again)",
                    answer=False,
                )
            where = f"{exc.filename}: " if exc.filename else ""
            refuse(exc, f"{printable(where)}{printable(exc.strerror or exc)}")
        except (ValueError, UnicodeError) as exc:  # a path Python cannot open (NUL, surrogate)
            if _unprintable(exc):
                refuse(
                    exc,
                    f"the answer could not be written to stdout: its encoding "
                    f"({sys.stdout.encoding}) cannot show {exc.object[exc.start : exc.end]!r}; "
                    "set PYTHONIOENCODING=utf-8 (or a UTF-8 locale); anything the command "
                    "wrote to the ledger stands (look before running it again)",
                    answer=False,
                )
            if not isinstance(exc, UnicodeError) and "null" not in str(exc):
                raise
            refuse(exc, f"cannot use that path: {printable(exc)}")

    return wrapper  # type: ignore[return-value]


def _unprintable(exc: BaseException) -> TypeGuard[UnicodeEncodeError]:
    """Whether ``exc`` is stdout's encoding (not UTF-8: a locale of C or Latin-1)
    failing to encode the answer, not a path the file system cannot take."""
    if not isinstance(exc, UnicodeEncodeError) or not isinstance(exc.object, str):
        return False
    out = codecs.lookup(getattr(sys.stdout, "encoding", None) or "utf-8").name
    return out != "utf-8" and codecs.lookup(exc.encoding).name == out
