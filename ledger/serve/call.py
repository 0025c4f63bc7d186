"""One API request's inputs, read field by field (:class:`Call`), for the handlers
of :mod:`ledger.serve.api`.

A :class:`Call` remembers each field it was asked for, so a refusal can name the
offending one. Path parameters are taken from the path as sent
(:func:`path_parameters`): an encoded slash is part of its segment, and a segment
that is not UTF-8 once percent-decoded is refused, as a query string is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import unquote_to_bytes

from starlette.datastructures import QueryParams

from ledger import Ledger, Session
from ledger.domain import Kind, Status, Validity
from ledger.errors import LedgerError, UnknownDeliveryError, UnknownRecordError, retold
from ledger.serve.inputs import FieldError, json_type, parse_time
from ledger.serve.payloads import moment
from ledger.validation import quoted

#: An integer query parameter with more digits is out of any range a route takes.
_MOST_DIGITS = 30
#: How a path parameter is named in a refusal ("record id '…' is not UTF-8 …").
_PATH_WORDS = {"record_id": "record id", "delivery_id": "delivery id"}


def path_parameters(
    template: str, raw_path: bytes | None, matched: Mapping[str, str]
) -> dict[str, str]:
    """The path parameters of a request routed by ``template`` (``/api/v1/records/
    {record_id}``), each its segment of ``raw_path`` (the path as sent)
    percent-decoded once: ``M1%2Faudit`` is the id ``M1/audit``, which the decoded
    path (``matched``, Starlette's parameters) cannot tell from a route below M1.

    Raises:
        FieldError: a parameter that is not UTF-8 once percent-decoded (decoded
            with replacement it would read as U+FFFD).
    """
    names = template.split("/")
    sent = raw_path.split(b"/") if raw_path else []
    if len(sent) < len(names):  # not the path the route matched: keep Starlette's
        return dict(matched)
    params = dict(matched)
    # Aligned from the end: a root path before the application's own is not in the template.
    for offset, part in enumerate(reversed(names), start=1):
        if not (part.startswith("{") and part.endswith("}")):
            continue
        name = part[1:-1]
        try:
            params[name] = unquote_to_bytes(sent[-offset]).decode("utf-8")
        except UnicodeDecodeError:
            what = _PATH_WORDS.get(name, name)
            shown = quoted(sent[-offset].decode("latin-1"))
            raise FieldError(name, f"{what} {shown} is not UTF-8 once percent-decoded") from None
    return params


@dataclass
class Call:
    """One API request's inputs, read field by field (each name is remembered);
    its ``repr`` leaves out the token."""

    ledger: Ledger
    token: str = field(repr=False)
    path: Mapping[str, str]
    query: QueryParams
    body: Mapping[str, Any]
    used: list[str] = field(default_factory=list)
    #: The token's session, once the token was checked (None: checked on first use).
    authenticated: Session | None = field(default=None, repr=False)
    #: The session of the past moment the query asked for, once asked (None: now).
    past: Session | None = field(default=None, repr=False)

    # -- the principal ---------------------------------------------------------

    def session(self) -> Session:
        """The token's session, as of a past moment when the query asks for one."""
        session = self.authenticated
        if session is None:
            session = self.ledger.authenticate(self.token)
        position = self.query_int("as_of_position", minimum=0)
        when = self.query_time("as_of_time")
        if position is not None and when is not None:
            raise FieldError("as_of_time", "give as_of_position or as_of_time, not both")
        if position is not None or when is not None:
            session = self.past = session.as_of(position=position, time=when)
        return session

    def unknown_then(self, exc: LedgerError) -> LedgerError:
        """``exc`` (a record or delivery unknown) saying the past moment the query
        asked for, when it asked for one: one proposed since is not there yet,
        which "unknown" alone hides."""
        found = None if self.past is None else moment(self.past)
        if found is None or not isinstance(exc, UnknownRecordError | UnknownDeliveryError):
            return exc
        return retold(exc, f"{exc} as of log position {found['position']} ({found['time']})")

    # -- path and query --------------------------------------------------------

    def path_id(self, name: str = "record_id") -> str:
        """A path parameter."""
        self.used.append(name)
        return self.path[name]

    def query_str(self, name: str, *, required: bool = False, empty: bool = False) -> str | None:
        """A query parameter; ``required`` refuses a missing one. An empty one is
        refused unless ``empty`` says it means what leaving it out does (a claim
        prefix): ``as_of_time=`` left blank must not answer as of now, nor
        ``status=`` list every status."""
        value = self.query.get(name)
        if value is None:
            if required:
                raise FieldError(name, f"query parameter {name!r} is required")
            return None
        self.used.append(name)  # a refusal may be about it (never one not given)
        if value == "":
            if empty and not required:
                return None
            leave = "" if required else " or leave it out"
            raise FieldError(name, f"query parameter {name!r} is empty: give a value{leave}")
        return value

    def query_int(
        self, name: str, *, minimum: int | None = None, maximum: int | None = None
    ) -> int | None:
        """An integer query parameter within bounds."""
        text = self.query_str(name)
        if text is None:
            return None
        # Digits only: int() would also read "1_0", "+5", " 5" and other scripts' digits.
        digits = text[1:] if text.startswith("-") else text
        if not (digits.isascii() and digits.isdigit()):
            raise FieldError(name, f"{name} {text[:40]!r} is not an integer")
        significant = digits.lstrip("0") or "0"
        if len(significant) > _MOST_DIGITS:  # int() refuses over 4,300 digits (a 500)
            raise FieldError(name, f"{name} of {len(significant):,} digits is out of range")
        value = -int(significant) if text.startswith("-") else int(significant)
        if minimum is not None and value < minimum:
            bound = f"at least {minimum}" if maximum is None else f"in {minimum}..{maximum}"
            raise FieldError(name, f"{name} {value} is not {bound}")
        if maximum is not None and value > maximum:
            bound = f"at most {maximum}" if minimum is None else f"in {minimum}..{maximum}"
            raise FieldError(name, f"{name} {value} is not {bound}")
        return value

    def query_choice(self, name: str, choices: type[Kind | Status | Validity]) -> str | None:
        """A query parameter naming one member of an enum."""
        text = self.query_str(name)
        allowed = [c.value for c in choices]
        if text is not None and text not in allowed:
            raise FieldError(name, f"{name} {text[:40]!r} is not one of: {', '.join(allowed)}")
        return text

    def query_time(self, name: str) -> datetime | None:
        """An RFC 3339 date-time query parameter (:func:`parse_time`)."""
        return parse_time(name, self.query_str(name))

    def query_bool(self, name: str, default: bool) -> bool:
        """``true``/``false`` (also 1/0, yes/no)."""
        text = self.query_str(name)
        if text is None:
            return default
        lowered = text.lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        raise FieldError(name, f"{name} {text[:40]!r} is not true or false")

    # -- body ------------------------------------------------------------------

    def has(self, name: str) -> bool:
        """Whether the body gives ``name`` (null counts as not given)."""
        return self.body.get(name) is not None

    def require(self, *names: str) -> None:
        """Refuse a body that leaves out any of ``names``, naming every one left out
        (the error's field is the first)."""
        missing = [name for name in names if name not in self.body]
        if len(missing) == 1:
            raise FieldError(missing[0], f"field {missing[0]!r} is required")
        if missing:
            *most, last = (repr(name) for name in missing)
            raise FieldError(missing[0], f"fields {', '.join(most)} and {last} are required")

    def body_any(self, name: str, *, required: bool = False) -> Any:
        """A body field of any JSON type."""
        if self.body.get(name) is not None:
            self.used.append(name)  # a refusal may be about it (never one not given)
        if name not in self.body and required:
            raise FieldError(name, f"field {name!r} is required")
        return self.body.get(name)

    def body_str(self, name: str, *, required: bool = False, default: str | None = None) -> Any:
        """A string body field (the ledger checks its content)."""
        value = self.body_any(name, required=required)
        if value is None:
            if required:
                raise FieldError(name, f"field {name!r} must be a string, got null")
            return default
        if not isinstance(value, str):
            raise FieldError(name, f"field {name!r} must be a string, got {json_type(value)}")
        return value

    def body_list(self, name: str) -> list[str] | None:
        """A list-of-strings body field."""
        value = self.body_any(name)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise FieldError(name, f"field {name!r} must be a list of strings")
        return value

    def _body_of(self, name: str, kind: type, what: str) -> Any:
        """A body field that is null, absent or of JSON type ``what`` (Python ``kind``)."""
        value = self.body_any(name)
        if value is not None and not isinstance(value, kind):
            raise FieldError(name, f"field {name!r} must be {what}, got {json_type(value)}")
        return value

    def body_object(self, name: str) -> dict[str, Any] | None:
        """An object body field."""
        value: dict[str, Any] | None = self._body_of(name, dict, "an object")
        return value

    def body_bool(self, name: str, default: bool) -> bool:
        """A boolean body field (``default`` when absent or null)."""
        value: bool | None = self._body_of(name, bool, "a boolean")
        return default if value is None else value

    def body_time(self, name: str) -> datetime | None:
        """An RFC 3339 date-time body field (:func:`parse_time`)."""
        return parse_time(name, self.body_str(name))


__all__ = ["Call", "path_parameters"]
