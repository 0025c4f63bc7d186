"""Where an item lives: a LangGraph namespace and key ↔ a ledger scope and claim key.

``namespace[:scope_depth]`` names the scope; the remaining labels and the key,
each escaped, joined with ``/``, make the claim key. Escaping writes a character
as ``%`` and the upper-case hex of its UTF-8 bytes; it applies to ``%`` and ``/``
always, to characters that are not printable (controls, format characters,
separators other than the plain space), and to whitespace at either end of a
label or key. If the result is still not in Unicode NFC form, every non-ASCII
character of it is escaped too, so the ledger never normalises a key into
another one. Unescaping is plain percent-decoding, so the mapping is injective:
no two ``(namespace, key)`` pairs share a claim key, and a claim key is read back
as an item only if escaping its decoded parts gives it again.
"""

from __future__ import annotations

import functools
import os
import threading
import unicodedata
from collections.abc import Sequence
from urllib.parse import unquote

from langgraph.store.base import GetOp, InvalidNamespaceError, validate_op_namespace

from ledger.errors import InvalidInputError, InvalidNamespaceLabelError
from ledger.validation import ID_PATTERN, quoted

__all__ = [
    "MAX_CLAIM_KEY",
    "SCOPE_JOIN",
    "SEPARATOR",
    "NamespaceLabelError",
    "claim_key_of",
    "component",
    "find",
    "key_lock",
    "labels_of",
    "location",
    "names_a_scope",
    "parse_claim_key",
    "scope_of",
]

#: Longest claim key the ledger holds.
MAX_CLAIM_KEY = 512
#: Joins the escaped labels and key of a claim key.
SEPARATOR = "/"
#: Joins the scope labels when ``scope_depth`` is more than one.
SCOPE_JOIN = ":"
RESERVED = frozenset("%/")


class NamespaceLabelError(InvalidNamespaceLabelError, InvalidNamespaceError):
    """A namespace label or key the ledger cannot hold as part of a scope or claim
    key (LangGraph's ``InvalidNamespaceError`` too)."""


def escape(text: str, ascii_only: bool) -> str:
    """``text`` with reserved, unprintable and edge-whitespace characters escaped."""
    last = len(text) - 1
    out = []
    for i, ch in enumerate(text):
        if (
            ch in RESERVED
            or not ch.isprintable()
            or (ch.isspace() and i in (0, last))
            or (ascii_only and not ch.isascii())
        ):
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8")))
        else:
            out.append(ch)
    return "".join(out)


def component(text: str) -> str:
    """One escaped label or key; every non-ASCII character escaped as well if the
    plain escape is not in NFC form (no character composes with the ``/`` before
    it, so NFC components make an NFC claim key)."""
    if (
        text.isascii()
        and text.isprintable()
        and "%" not in text
        and "/" not in text
        and text[:1] != " "
        and text[-1:] != " "
    ):
        return text  # nothing to escape (the common case)
    escaped = escape(text, False)
    return escaped if unicodedata.is_normalized("NFC", escaped) else escape(text, True)


def claim_key_of(labels: Sequence[str], key: str) -> str:
    """The claim key of ``key`` under the namespace labels that follow the scope.

    Raises:
        NamespaceLabelError: a label or the key cannot be encoded (a lone
            surrogate), the claim key would be empty or longer than
            ``MAX_CLAIM_KEY``.
    """
    parts = (*labels, key)
    try:
        claim = SEPARATOR.join(component(p) for p in parts)
    except UnicodeEncodeError:
        bad = next(p for p in parts if not encodable(p))
        raise NamespaceLabelError(
            f"label or key {quoted(bad)} is not valid Unicode (lone surrogate); "
            "the ledger cannot hold it"
        ) from None
    if not claim:
        raise NamespaceLabelError(
            "an empty key directly under the scope would be an empty claim key; "
            "the ledger cannot hold it"
        )
    if len(claim) > MAX_CLAIM_KEY:
        raise NamespaceLabelError(
            f"labels {quoted(tuple(labels))} and key {quoted(key)} make a claim key of "
            f"{len(claim)} characters; the ledger holds at most {MAX_CLAIM_KEY}"
        )
    return claim


def encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_claim_key(claim: str) -> tuple[tuple[str, ...], str] | None:
    """(labels after the scope, key) of a claim key written by the store, or None
    for a claim key that no ``(namespace, key)`` maps to."""
    try:
        parts = [unquote(p, errors="strict") for p in claim.split(SEPARATOR)]
    except UnicodeDecodeError:
        return None
    labels, key = tuple(parts[:-1]), parts[-1]
    if any(not label or "." in label or "\x00" in label for label in labels):
        return None  # not a LangGraph namespace
    try:
        canonical = claim_key_of(labels, key)
    except NamespaceLabelError:
        return None
    return (labels, key) if canonical == claim else None


def scope_of(labels: Sequence[str]) -> str:
    """The scope named by the first ``scope_depth`` labels.

    Raises:
        NamespaceLabelError: a label is not a ledger name (or contains ``:``
            when there are several), or the joined scope is too long.
    """
    for label in labels:
        if not ID_PATTERN.fullmatch(label) or (len(labels) > 1 and SCOPE_JOIN in label):
            extra = f" and no {SCOPE_JOIN!r} (it joins scope labels)" if len(labels) > 1 else ""
            raise NamespaceLabelError(
                f"namespace label {label!r} cannot be (part of) a ledger scope: a scope "
                f"label needs ^[A-Za-z0-9][A-Za-z0-9._:-]*${extra}"
            )
    scope = SCOPE_JOIN.join(labels)
    if not ID_PATTERN.fullmatch(scope):
        raise NamespaceLabelError(
            f"namespace labels {tuple(labels)!r} make the scope {scope[:40]!r}…, longer "
            "than the ledger's 128 characters"
        )
    return scope


@functools.lru_cache(maxsize=4096)
def location(namespace: tuple[str, ...], key: str, depth: int) -> tuple[str, str]:
    """(scope, claim key) of ``key`` under ``namespace`` (cached: a graph reads and
    writes the same few keys over and over)."""
    if len(namespace) < depth:
        raise NamespaceLabelError(
            f"namespace {namespace!r} has fewer than scope_depth={depth} labels, so it "
            "names no ledger scope"
        )
    if not isinstance(key, str):
        raise InvalidInputError(f"key must be a string, got {type(key).__name__}")
    return scope_of(namespace[:depth]), claim_key_of(namespace[depth:], key)


@functools.lru_cache(maxsize=4096)
def checked_location(namespace: tuple[str, ...], key: str, depth: int) -> tuple[str, str]:
    """``location`` of ``key`` under a namespace whose labels LangGraph accepts
    (``validate_op_namespace``: strings, none empty, none with a period or NUL);
    cached, so a key read again is checked once. Labels that are not strings may
    be unhashable: check them with ``validate_op_namespace`` first."""
    validate_op_namespace(GetOp(namespace, key))
    return location(namespace, key, depth)


def find(namespace: Sequence[str], key: str, depth: int) -> tuple[str, str] | None:
    """(scope, claim key) of an item, or None when ``namespace`` names a scope but
    ``key`` under it makes no claim key the ledger can hold (empty, too long, not
    Unicode): no item can be there, so a get answers None and a delete does
    nothing, as in LangGraph's own stores (a put is refused by :func:`location`,
    naming why).

    Raises:
        NamespaceLabelError: the namespace names no scope.
    """
    try:
        return location(tuple(namespace), key, depth)
    except NamespaceLabelError:
        if names_a_scope(namespace, depth):
            return None
        raise


def names_a_scope(namespace: Sequence[str], depth: int) -> bool:
    """Whether ``namespace`` begins with ``depth`` labels that make a scope."""
    if len(namespace) < depth:
        return False
    try:
        scope_of(tuple(namespace[:depth]))
    except NamespaceLabelError:  # the scope is what is wrong: refused
        return False
    return True


def labels_of(scope: str, depth: int) -> tuple[str, ...] | None:
    """The namespace labels of ``scope``, or None if it is not one of ``depth``
    labels LangGraph accepts (a ledger scope may hold a ``.``, a namespace label not)."""
    labels = (scope,) if depth == 1 else tuple(scope.split(SCOPE_JOIN))
    if len(labels) != depth or any("." in label for label in labels):
        return None
    try:
        scope_of(labels)
    except NamespaceLabelError:
        return None
    return labels


#: Puts and deletes of one key run one at a time in a process, whatever the store
#: or thread (under one of these locks, chosen by the key): a delete reads the
#: versions it revokes, and a put in a thread recovers from a refusal by reading
#: again. (Which version a put replaces is found under the writers' lock.)
_KEY_LOCKS = [threading.Lock() for _ in range(64)]


def key_lock(scope: str, claim: str) -> threading.Lock:
    """The lock of a key's puts and deletes in this process (one of 64, by the key)."""
    return _KEY_LOCKS[hash((scope, claim)) % len(_KEY_LOCKS)]


def _new_key_locks() -> None:
    # In a forked child: a lock a parent's thread held at the fork is never released.
    _KEY_LOCKS[:] = [threading.Lock() for _ in _KEY_LOCKS]


os.register_at_fork(after_in_child=_new_key_locks)
