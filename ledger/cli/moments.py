"""What ``provledger as-of`` says of the moment it was asked for: a refusal of the
moment in its own options' words, and a record unknown then said to be unknown
then (one proposed since is not there yet)."""

from __future__ import annotations

import re

from ledger.errors import LedgerError, retold
from ledger.session import Session

#: The library's parameters for the moment ``as-of`` asks for → its options.
_AS_OF_OPTIONS = re.compile(r"^as_of (time|position) ")
#: What the library says to do of a moment to come (``Session.as_of``'s ``at``).
_LATER_MOMENT = re.compile(r"read as of now at that moment \(at\)")
#: The commands that take ``--at``: validity at an instant, read now.
_TAKE_AT = ("read", "explain")


def as_of_words(message: str, command: str | None = None) -> str:
    """A refusal of the moment asked for, in the options of ``as-of`` (``--time``,
    ``--position``), not the parameters of ``Session.as_of``, and for a moment to
    come, what to do instead: run ``command`` then, or (``read`` and ``explain``,
    which take it) read now with ``--at``; a message worded otherwise is left as
    it is."""
    message = _AS_OF_OPTIONS.sub(r"as-of --\1 ", message)
    instead = "run the command then"
    if command in _TAKE_AT:
        instead += f", or {command} now with --at for validity at that instant"
    return _LATER_MOMENT.sub(instead, message)


def as_of_said(exc: LedgerError, session: Session) -> LedgerError:
    """``exc`` (a record or delivery unknown) saying, under ``as-of``, the moment it
    was unknown at: one proposed since is not there yet, which "unknown" alone hides."""
    from ledger.cli.render import moment_of  # render imports the options, which import this

    moment = moment_of(session)
    return exc if moment is None else retold(exc, f"{exc} {moment.text()}")
