"""Input validation shared by every command: ids, text, values, kinds, instants.

Each ``check_…`` returns its (normalised) input or raises a specific
:class:`ledger.errors.LedgerError` naming the offending item; nothing is read or
written before a command's input has passed them.
"""

from __future__ import annotations

import functools
import json
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from enum import Enum
from typing import Any, TypeVar

from ledger.domain import Kind
from ledger.errors import (
    InvalidIdError,
    InvalidInputError,
    InvalidKindError,
    InvalidValueError,
    LedgerError,
    NaiveDatetimeError,
    ValueTooLargeError,
)
from ledger.serialization import pack

EnumT = TypeVar("EnumT", bound=Enum)

ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
MAX_NESTING = 32
DEFAULT_MAX_VALUE_BYTES = 1024 * 1024


#: The longest text an error message quotes whole (a longer one is cut, its
#: length told): a refusal must not hand an agent back a megabyte it sent.
QUOTED = 160


def quoted(value: object) -> str:
    """``repr(value)`` for an error message, a long string or bytes cut to its
    first ``QUOTED`` characters with its length told."""
    if isinstance(value, str | bytes) and len(value) > QUOTED:
        unit = "characters" if isinstance(value, str) else "bytes"
        return f"{value[:QUOTED]!r}… ({len(value)} {unit})"
    text = repr(value)
    return text if len(text) <= 2 * QUOTED else f"{text[: 2 * QUOTED]}… ({type(value).__name__})"


def echoed(text: str) -> str:
    """A name or place a caller sent, as a refusal echoes it: whole when it is at
    most ``QUOTED`` characters and printable, else as :func:`quoted` gives it
    (a megabyte of name is cut; a newline or a bidirectional override is shown
    escaped, not let loose in a one-line message)."""
    return text if len(text) <= QUOTED and text.isprintable() else quoted(text)


#: How many names a refusal lists (then how many more there are).
NAMES_LISTED = 20


def listed(names: Sequence[str]) -> str:
    """``names`` as a refusal lists them: each as :func:`quoted` gives it, the first
    :data:`NAMES_LISTED`, then how many more."""
    text = ", ".join(quoted(name) for name in names[:NAMES_LISTED])
    more = len(names) - NAMES_LISTED
    return text + (f" and {more} more" if more > 0 else "")


def check_id(value: object, what: str = "record id") -> str:
    """Return ``value`` if it is a valid identifier, else raise ``InvalidIdError``."""
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        raise InvalidIdError(
            f"{what} {quoted(value)} is invalid: expected ^[A-Za-z0-9][A-Za-z0-9._:-]{{0,127}}$"
        )
    return value


def check_ref(value: object, what: str = "record id") -> str:
    """``check_id``, also accepting a qualified ``id@@scope`` (a record proposed
    under an id taken in a scope its proposer could not see)."""
    if isinstance(value, str) and "@@" in value:
        name, _, scope = value.partition("@@")
        if ID_PATTERN.fullmatch(name) and ID_PATTERN.fullmatch(scope):
            return value
    return check_id(value, what)


@functools.cache
def format_characters() -> re.Pattern[str]:
    """Invisible format characters (Unicode category Cf: zero-width space and
    joiners, soft hyphen, byte order mark, tag characters, the marks, embeddings,
    overrides and isolates that reorder text): stored as given, shown written out
    by the review console and the command line. ``api.retry_safe`` with a
    zero-width space (U+200B) in it looks like ``api.retry_safe`` but is another
    claim. Made on first use (Python's Unicode tables are read once)."""
    points = [p for p in range(0x110000) if unicodedata.category(chr(p)) == "Cf"]
    spans: list[list[int]] = []
    for p in points:
        if spans and spans[-1][1] == p - 1:
            spans[-1][1] = p
        else:
            spans.append([p, p])
    body = "".join(re.escape(chr(a)) + ("-" + re.escape(chr(b)) if b > a else "") for a, b in spans)
    return re.compile(f"[{body}]")


#: A subdivision flag (England's: U+1F3F4, the tags g b e n g, U+E007F CANCEL TAG):
#: its tags, 3 to 7 lower-case letters or digits, are kept; any other run of tag
#: characters is hidden text (a model reads it, a reviewer does not) and written out.
_FLAG_TAGS = re.compile("\U0001f3f4[\U000e0030-\U000e0039\U000e0061-\U000e007a]{3,7}\U000e007f")
#: Format characters that show a mark (the Arabic number sign, end of ayah, …): not
#: invisible, so never written out.
_VISIBLE_FORMATS = frozenset("\u0600\u0601\u0602\u0603\u0604\u0605\u06dd\u070f\u0890\u0891\u08e2")
#: Scripts whose letters a joiner between two of them changes nothing in (Latin,
#: Greek, Cyrillic and their extensions): a joiner there only makes a look-alike.
_NO_JOINERS = re.compile(
    "[\u0080-\u052f\u1c80-\u1c8f\u1d00-\u1fff\u2c60-\u2c7f\ua640-\ua69f\ua720-\ua7ff]"
)


def hidden_formats(text: str) -> list[tuple[int, str]]:
    """The invisible format characters of ``text`` a reader should be shown
    written out, with their offsets: all but a zero-width joiner or non-joiner
    between two characters of scripts that use them (an emoji sequence, Persian,
    Indic scripts: beyond ASCII, and not Latin, Greek or Cyrillic, nor another
    format character), a subdivision flag's tags, and the few format characters
    that show a mark."""
    if text.isascii() or not format_characters().search(text):
        return []
    flags = {i for m in _FLAG_TAGS.finditer(text) for i in range(m.start() + 1, m.end())}
    out = []
    for m in format_characters().finditer(text):
        i, ch = m.start(), m.group()
        if ch in _VISIBLE_FORMATS or i in flags:
            continue
        inside = 0 < i < len(text) - 1
        if ch in "\u200c\u200d" and inside and _joins(text[i - 1]) and _joins(text[i + 1]):
            continue
        out.append((i, ch))
    return out


def _joins(ch: str) -> bool:
    """Whether a joiner beside ``ch`` may belong there (see :func:`hidden_formats`)."""
    return ord(ch) > 127 and not _NO_JOINERS.match(ch) and not format_characters().match(ch)


def write_out_formats(text: str, marker: Callable[[str], str]) -> str:
    """``text`` with each of :func:`hidden_formats` replaced by ``marker(ch)``."""
    found = hidden_formats(text)
    if not found:
        return text
    parts, last = [], 0
    for i, ch in found:
        parts += [text[last:i], marker(ch)]
        last = i + 1
    return "".join([*parts, text[last:]])


#: Control characters no text may hold (C0 but for tab and line feed, and DEL).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f]")
#: What a one-line text (``line=True``) may not hold either: a tab and every line
#: break ``str.splitlines`` knows that ``_CONTROL`` lets through (NEL, U+2028, U+2029).
_LINE_BREAK = re.compile("[\t\n\x85\u2028\u2029]")


#: The longest text (a reason, a note), claim key (or prefix) and URI accepted, in
#: characters (what the MCP tools' schemas give as ``maxLength``).
TEXT_MAX = 1024
CLAIM_KEY_MAX = 512
URI_MAX = 2048


def check_text(
    value: object, what: str, *, max_len: int = TEXT_MAX, empty: bool = False, line: bool = False
) -> str:
    """Return ``value`` if it is a printable string of bounded length (one line
    of it when ``line``: a name or an address, shown on one line everywhere)."""
    if not isinstance(value, str):
        raise InvalidValueError(f"{what} must be a string, got {type(value).__name__}")
    if not empty and not value.strip():
        raise InvalidValueError(f"{what} must not be empty")
    if len(value) > max_len:
        raise ValueTooLargeError(f"{what} is {len(value)} characters; the limit is {max_len}")
    if _CONTROL.search(value) or (line and _LINE_BREAK.search(value)):
        raise InvalidValueError(f"{what} {value[:40]!r} contains control characters")
    return check_unicode(value, what)


def check_unicode(value: str, what: str) -> str:
    """Refuse strings that cannot be stored as UTF-8 (lone surrogates)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidValueError(
            f"{what} {value[:40]!r} is not valid Unicode (lone surrogate)"
        ) from None
    return value


def check_kind(value: object) -> Kind:
    """Return the ``Kind`` named by ``value`` or raise ``InvalidKindError``."""
    if isinstance(value, Kind):
        return value
    try:
        return Kind(str(value)) if isinstance(value, str) else Kind(value)  # type: ignore[arg-type]
    except ValueError:
        allowed = ", ".join(k.value for k in Kind)
        raise InvalidKindError(f"kind {quoted(value)} is not one of: {allowed}") from None


def check_aware(value: object, what: str) -> datetime:
    """Return ``value`` if it is a timezone-aware datetime."""
    if not isinstance(value, datetime):
        raise InvalidValueError(f"{what} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is UTC:  # the clock's own (every UTC instant is in range)
        return value
    if value.tzinfo is None or value.utcoffset() is None:
        raise NaiveDatetimeError(f"{what} {value.isoformat()} has no timezone")
    try:
        value.astimezone(UTC)
    except OverflowError:
        raise InvalidValueError(
            f"{what} {value.isoformat()} is outside the years 1-9999 in UTC"
        ) from None
    return value


_UPPER_T_Z = str.maketrans("tz", "TZ")


#: The form of an RFC 3339 date-time (section 5.6: full-date "T" full-time; "T" and
#: "Z" may be lower case), what the HTTP API and the MCP tools take: not the other
#: ISO 8601 forms (``20261205T221000Z``, a week date, a space for the "T"), nor an
#: offset's 60th minute (which Python would carry into its hour). Its numbers are
#: checked by reading it (:func:`from_iso`: a 13th month, an offset of 24 hours);
#: its offset is optional here: without one it is read, for the ledger to refuse as
#: naive by name (``NaiveDatetimeError``) rather than as unreadable.
RFC_3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-]\d{2}:[0-5]\d)?", re.ASCII
)


def from_iso(text: str) -> datetime:
    """``datetime.fromisoformat`` that also reads a lowercase ``t`` and ``z``, as
    RFC 3339 allows (Python 3.11 refuses a lowercase ``z``); ``ValueError`` as it."""
    return datetime.fromisoformat(text.translate(_UPPER_T_Z))


def check_value(value: Any, what: str, max_bytes: int = DEFAULT_MAX_VALUE_BYTES) -> Any:
    """Validate a claim value and return it normalised (tuples become lists).

    Allowed: None, bool, int (64-bit), float (not NaN), str, bytes, list and
    str-keyed dict, nested at most ``MAX_NESTING`` deep.
    """
    normalised = _plain(value, 0)
    if normalised is _NOT_PLAIN:
        normalised = _walk(value, 0, what, what)  # names what is wrong, or normalises the rest
    size = len(pack(normalised))
    if size > max_bytes:
        raise ValueTooLargeError(f"{what} is {size} bytes serialised; the limit is {max_bytes}")
    return normalised


def _walk(v: Any, depth: int, path: str, what: str) -> Any:
    """``check_value``'s full walk: ``v`` normalised, or an error naming ``what``
    and the path to the first offending item. (A module function: a nested one
    calling itself would be a reference cycle left to the garbage collector on
    every call.)"""
    if depth > MAX_NESTING:
        raise InvalidValueError(f"{what} is nested deeper than {MAX_NESTING} at {path}")
    if isinstance(v, str):
        return check_unicode(v, f"{what} at {path}")
    if v is None or isinstance(v, (bool, bytes)):
        return v
    if isinstance(v, int):
        if not -(2**63) <= v < 2**64:
            raise InvalidValueError(f"{what} has an integer out of 64-bit range at {path}")
        return v
    if isinstance(v, float):
        if math.isnan(v):
            raise InvalidValueError(f"{what} contains NaN at {path}")
        return v
    if isinstance(v, (list, tuple)):
        return [_walk(item, depth + 1, f"{path}[{i}]", what) for i, item in enumerate(v)]
    if isinstance(v, dict):
        out = {}
        for key, item in v.items():
            if not isinstance(key, str):
                raise InvalidValueError(f"{what} has a non-string key {key!r} at {path}")
            check_unicode(key, f"{what} key at {path}")
            out[key] = _walk(item, depth + 1, f"{path}.{key}", what)
        return out
    raise InvalidValueError(f"{what} contains an unserialisable {type(v).__name__} at {path}")


_NOT_PLAIN = object()


def _plain(v: Any, depth: int) -> Any:
    """``check_value``'s fast path: the normalised value if it is built of exact
    plain types and valid, else ``_NOT_PLAIN`` (the full walk then decides)."""
    if depth > MAX_NESTING:
        return _NOT_PLAIN
    kind = type(v)
    if kind is str:
        return v if v.isascii() or _encodes(v) else _NOT_PLAIN
    if v is None or kind is bool or kind is bytes:
        return v
    if kind is int:
        return v if -(2**63) <= v < 2**64 else _NOT_PLAIN
    if kind is float:
        return v if v == v else _NOT_PLAIN
    if kind is list or kind is tuple:
        items = [_plain(item, depth + 1) for item in v]
        return _NOT_PLAIN if any(item is _NOT_PLAIN for item in items) else items
    if kind is dict:
        out = {}
        for key, item in v.items():
            if type(key) is not str or not (key.isascii() or _encodes(key)):
                return _NOT_PLAIN
            out[key] = _plain(item, depth + 1)
            if out[key] is _NOT_PLAIN:
                return _NOT_PLAIN
        return out
    return _NOT_PLAIN


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


#: An emoji tag sequence (a subdivision flag: England's is U+1F3F4, tag letters,
#: U+E007F CANCEL TAG), as a pattern: format characters a claim key may end with.
FLAG = "\U0001f3f4[\U000e0020-\U000e007e]+\U000e007f"
_FLAG_TAIL = re.compile(FLAG + "\\Z")


def check_claim_key(value: object, what: str = "claim_key") -> str:
    """A claim key in NFC form; surrounding whitespace is refused, not stripped (two
    spellings of one question must not become two claims, nor a typo a new one).
    A new claim's key is checked further (:func:`check_format_edges`)."""
    text = check_text(value, what, max_len=CLAIM_KEY_MAX, line=True)
    if text != text.strip():
        raise InvalidValueError(f"{what} {text!r} has leading or trailing whitespace")
    return unicodedata.normalize("NFC", text)


def check_format_edges(text: str, what: str) -> None:
    """Refuse ``text`` (not empty) made only of invisible format characters
    (Unicode category Cf: U+200B, U+FEFF, bidi marks…), or starting or ending with
    one (but for a subdivision flag's tail): ``"a"`` and ``"a\u200b"`` look the
    same. One inside is kept (a ZWJ joins an emoji sequence). Asked of what a new
    claim's key is made from, not of keys a ledger may already hold (an earlier
    version took them): those are still read, and versions of them proposed."""
    if unicodedata.category(text[0]) == "Cf":
        if all(unicodedata.category(ch) == "Cf" for ch in text):
            raise InvalidValueError(
                f"{what} {quoted(text)} is made only of invisible format characters "
                f"({_code_points(text)})"
            )
        raise InvalidValueError(
            f"{what} {quoted(text)} has a leading invisible format character "
            f"({_code_points(text[0])})"
        )
    if unicodedata.category(text[-1]) == "Cf" and not _FLAG_TAIL.search(text):
        raise InvalidValueError(
            f"{what} {quoted(text)} has a trailing invisible format character "
            f"({_code_points(text[-1])})"
        )


def key_text(key: str) -> str:
    """A claim key as a table or heading shows it: as it is when a new claim could
    have it, else (a key an earlier version stored, with a tab, a line break, space
    or an invisible format character at an end, or in another normal form) as a
    JSON string with every character beyond ASCII escaped, so that it shows on one
    line and apart from its look-alikes. A key shown as it is never starts with
    ``"`` nor holds a backslash (``evil\\u202ekey`` typed would look like a key
    holding U+202E, which a terminal shows written out so); such a key is quoted too."""
    try:
        plain_key = check_claim_key(key) == key and not key.startswith('"') and "\\" not in key
        check_format_edges(key, "claim_key")
    except LedgerError:
        plain_key = False
    return key if plain_key else json.dumps(key)


def asked_key(text: str) -> str:
    """The claim key asked about by ``text``, typed as the console and the command
    line show keys: a key an earlier version stored (with a line break, a tab,
    space at an end, another normal form) is shown, and so may be typed, as the
    JSON string :func:`key_text` makes of it; any other text is the key itself.
    (A form field cannot carry such a key as stored: an input drops a line feed,
    and a browser sends each line break in a form as CR LF.)"""
    if text.startswith('"'):
        try:
            key = json.loads(text)
        except ValueError:
            return text
        if isinstance(key, str) and key_text(key) == text:
            return key
    return text


def _code_points(chars: str) -> str:
    """The distinct characters of ``chars`` as ``U+200B ZERO WIDTH SPACE``, the
    first three of them."""
    distinct = list(dict.fromkeys(chars))
    named = [f"U+{ord(ch):04X} {unicodedata.name(ch, '')}".rstrip() for ch in distinct[:3]]
    return ", ".join(named) + (", …" if len(distinct) > 3 else "")


def check_member(enum: type[EnumT], value: object, what: str) -> EnumT:
    """The member of ``enum`` named by ``value``, else ``InvalidInputError``."""
    try:
        return enum(value)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in enum)
        raise InvalidInputError(f"{what} {quoted(value)} is not one of: {allowed}") from None


def check_flag(value: object, what: str) -> bool:
    """``value`` if it is ``True`` or ``False``, else ``InvalidInputError``: a
    missing field (``None``) or the string ``"false"`` is no answer to a yes/no
    question, and would be taken as one."""
    if not isinstance(value, bool):
        raise InvalidInputError(f"{what} must be True or False, got {quoted(value)}")
    return value


def check_list(items: object, what: str) -> list[Any]:
    """``items`` as a list, unless it is a string, a mapping (whose keys would be
    taken, whatever their values say) or not iterable."""
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
        raise InvalidInputError(f"{what} must be a list, got {type(items).__name__}")
    return list(items)


def check_context(context: Mapping[str, Any] | None) -> dict[str, Any]:
    """A read's applicability context: a mapping of plain values."""
    if context is None:
        return {}
    if not isinstance(context, Mapping):
        raise InvalidInputError(f"context must be a mapping, got {type(context).__name__}")
    return dict(check_value(dict(context), "context"))


def check_conditions(conditions: Mapping[str, Any] | None, limit: int) -> dict[str, Any]:
    """A record's applicability conditions: a mapping of plain values."""
    if conditions is None:
        return {}
    if not isinstance(conditions, Mapping):
        raise InvalidValueError(f"conditions must be a mapping, got {type(conditions).__name__}")
    return dict(check_value(dict(conditions), "conditions", limit))
