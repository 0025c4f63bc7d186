"""What the review console says when it refuses: the heading of an error page, why
a form was refused before it reached the ledger, and the message of a write the
ledger refused."""

from __future__ import annotations

import re

from ledger.application import ADMIN_TOKEN_REFUSAL
from ledger.errors import AuthenticationError, ConcurrencyError, InvalidInputError, LedgerError
from ledger.serve.errors import status_of, told

#: The heading of an error page, by HTTP status ("Refused" for any other).
TITLES = {
    401: "Sign in again",
    403: "Not allowed",
    404: "Not found",
    409: "Not possible now",
    422: "Check the input",
    500: "Server error",
    503: "Ledger unavailable",
}

#: Why a form is refused (403), by what failed.
REFUSED = {
    "CSRF check failed": "This form did not come from this console session (its CSRF token "
    "is missing or wrong). Reload the page and try again.",
    "Sign-in refused": "The sign-in form had expired (it came without this console's cookie); "
    "nobody was signed in. Open the sign-in page and try again.",
}

#: What a form sent after its session ended is answered (idle too long, too old,
#: signed out in another tab, the server restarted).
ENDED = (
    "Your session ended before the form was sent; nothing was written. Sign in and send it again."
)

#: What a sign-out form sent after its session ended is answered: there was nothing
#: left to sign out.
SIGNED_OUT = "You were signed out already: nobody is signed in."

#: Refusals after which a form kept on a page of its own (the revocation's, on its
#: preview) comes back there to be sent again: what was typed is at fault, or the
#: ledger stayed locked by other writers.
TYPED_OR_BUSY = (InvalidInputError, ConcurrencyError)


#: The command a ledger message may start with ("revoke refused: "), left out after
#: the console's own "Revocation of E1 refused".
_COMMAND_REFUSED = re.compile(r"^[a-z_]+ refused: ")


def refused_write(exc: LedgerError, doing: str, subject: str, url: str | None = None) -> str:
    """The message shown after the ledger refused a form's write, naming what the
    form asked (``doing``: ``"Rejection of C1"``; in a queue of many cards the reader
    is told which); ``subject``: what the form was about (``"record C1"``);
    ``url``: the ledger's, left out (:func:`told`)."""
    message = told(exc, url)
    if isinstance(exc, ConcurrencyError):
        return (
            f"Nothing was written for {subject}: the ledger stayed locked by other writers "
            f"(ConcurrencyError: {message}). Send the form again."
        )
    return f"{doing} refused ({type(exc).__name__}): {_COMMAND_REFUSED.sub('', message)}"


def shown_before(kept: bool, dropped: bool = False) -> str:
    """What a form from a page shown before this browser last signed in is told
    (``kept``: what was typed in it is filled in again; ``dropped``: text was typed
    in it, but the page may have been another principal's, so it is not)."""
    typed = ", with what you typed in the form" if kept else ""
    unsure = (
        " What was typed in it is not filled in again: the page may have been someone else's."
        if dropped
        else ""
    )
    return (
        "That form was on a page shown before you last signed in, so it was not taken; "
        f"nothing was written.{unsure} Here is the page as it is now{typed}: check it and "
        "send the form again."
    )


def signin_refused(exc: LedgerError, url: str | None) -> tuple[str, int]:
    """What the sign-in page says when ``exc`` refused a token, and its status: an
    admin token signs in no one (it is no principal's); a ledger that could not
    check the token says so, not that the token is unknown."""
    if not isinstance(exc, AuthenticationError):
        return f"Nobody was signed in: {told(exc, url)}", status_of(exc)
    if str(exc) == ADMIN_TOKEN_REFUSAL:
        return (
            "That is the ledger's admin token: it is for admin commands and signs in no one. "
            "Sign in with a principal's token (provledger token issue SUBJECT).",
            401,
        )
    return "That token is unknown, revoked or expired.", 401
