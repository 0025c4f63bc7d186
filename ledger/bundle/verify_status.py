"""The check of what summary.txt's status line says after the record's status and
validity (its parenthesis): a STALE record's cause, and when an ACCEPTED record
that is no longer VALID expired and whose expiry that was.

What a bundle's summary tells changed with its form (``summary`` in manifest.json,
:data:`SUMMARY_FORM`; absent: the first): from form 2 on, a proposal's history
line tells the record it is a new version of and its own expiry, and an expired
record's status line says when it expired; a bundle declaring form 2 must tell
them (a summary leaving them out is refused), while one written before still
verifies as it was written.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from ledger.bundle.told import _Told, one_line
from ledger.bundle.verify_derivations import _Carried
from ledger.domain import Status, Validity
from ledger.values import HIDDEN, withheld

#: The form of summary.txt this release writes (manifest.json's ``summary``).
SUMMARY_FORM = 2

_STATUS_LINE = re.compile(r"status:    (\S+) / (\S+)(?P<said>.*)$")
_EXPIRED = re.compile(r" \(expired at (?P<at>\S+?)(?:: the expiry of (?P<source>\S+))?\)$")


def summary_form(manifest: dict[str, Any]) -> int:
    """The summary form a manifest declares (1 when it declares none, as bundles
    written before forms were declared)."""
    form = manifest.get("summary", 1)
    return form if isinstance(form, int) and not isinstance(form, bool) else 0


def check_status_line(
    summary: list[str],
    root: str,
    form: int,
    told: dict[str, _Told],
    events: dict[str, list[_Carried]],
    problems: list[str],
    unchecked: list[str],
    hidden: bool,
    created: datetime | None = None,
) -> None:
    """summary.txt's status line says of a STALE root the cause its newest stale
    marking carries (revoked, with the reason, or superseded, by what), unless
    that marking's bytes are withheld (its cause is outside the reader's scopes);
    and, from form 2 on, of an ACCEPTED root no longer VALID, the expiry of the
    record it names (the root's own, or an included ancestor's), unchecked where
    that record's proposal bytes are withheld (they name a record outside the
    reader's scopes) or it lies beyond such a record (``hidden``: the bundle says
    its ancestry reaches one, and some included record's bases are not all
    carried), never later than the bundle was made (``created``). An expiry told
    so is checked in a summary of any form (none wrote one before form 2). Any
    other parenthesis (a reason, a note) is the record's text, told as it is."""
    line = next((x for x in summary if x.startswith("status:")), None)
    found = None if line is None else _STATUS_LINE.match(line)
    if line is None or found is None:
        return  # named by the check of the summary's lines
    status, validity, said = found[1], found[2], found["said"]
    if status == Status.STALE:
        marked = [
            fields for _p, kind, fields, _v, _o in events.get(root, []) if kind == "MarkedStale"
        ]
        if not marked or not isinstance(marked[-1], dict):
            return  # no marking carried, or its bytes withheld: the cause is not told here
        expected = _stale_cause(marked[-1])
        told_so = [expected, *_earlier_stale_cause(marked[-1], form)]
        if line not in (one_line(f"status:    {status} / {validity}{x}") for x in told_so):
            problems.append(
                f"summary.txt says {root} is STALE{said}, but its newest stale marking says"
                f"{expected or ' nothing of its cause'}"
            )
    elif status == Status.ACCEPTED and validity != Validity.VALID:
        if form < 2 and _EXPIRED.match(said) is None:
            return  # a first-form summary told no expiry there
        # Beyond a hidden record only where something included rests on one.
        open_ended = hidden and any(not t.bases_known or t.proposal is None for t in told.values())
        _check_expired(said, root, told, problems, unchecked, open_ended, created)


def _stale_cause(fields: dict[str, Any]) -> str:
    """What the status line says of a stale marking's cause (the writer's form)."""
    cause, by, reason = fields.get("cause"), fields.get("superseded_by"), fields.get("reason")
    if not isinstance(cause, str) or cause == HIDDEN:
        return f" ({withheld(by if isinstance(by, str) else None)})"
    if isinstance(by, str):
        return f" ({cause} superseded by {by})"
    return f" ({cause} revoked: {reason})"


def _earlier_stale_cause(fields: dict[str, Any], form: int) -> list[str]:
    """How a summary of the first form may also have told a cause superseded (as
    a revocation, "superseded by" its reason)."""
    cause, by = fields.get("cause"), fields.get("superseded_by")
    if form >= 2 or not isinstance(cause, str) or not isinstance(by, str):
        return []
    return [f" ({cause} revoked: superseded by {by})"]


def _check_expired(
    said: str,
    root: str,
    told: dict[str, _Told],
    problems: list[str],
    unchecked: list[str],
    hidden: bool,
    created: datetime | None,
) -> None:
    found = _EXPIRED.match(said)
    if found is None:
        problems.append(
            f"summary.txt says {root} is no longer VALID{said}, not when it expired, as the "
            "bundle's summary form says it does"
        )
        return
    try:
        at = datetime.fromisoformat(found["at"])
    except ValueError:
        at = None
    made = created if created is not None and created.tzinfo is not None else None
    if at is None or at.tzinfo is None or (made is not None and at > made):
        problems.append(
            f"summary.txt says {root} expired at {found['at']}, which is no moment before "
            "the bundle was made"
        )
        return
    source = found["source"] or root
    if source == HIDDEN and hidden:
        unchecked.append(f"{root}: that it expired at {found['at']} cannot be checked")
        return
    if source == HIDDEN:
        problems.append(
            f"summary.txt says {root} expired at {found['at']} by the expiry of a record "
            "outside the reader's scopes, but everything it rests on is carried"
        )
        return
    named = told.get(source)
    if (named is None and hidden) or (named is not None and named.proposal is None):
        unchecked.append(f"{root}: that it expired at {found['at']} cannot be checked")
        return
    if named is None:
        problems.append(
            f"summary.txt says {root} expired at {found['at']} (the expiry of {source}), but "
            f"{source} is no record the bundle includes"
        )
        return
    due = named.expires
    shown = None if due is None else due.astimezone(UTC).isoformat(timespec="seconds")
    if shown != found["at"]:
        whose = "its own" if source == root else f"{source}'s"
        problems.append(
            f"summary.txt says {root} expired at {found['at']}"
            + ("" if source == root else f" (the expiry of {source})")
            + f", but {whose} proposal says it expires {shown or 'never'}"
        )
