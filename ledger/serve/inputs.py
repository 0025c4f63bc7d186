"""A request's inputs as the JSON API reads them (:mod:`ledger.serve.api`).

The body is strict JSON (RFC 8259: no NaN or Infinity, no number out of range, no
field given twice), declared as JSON or not declared at all; a query string is
UTF-8 once percent-decoded, each parameter given once and only those a route
takes; the token is an ``Authorization: Bearer`` header. Every refusal is a
:class:`FieldError` (reported as ``InvalidInputError``) naming the field when
there is one.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from datetime import datetime
from typing import Any
from urllib.parse import unquote_to_bytes

from starlette.datastructures import FormData, Headers
from starlette.exceptions import HTTPException
from starlette.requests import Request

from ledger.access import mask_tokens
from ledger.errors import AuthenticationError, InvalidInputError
from ledger.validation import RFC_3339, echoed, from_iso, listed


class FieldError(InvalidInputError):
    """Bad input the API found itself, with the name of the offending field.

    Reported as ``InvalidInputError`` (the ledger's class for bad input).
    """

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name


class MediaTypeError(FieldError):
    """A request body declared as something other than JSON, or coded (compressed):
    415, not parsed."""

    def __init__(
        self,
        media_type: str,
        header: str = "Content-Type",
        charset: str | None = None,
        given: int = 1,
    ) -> None:
        if given > 1:
            said = f"{header} is given {given} times ({media_type[:80]!r}); give it once"
        elif charset is not None:
            said = f"the request body is declared in charset {charset[:40]!r}, where it "
            said += "reads otherwise than in UTF-8; this API reads JSON as UTF-8 "
            said += "(charset=utf-8, or none)"
        elif header == "Content-Type":
            said = f"the request body is sent as {media_type[:80]!r}; this API takes JSON "
            said += "(Content-Type: application/json)"
        else:
            said = f"the request body is sent with Content-Encoding {media_type[:80]!r}; "
            said += "this API takes bodies uncoded (no Content-Encoding, or identity)"
        super().__init__(header, said)


def media_type_of(headers: Headers) -> str | None:
    """The media type of a request body (``Content-Type`` without parameters,
    lower case), None when none is given.

    Raises:
        MediaTypeError: ``Content-Type`` is given more than once (a proxy reading
            another of them than this server would pass on another body).
    """
    given = headers.getlist("content-type")
    if not given:
        return None
    if len(given) > 1:
        raise MediaTypeError(", ".join(given), given=len(given))
    return given[0].split(";", 1)[0].strip().lower()


def check_json_body(headers: Headers, raw: bytes) -> None:
    """Refuse a non-empty body whose ``Content-Type`` is given and is not JSON
    (``application/json`` or ``application/…+json``): a form or ``text/plain``
    body is not read as JSON by guesswork.

    Raises:
        MediaTypeError: the body is declared as another media type, in a charset
            where it reads otherwise than in UTF-8, or as coded (a
            ``Content-Encoding`` such as gzip: it would be read as it came).
    """
    if raw:
        check_uncoded(headers)
    media = media_type_of(headers)
    if media is None or not raw.strip():
        return
    if media != "application/json" and not (
        media.startswith("application/") and media.endswith("+json")
    ):
        raise MediaTypeError(media)
    # JSON is read as UTF-8 (RFC 8259), whatever charset is declared: a body that
    # reads alike in the charset named (ASCII in latin-1, say) is taken, any other
    # would be read otherwise than meant (UTF-16, UTF-7, a name no codec knows).
    charset = _charset_of(headers.get("content-type", ""))
    utf8 = charset is None or charset.lower() in ("utf-8", "utf8")
    if charset is not None and not utf8 and not _reads_alike(raw, charset):
        raise MediaTypeError(media, charset=charset)


def _reads_alike(raw: bytes, charset: str) -> bool:
    """Whether ``raw``, ASCII, reads the same in ``charset`` as in UTF-8."""
    if not raw.isascii():
        return False
    try:
        return raw.decode(charset) == raw.decode("ascii")
    except (LookupError, UnicodeDecodeError, ValueError):
        return False


def _charset_of(content_type: str) -> str | None:
    """The ``charset`` parameter of a ``Content-Type`` value (unquoted), or None."""
    for parameter in content_type.split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip('"')
    return None


def check_uncoded(headers: Headers) -> None:
    """Refuse a body sent coded (a ``Content-Encoding`` but identity, such as gzip):
    it would be read as it came. Every coding counts, whether the codings are
    given in one header or several (RFC 9110 reads them alike).

    Raises:
        MediaTypeError: naming the first coding that is not identity.
    """
    for value in headers.getlist("content-encoding"):
        for coding in value.split(","):
            if coding.strip().lower() not in ("", "identity"):
                raise MediaTypeError(coding.strip().lower(), "Content-Encoding")


def bearer_token(headers: Headers) -> str:
    """The token of an ``Authorization: Bearer …`` header.

    Raises:
        AuthenticationError: no such header, more than one (a proxy reading the
            last would act for another principal than this server, which read
            the first), or not a bearer token.
    """
    given = headers.getlist("authorization")
    if len(given) > 1:
        raise AuthenticationError(
            f"send one Authorization header, not {len(given)}: 'Authorization: Bearer <token>'"
        )
    value = given[0] if given else ""
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthenticationError("send the token as 'Authorization: Bearer <token>'")
    return token.strip()


def json_type(value: Any) -> str:
    """The JSON name of ``value``'s type, for messages ("object", "array", …)."""
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def parse_time(name: str, text: str | None) -> datetime | None:
    """The RFC 3339 date-time ``text`` of field ``name`` (None stays None); one
    without an offset is returned naive, for the ledger to refuse as such.

    Raises:
        FieldError: ``text`` is not an RFC 3339 date-time (the other ISO 8601
            forms included, such as ``20261205T221000Z``, a week date or a space
            for the "T": the OpenAPI document says ``format: date-time``), or
            names no instant (a 13th month, a 61st minute, a leap second).
    """
    if text is None:
        return None
    parsed = None
    if RFC_3339.fullmatch(text):
        with suppress(ValueError):  # its numbers out of range
            parsed = from_iso(text)
    if parsed is None:
        raise FieldError(
            name,
            f"{name} must be an RFC 3339 date-time (e.g. 2026-12-05T22:10:00Z), not {text[:40]!r}",
        )
    return parsed


def check_names(given: Iterable[str], accepted: frozenset[str], what: str) -> None:
    """Refuse any name in ``given`` a route does not take (``what``: "field" or
    "query parameter"), naming them and what it takes."""
    unknown = sorted(set(given) - accepted)
    if unknown:
        takes = ", ".join(sorted(accepted)) or "none"
        raise FieldError(
            echoed(unknown[0]), f"unknown {what} {listed(unknown)} (this route takes: {takes})"
        )


def check_utf8(query: bytes) -> None:
    """Refuse a query string that is not UTF-8 once percent-decoded (its bytes
    would be read as U+FFFD, and a misspelt key would read MISSING)."""
    for part in query.split(b"&"):
        name, _, value = part.partition(b"=")
        shown = unquote_to_bytes(name.replace(b"+", b" ")).decode("utf-8", "replace")
        for piece in (name, value):
            try:
                unquote_to_bytes(piece.replace(b"+", b" ")).decode("utf-8")
            except UnicodeDecodeError:
                raise FieldError(
                    echoed(shown),
                    f"query parameter {shown[:40]!r} is not UTF-8 once percent-decoded",
                ) from None


async def read_form(request: Request) -> FormData:
    """The console form ``request`` sent, read as a page of the console sends it:
    URL-encoded UTF-8 text (or nothing at all: a sign-out). Anything else is
    refused with 400 (the form could not be read), before a field is looked at:
    Starlette reads bytes outside ASCII as Latin-1, percent-escapes that are not
    UTF-8 as U+FFFD, and parts of a multipart form that are not UTF-8 as Latin-1,
    so that the log would keep text nobody typed; a body of another type would be
    read as an empty form."""
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    body = await request.body()  # (kept: the form below reads it again)
    if kind == "application/x-www-form-urlencoded":
        if not body.isascii():
            raise HTTPException(
                400,
                "it holds bytes that are not URL-encoded (a browser encodes every "
                "character outside ASCII); nothing was done",
            )
        try:
            check_utf8(body)
        except FieldError as exc:
            field = str(exc).removeprefix("query parameter ").partition(" is not")[0]
            raise HTTPException(
                400, f"field {field} is not UTF-8 once percent-decoded; nothing was done"
            ) from None
    elif body:
        sent = f"as {kind}" if kind else "with no content type"
        raise HTTPException(
            400, f"the console's forms are sent URL-encoded, not {sent}; nothing was done"
        )
    return await request.form()


#: A token as issued: ``plt_`` and exactly 43 URL-safe characters, not run on into
#: other such characters, holding a capital or a digit, as all but one in 10^15
#: random ones do (``matplotlib.plt_savefig_default_…``, lower case or of
#: another length, is a name, not a token).
_TOKEN = re.compile(r"(?<![A-Za-z0-9_\-])plt_([A-Za-z0-9_\-]{43})(?![A-Za-z0-9_\-])")
_RANDOM = re.compile(r"[A-Z0-9]")


def _holds_token(text: str) -> bool:
    return any(_RANDOM.search(found[1]) for found in _TOKEN.finditer(text))


def check_no_token(items: Iterable[tuple[str, str]]) -> None:
    """Refuse query parameters (decoded) of which a name or value holds a token: a
    token goes in the ``Authorization`` header only, and an address is logged,
    kept in histories and shown back in pages and answers."""
    for name, value in items:
        if _holds_token(name) or _holds_token(value):
            shown = mask_tokens(name)
            raise FieldError(
                shown,
                f"query parameter {shown[:40]!r} holds a token: send a token in the "
                "Authorization header only (an address is logged and kept in histories: "
                "revoke that token and use another)",
            )


def check_once(items: Iterable[tuple[str, str]]) -> None:
    """Refuse a query parameter given twice (its last value would win silently)."""
    seen: set[str] = set()
    for name, _ in items:
        if name in seen:
            raise FieldError(name, f"query parameter {name!r} is given more than once")
        seen.add(name)


class Refused(ValueError):
    """JSON the API does not take; its message follows what holds it ("the
    request body …")."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def finite(text: str) -> float:
    """A JSON number as a float, refused when out of range: Python reads 1e999 as
    infinity, which JSON cannot hold either, and 1e-400 as 0.0, which is not the
    number sent."""
    number = float(text)
    if not math.isfinite(number):
        raise Refused(f"holds the number {text[:40]}, out of range")
    if number == 0.0 and any(digit in "123456789" for digit in text.lower().split("e")[0]):
        raise Refused(f"holds the number {text[:40]}, too small to keep (it would be 0.0)")
    return number


def bounded_int(text: str) -> int:
    """A JSON integer; one longer than Python converts is refused as out of range
    (a shorter one out of 64-bit range is refused where its field is checked)."""
    digits = len(text.lstrip("-"))
    if digits > sys.get_int_max_str_digits() > 0:
        raise Refused(f"holds an integer of {digits} digits, out of range")
    return int(text)


#: Why a number the API does not take is refused, when it is NaN or Infinity.
_NOT_FINITE = "not a finite number (Infinity and NaN are not JSON)"


class _Constant:
    """Where the body held NaN, Infinity or -Infinity, which Python's json module
    reads and RFC 8259 has not, or a number out of range: kept in place, for
    :func:`loads_strict` to refuse naming where it is (as the MCP server does),
    not as "not JSON". ``text`` is what it held, ``why`` why it is refused."""

    def __init__(self, text: str, why: str = _NOT_FINITE) -> None:
        self.text = text
        self.why = why


def _located(read: Callable[[str], Any], found: list[_Constant]) -> Callable[[str], Any]:
    """``read`` (:func:`finite`, :func:`bounded_int`), a number it refuses kept in
    place as a :class:`_Constant` (appended to ``found``)."""

    def parse(text: str) -> Any:
        try:
            return read(text)
        except Refused as exc:
            held, _, why = str(exc).removeprefix("holds ").partition(", ")
            found.append(_Constant(held, why))
            return found[-1]

    return parse


class _Twice(dict[str, Any]):
    """A JSON object that gave a field more than once (``twice``)."""

    twice = ""


def once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's fields; one given twice (its last value would otherwise win
    silently) marks it, for :func:`loads_strict` to refuse naming where it is."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out and not isinstance(out, _Twice):
            out = _Twice(out)
            out.twice = key
        out[key] = value
    return out


def loads_strict(raw: str | bytes) -> Any:
    """``raw`` read as strict JSON (bytes as UTF-8, the one encoding RFC 8259 allows;
    a byte order mark before it is ignored, as that RFC lets a reader do).

    Raises:
        Refused: a number out of range or not finite (NaN, Infinity), too deep a
            nesting, or a field given twice (its ``field`` is the top-level field
            holding it, or the field itself).
        ValueError: not JSON.
    """
    text = raw.decode("utf-8-sig") if isinstance(raw, bytes) else raw
    marked: list[_Twice] = []
    constants: list[_Constant] = []

    def constant(name: str) -> _Constant:
        constants.append(_Constant(name))
        return constants[-1]

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out = once_each(items)
        if isinstance(out, _Twice):
            marked.append(out)
        return out

    try:
        data = json.loads(
            text,
            parse_constant=constant,
            parse_float=_located(finite, constants),
            parse_int=_located(bounded_int, constants),
            object_pairs_hook=pairs,
        )
    except RecursionError:
        raise Refused("is nested too deeply") from None
    if marked:
        _refuse_twice(data, marked[0])
    if constants:
        _refuse_constant(data, constants[0])
    return data


def _refuse_constant(data: Any, first: _Constant) -> None:
    """Refuse the first NaN, Infinity or number out of range in document order,
    naming where it is (``value.limits[1]``) and the top-level field holding it.
    Walked without recursion, as :func:`_holds` is."""
    pending: list[tuple[Any, str, str | None]] = [(data, "", None)]
    while pending:
        item, path, field_name = pending.pop()
        if isinstance(item, _Constant):
            where = f" at {echoed(path)}" if path else ""
            raise Refused(
                f"holds {item.text}{where}, {item.why}",
                None if field_name is None else echoed(field_name),
            )
        if isinstance(item, dict):
            inner = [
                (v, f"{path}.{k}" if path else k, k if field_name is None else field_name)
                for k, v in item.items()
            ]
        elif isinstance(item, list):
            inner = [(v, f"{path}[{i}]", field_name) for i, v in enumerate(item)]
        else:
            continue
        pending.extend(reversed(inner))
    raise Refused(f"holds {first.text}, {first.why}")


def _refuse_twice(data: Any, first: _Twice) -> None:
    """Refuse the first object that gave a field twice, naming the top-level field
    that holds it (or the field itself, at the top)."""
    given = f"gives {first.twice[:80]!r} more than once"
    if data is first:
        raise Refused(given, echoed(first.twice))
    if isinstance(data, dict):
        for name, value in data.items():
            if _holds(value, first):
                raise Refused(f"{given} in {name[:80]!r}", echoed(name))
    raise Refused(given)


def _holds(value: Any, target: object) -> bool:
    """Whether ``target`` is ``value`` or inside it (walked without recursion: JSON
    nested as deeply as the parser reads must not exhaust the stack here)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if item is target:
            return True
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def parse_body(raw: bytes) -> Mapping[str, Any]:
    """A request body: empty, or a strict JSON object.

    Raises:
        FieldError: a field given twice, or holding NaN, Infinity or a number out
            of range.
        InvalidInputError: not JSON, not an object, nested too deeply, or the body
            itself a number out of range.
    """
    if not raw.strip():
        return {}
    try:
        data = loads_strict(raw)
    except Refused as exc:
        message = f"the request body {exc}"
        if exc.field is not None:
            raise FieldError(exc.field, message) from None
        raise InvalidInputError(message) from None
    except UnicodeDecodeError:
        raise InvalidInputError("the request body is not UTF-8") from None
    except json.JSONDecodeError as exc:  # where it stops reading as JSON, not what it says
        where = f"line {exc.lineno} column {exc.colno}"
        raise InvalidInputError(f"the request body is not JSON: {exc.msg} at {where}") from None
    except (ValueError, RecursionError):
        raise InvalidInputError("the request body is not JSON") from None
    if not isinstance(data, dict):
        raise InvalidInputError(f"the request body must be a JSON object, got {json_type(data)}")
    return data
