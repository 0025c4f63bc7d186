"""Bad input (SPEC 11): every refusal is a specific ``LedgerError`` subclass whose
message names the offending item, and the log and the views are left unchanged.

The table ``CASES`` drives one test over a small ledger holding a record in every
status; each case runs on every backend.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import uuid4

import pytest

from ledger import Admin, Kind, Ledger, Session, proposals
from ledger.errors import (
    AcceptanceCheckError,
    AccessDeniedError,
    AuthenticationError,
    CorruptEventError,
    CycleError,
    DuplicateRecordError,
    ExpiryInPastError,
    InvalidIdError,
    InvalidInputError,
    InvalidKindError,
    InvalidParentError,
    InvalidRoleError,
    InvalidTransitionError,
    InvalidValueError,
    LedgerError,
    NaiveDatetimeError,
    NotUsableError,
    ReadOnlyError,
    SelfApprovalError,
    UnknownDeliveryError,
    UnknownRecordError,
    UnknownSnapshotError,
    UnknownTokenError,
    ValueTooLargeError,
)
from ledger.serialization import pack

from .conftest import Clock, aggregate_of

SCOPE = "proj-a"
LIMIT = 512  # max_value_bytes of the ledger under test: small, so "oversized" is cheap
NAIVE = datetime(2030, 1, 1, 12, 0)


@dataclass
class Bad:
    """A ledger with a record in every status and the principals to poke at it.

    ``E1`` evidence ACCEPTED, ``M1`` ACCEPTED on E1, ``C1`` CANDIDATE, ``X1``
    REJECTED, ``Z1`` REVOKED, ``E0 -> S1 -> S2`` with E0 REVOKED (S1, S2 STALE),
    ``SOLO1`` CANDIDATE proposed by ``solo`` (who may also approve), ``H1`` in
    ``proj-c`` which the agent cannot read, ``EXP1`` a CANDIDATE and ``MEXP`` an
    ACCEPTED fact both expiring in an hour, run ``task-1`` finished.
    """

    ledger: Ledger
    admin: Admin
    clock: Clock
    agent: Session
    reviewer: Session
    outsider: Session
    solo: Session
    revoked: Session  # agent-1, through a token revoked after authenticating
    expiring: Session  # agent-1, through a token that expires in an hour
    revoked_token: str


@pytest.fixture
def bad(open_ledger: Callable[..., Ledger], clock: Clock) -> Bad:
    led = open_ledger(max_value_bytes=LIMIT)
    admin = led.admin()
    admin.grant("agent-1", scope=SCOPE, roles=["propose", "read"])
    admin.grant("reviewer", scope=SCOPE, roles=["approve", "read", "audit", "deliver"])
    admin.grant("outsider", scope="proj-b", roles=["read"])
    admin.grant("solo", scope=SCOPE, roles=["propose", "approve", "read"])
    admin.grant("owner-c", scope="proj-c", roles=["propose", "read"])
    agent = led.authenticate(admin.issue_token("agent-1"))
    reviewer = led.authenticate(admin.issue_token("reviewer"))
    solo = led.authenticate(admin.issue_token("solo"))
    owner_c = led.authenticate(admin.issue_token("owner-c"))
    revoked_token = admin.issue_token("agent-1")
    revoked = led.authenticate(revoked_token)
    admin.revoke_token(revoked_token)
    expiring = led.authenticate(
        admin.issue_token("agent-1", expires=clock.now + timedelta(hours=1))
    )

    def propose(rid: str, **kwargs: Any) -> str:
        kwargs.setdefault("claim_key", f"claim.{rid.lower()}")
        kwargs.setdefault("kind", Kind.FACT)
        kwargs.setdefault("value", rid)
        return agent.propose(scope=SCOPE, id=rid, **kwargs)

    e1 = agent.capture(scope=SCOPE, uri="https://docs.test/e1", content=b"e1", id="E1")
    reviewer.accept(e1)
    reviewer.accept(propose("M1", parents=[e1]))
    propose("C1")
    reviewer.reject(propose("X1"), reason="wrong")
    reviewer.accept(propose("Z1"))
    reviewer.revoke("Z1", reason="withdrawn")
    e0 = agent.capture(scope=SCOPE, uri="https://docs.test/e0", content=b"e0", id="E0")
    reviewer.accept(e0)
    reviewer.accept(propose("S1", parents=[e0]))
    reviewer.accept(propose("S2", parents=["S1"]))
    reviewer.revoke(e0, reason="doc changed")
    solo.propose(scope=SCOPE, claim_key="solo", value=1, kind=Kind.FACT, id="SOLO1")
    owner_c.propose(scope="proj-c", claim_key="hidden", value=1, kind=Kind.FACT, id="H1")
    propose("EXP1", expires=clock.now + timedelta(hours=1))
    reviewer.accept(propose("MEXP", expires=clock.now + timedelta(hours=1)))
    with agent.run("task-1"):
        pass
    return Bad(
        ledger=led,
        admin=admin,
        clock=clock,
        agent=agent,
        reviewer=reviewer,
        outsider=led.authenticate(admin.issue_token("outsider")),
        solo=solo,
        revoked=revoked,
        expiring=expiring,
        revoked_token=revoked_token,
    )


@dataclass(frozen=True)
class Case:
    """One bad input: what is done, the exact error class, what its message names."""

    name: str
    act: Callable[[Bad], object]
    error: type[LedgerError]
    names: str


def _propose(b: Bad, **kwargs: Any) -> str:
    """The agent proposes a fine fact in proj-a, with ``kwargs`` overriding."""
    args: dict[str, Any] = {
        "scope": SCOPE,
        "claim_key": "k",
        "value": 1,
        "kind": Kind.FACT,
        "id": "NEW1",
    }
    args.update(kwargs)
    return b.agent.propose(**args)


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def _expire_then(act: Callable[[Bad], object]) -> Callable[[Bad], object]:
    def run(b: Bad) -> object:
        b.clock.advance(hours=2)
        return act(b)

    return run


def _now(b: Bad) -> datetime:
    return b.clock.now


CASES = [
    # -- unknown ids -----------------------------------------------------------
    Case("accept-unknown", lambda b: b.reviewer.accept("NOPE"), UnknownRecordError, "NOPE"),
    Case("reject-unknown", lambda b: b.reviewer.reject("NOPE", "x"), UnknownRecordError, "NOPE"),
    Case("revoke-unknown", lambda b: b.reviewer.revoke("NOPE", "x"), UnknownRecordError, "NOPE"),
    Case("revalidate-unknown", lambda b: b.reviewer.revalidate("NOPE"), UnknownRecordError, "NOPE"),
    Case("get-unknown", lambda b: b.reviewer.get("NOPE"), UnknownRecordError, "NOPE"),
    Case("audit-unknown", lambda b: b.reviewer.audit("NOPE"), UnknownRecordError, "NOPE"),
    Case(
        "deliver-unknown",
        lambda b: b.reviewer.deliver("NOPE", recipient="ops@x.test"),
        UnknownRecordError,
        "NOPE",
    ),
    Case(
        "correction-unknown-delivery",
        lambda b: b.reviewer.issue_correction("d-nope", note="fix"),
        UnknownDeliveryError,
        "d-nope",
    ),
    # A missing field or the string "false" is no answer to "only if owed?": taken
    # as one, a correction would be issued however often the form was sent.
    Case(
        "correction-only-if-owed-none",
        lambda b: b.reviewer.issue_correction("d-nope", note="fix", only_if_owed=None),  # type: ignore[arg-type]
        InvalidInputError,
        "only_if_owed must be True or False, got None",
    ),
    Case(
        "correction-only-if-owed-a-string",
        lambda b: b.reviewer.issue_correction("d-nope", note="fix", only_if_owed="false"),  # type: ignore[arg-type]
        InvalidInputError,
        "only_if_owed must be True or False, got 'false'",
    ),
    Case(
        "snapshot-unknown",
        lambda b: b.agent.snapshot("sha256:" + "0" * 64),
        UnknownSnapshotError,
        "sha256:" + "0" * 64,
    ),
    Case("parent-unknown", lambda b: _propose(b, parents=["NOPE"]), InvalidParentError, "NOPE"),
    Case(
        "new-basis-unknown",
        lambda b: b.reviewer.revalidate("S1", parents=["NOPE"]),
        InvalidParentError,
        "NOPE",
    ),
    Case("get-hidden-scope", lambda b: b.agent.get("H1"), UnknownRecordError, "H1"),
    # -- duplicate ids ---------------------------------------------------------
    Case("propose-duplicate", lambda b: _propose(b, id="E1"), DuplicateRecordError, "E1"),
    Case(
        "capture-duplicate",
        lambda b: b.agent.capture(scope=SCOPE, uri="https://d.test/x", content=b"x", id="M1"),
        DuplicateRecordError,
        "M1",
    ),
    Case(
        "run-duplicate",
        lambda b: b.agent.run("task-1").__enter__(),
        DuplicateRecordError,
        "task-1",
    ),
    # -- self and cyclic parents --------------------------------------------------
    Case("self-parent", lambda b: _propose(b, id="SELF", parents=["SELF"]), CycleError, "SELF"),
    Case(
        "new-basis-is-self",
        lambda b: b.reviewer.revalidate("S1", parents=["S1"]),
        CycleError,
        "S1",
    ),
    Case(
        "new-basis-is-descendant",
        lambda b: b.reviewer.revalidate("S1", parents=["S2"]),
        CycleError,
        "S2",
    ),
    # -- unreadable or unusable parents ------------------------------------------
    Case("parent-hidden-scope", lambda b: _propose(b, parents=["H1"]), InvalidParentError, "H1"),
    Case("parent-revoked", lambda b: _propose(b, parents=["Z1"]), InvalidParentError, "Z1"),
    Case("parent-rejected", lambda b: _propose(b, parents=["X1"]), InvalidParentError, "X1"),
    Case("parent-stale", lambda b: _propose(b, parents=["S1"]), InvalidParentError, "S1"),
    Case(
        "new-basis-stale",
        lambda b: b.reviewer.revalidate("S2", parents=["S1"]),
        InvalidParentError,
        "S1",
    ),
    # -- naive datetimes -----------------------------------------------------------
    Case("naive-expires", lambda b: _propose(b, expires=NAIVE), NaiveDatetimeError, "expires"),
    Case("naive-read-at", lambda b: b.agent.read(SCOPE, "k", at=NAIVE), NaiveDatetimeError, "at"),
    Case(
        "naive-explain-at",
        lambda b: b.agent.explain(SCOPE, "k", at=NAIVE),
        NaiveDatetimeError,
        "at",
    ),
    Case(
        "naive-fetched-at",
        lambda b: b.agent.capture(
            scope=SCOPE, uri="https://d.test/n", content=b"n", fetched_at=NAIVE
        ),
        NaiveDatetimeError,
        "fetched_at",
    ),
    Case(
        "naive-capture-expires",
        lambda b: b.agent.capture(scope=SCOPE, uri="https://d.test/n", content=b"n", expires=NAIVE),
        NaiveDatetimeError,
        "expires",
    ),
    Case(
        "naive-token-expiry",
        lambda b: b.admin.issue_token("agent-1", expires=NAIVE),
        NaiveDatetimeError,
        "token expiry",
    ),
    Case("naive-as-of", lambda b: b.agent.as_of(time=NAIVE), NaiveDatetimeError, "as_of time"),
    # -- expiry already past ----------------------------------------------------------
    Case(
        "expires-in-past",
        lambda b: _propose(b, expires=_now(b) - timedelta(seconds=1)),
        ExpiryInPastError,
        "expires",
    ),
    Case("expires-now", lambda b: _propose(b, expires=_now(b)), ExpiryInPastError, "expires"),
    Case(
        "capture-expires-in-past",
        lambda b: b.agent.capture(
            scope=SCOPE, uri="https://d.test/p", content=b"p", expires=_now(b) - timedelta(days=1)
        ),
        ExpiryInPastError,
        "expires",
    ),
    Case(
        "token-expiry-in-past",
        lambda b: b.admin.issue_token("agent-1", expires=_now(b) - timedelta(seconds=1)),
        ExpiryInPastError,
        "token expiry",
    ),
    # -- unserialisable values ------------------------------------------------------------
    Case("value-object", lambda b: _propose(b, value=object()), InvalidValueError, "object"),
    Case("value-set", lambda b: _propose(b, value={1, 2}), InvalidValueError, "set"),
    Case("value-nan", lambda b: _propose(b, value=float("nan")), InvalidValueError, "NaN"),
    Case(
        "value-nan-nested",
        lambda b: _propose(b, value={"v": [float("nan")]}),
        InvalidValueError,
        "NaN at value.v[0]",
    ),
    Case(
        "conditions-nan",
        lambda b: _propose(b, conditions={"v": float("nan")}),
        InvalidValueError,
        "conditions contains NaN at conditions.v",
    ),
    Case(
        "value-nested-nan",
        lambda b: _propose(b, value=[1, {"a": float("nan")}]),
        InvalidValueError,
        "value[1].a",
    ),
    Case("value-int-key", lambda b: _propose(b, value={1: "a"}), InvalidValueError, "key 1"),
    Case("value-too-deep", lambda b: _propose(b, value=_nested(40)), InvalidValueError, "deeper"),
    Case("value-int-too-big", lambda b: _propose(b, value=2**64), InvalidValueError, "64-bit"),
    Case(
        "conditions-object",
        lambda b: _propose(b, conditions={"k": object()}),
        InvalidValueError,
        "conditions",
    ),
    Case(
        "context-set",
        lambda b: b.agent.read(SCOPE, "k", context={"k": {1}}),
        InvalidValueError,
        "context",
    ),
    Case(
        "capture-content-str",
        lambda b: b.agent.capture(scope=SCOPE, uri="https://d.test/s", content="text"),  # type: ignore[arg-type]
        InvalidValueError,
        "content",
    ),
    Case(
        "capture-uri-padded",
        lambda b: b.agent.capture(scope=SCOPE, uri=" https://d.test/p ", content=b"p"),
        InvalidValueError,
        "uri ' https://d.test/p ' has leading or trailing whitespace",
    ),
    # -- oversized values -----------------------------------------------------------------
    Case(
        "value-oversized",
        lambda b: _propose(b, value="x" * (LIMIT + 1)),
        ValueTooLargeError,
        f"limit is {LIMIT}",
    ),
    Case(
        "conditions-oversized",
        lambda b: _propose(b, conditions={"k": "x" * (LIMIT + 1)}),
        ValueTooLargeError,
        "conditions",
    ),
    Case(
        "content-oversized",
        lambda b: b.agent.capture(
            scope=SCOPE, uri="https://d.test/big", content=b"x" * (LIMIT + 1)
        ),
        ValueTooLargeError,
        "https://d.test/big",
    ),
    # -- invalid transitions ------------------------------------------------------------------
    Case("accept-rejected", lambda b: b.reviewer.accept("X1"), InvalidTransitionError, "X1"),
    Case("accept-accepted", lambda b: b.reviewer.accept("M1"), InvalidTransitionError, "M1"),
    Case("reject-accepted", lambda b: b.reviewer.reject("M1", "x"), InvalidTransitionError, "M1"),
    Case("revoke-revoked", lambda b: b.reviewer.revoke("Z1", "x"), InvalidTransitionError, "Z1"),
    Case("revoke-rejected", lambda b: b.reviewer.revoke("X1", "x"), InvalidTransitionError, "X1"),
    Case(
        "revalidate-accepted", lambda b: b.reviewer.revalidate("M1"), InvalidTransitionError, "M1"
    ),
    Case(
        "revalidate-candidate", lambda b: b.reviewer.revalidate("C1"), InvalidTransitionError, "C1"
    ),
    Case(
        "deliver-candidate",
        lambda b: b.reviewer.deliver("C1", recipient="ops@x.test"),
        InvalidTransitionError,
        "C1",
    ),
    Case(
        "accept-expired-candidate",
        _expire_then(lambda b: b.reviewer.accept("EXP1")),
        InvalidTransitionError,
        "EXP1",
    ),
    Case(
        "deliver-expired",
        _expire_then(lambda b: b.reviewer.deliver("MEXP", recipient="ops@x.test")),
        NotUsableError,
        "MEXP",
    ),
    Case("self-approval", lambda b: b.solo.accept("SOLO1"), SelfApprovalError, "SOLO1"),
    Case("self-rejection", lambda b: b.solo.reject("SOLO1", "x"), SelfApprovalError, "SOLO1"),
    # -- missing roles ------------------------------------------------------------------------
    Case("accept-without-approve", lambda b: b.agent.accept("C1"), AccessDeniedError, "approve"),
    Case(
        "revoke-without-approve", lambda b: b.agent.revoke("E1", "x"), AccessDeniedError, "approve"
    ),
    Case("audit-without-audit", lambda b: b.agent.audit("E1"), AccessDeniedError, "audit"),
    Case(
        "deliver-without-deliver",
        lambda b: b.agent.deliver("M1", recipient="ops@x.test"),
        AccessDeniedError,
        "deliver",
    ),
    Case(
        "propose-without-propose",
        lambda b: b.outsider.propose(scope="proj-b", claim_key="k", value=1, kind=Kind.FACT),
        AccessDeniedError,
        "propose",
    ),
    Case(
        "capture-without-propose",
        lambda b: b.reviewer.capture(scope=SCOPE, uri="https://d.test/r", content=b"r"),
        AccessDeniedError,
        "propose",
    ),
    Case("read-without-grant", lambda b: b.outsider.read(SCOPE, "k"), AccessDeniedError, SCOPE),
    # An empty kinds would count no record: MISSING, whatever is stored.
    Case("read-no-kinds", lambda b: b.agent.read(SCOPE, "k", kinds=[]), InvalidInputError, "kinds"),
    Case(
        "explain-no-kinds",
        lambda b: b.agent.explain(SCOPE, "k", kinds=()),
        InvalidInputError,
        "kinds is empty",
    ),
    # -- bad tokens ---------------------------------------------------------------------------
    Case(
        "token-unknown",
        lambda b: b.ledger.authenticate("plt_not-a-token"),
        UnknownTokenError,
        "token",
    ),
    Case("token-empty", lambda b: b.ledger.authenticate(""), AuthenticationError, "token"),
    Case(
        "token-revoked",
        lambda b: b.ledger.authenticate(b.revoked_token),
        AuthenticationError,
        "revoked",
    ),
    Case(
        "token-revoked-twice",
        lambda b: b.admin.revoke_token(b.revoked_token),
        AuthenticationError,
        "revoked",
    ),
    Case(
        "revoke-token-unknown",
        lambda b: b.admin.revoke_token("plt_not-a-token"),
        UnknownTokenError,
        "token",
    ),
    Case(
        "session-of-revoked-token",
        lambda b: b.revoked.read(SCOPE, "k"),
        AuthenticationError,
        "revoked",
    ),
    Case(
        "session-of-expired-token",
        _expire_then(lambda b: b.expiring.read(SCOPE, "k")),
        AuthenticationError,
        "expired",
    ),
    Case(
        "write-of-expired-token",
        _expire_then(
            lambda b: b.expiring.propose(scope=SCOPE, claim_key="k", value=1, kind=Kind.FACT)
        ),
        AuthenticationError,
        "expired",
    ),
    # -- invalid kinds, roles, ids -----------------------------------------------------------
    Case("kind-unknown", lambda b: _propose(b, kind="rumour"), InvalidKindError, "rumour"),
    Case(
        "read-kinds-unknown",
        lambda b: b.agent.read(SCOPE, "k", kinds=["rumour"]),
        InvalidKindError,
        "rumour",
    ),
    Case(
        "role-unknown",
        lambda b: b.admin.grant("agent-1", scope=SCOPE, roles=["superuser"]),
        InvalidRoleError,
        "superuser",
    ),
    Case(
        "roles-empty",
        lambda b: b.admin.grant("agent-1", scope=SCOPE, roles=[]),
        InvalidRoleError,
        "roles",
    ),
    # A mapping's keys would be taken whatever its values say: {"approve": False}
    # must not grant approve, nor {"E1": ...} name E1 as a parent.
    Case(
        "roles-a-mapping",
        lambda b: b.admin.grant("outsider", scope=SCOPE, roles={"read": True, "approve": False}),
        InvalidRoleError,
        "roles must be a list",
    ),
    # Bytes would be taken as numbers, one a character ("role 114 is not one of").
    Case(
        "roles-bytes",
        lambda b: b.admin.grant("outsider", scope=SCOPE, roles=b"read"),
        InvalidRoleError,
        "roles must be a list of role names, got b'read'",
    ),
    Case(
        "revoke-grant-roles-a-mapping",
        lambda b: b.admin.revoke_grant("agent-1", scope=SCOPE, roles={"propose": False}),
        InvalidRoleError,
        "roles must be a list",
    ),
    Case(
        "parents-a-mapping",
        lambda b: _propose(b, parents={"E1": "the source"}),
        InvalidInputError,
        "parents must be a list, got dict",
    ),
    Case(
        "kinds-a-mapping",
        lambda b: b.agent.read(SCOPE, "claim.m1", kinds={"fact": False}),
        InvalidInputError,
        "kinds must be a list, got dict",
    ),
    Case(
        "propose-many-a-mapping",
        lambda b: b.agent.propose_many({"scope": SCOPE, "claim_key": "k", "value": 1}),  # type: ignore[arg-type]
        InvalidInputError,
        "items must be a list, got dict",
    ),
    Case(
        "evidence-proposed-not-captured",
        lambda b: _propose(b, kind=Kind.EVIDENCE),
        InvalidKindError,
        "kind 'evidence' is proposed by capture",
    ),
    Case(
        "evidence-in-a-batch-not-captured",
        lambda b: b.agent.propose_many(
            [{"scope": SCOPE, "claim_key": "k", "value": 1, "kind": "evidence"}]
        ),
        InvalidKindError,
        "propose_many item 0: kind 'evidence'",
    ),
    Case(
        "grant-to-the-admin-name",
        lambda b: b.admin.grant("admin", scope=SCOPE, roles=["read"]),
        InvalidIdError,
        "'admin' is reserved",
    ),
    Case(
        "token-for-the-admin-name",
        lambda b: b.admin.issue_token("admin"),
        InvalidIdError,
        "'admin' is reserved",
    ),
    Case(
        "roles-a-string",
        lambda b: b.admin.grant("agent-1", scope=SCOPE, roles="read"),
        InvalidRoleError,
        "read",
    ),
    Case(
        "revoke-grant-role-unknown",
        lambda b: b.admin.revoke_grant("agent-1", scope=SCOPE, roles=["root"]),
        InvalidRoleError,
        "root",
    ),
    Case("id-with-space", lambda b: _propose(b, id="bad id"), InvalidIdError, "bad id"),
    Case("id-leading-dash", lambda b: _propose(b, id="-x"), InvalidIdError, "-x"),
    Case("id-empty", lambda b: _propose(b, id=""), InvalidIdError, "record id"),
    Case("id-too-long", lambda b: _propose(b, id="a" * 129), InvalidIdError, "a" * 129),
    Case("id-not-a-string", lambda b: _propose(b, id=42), InvalidIdError, "42"),
    Case("scope-invalid", lambda b: _propose(b, scope="proj a"), InvalidIdError, "proj a"),
    Case("parent-id-invalid", lambda b: _propose(b, parents=["a/b"]), InvalidIdError, "a/b"),
    Case("get-id-invalid", lambda b: b.agent.get("no such/id"), InvalidIdError, "no such/id"),
    Case(
        "grant-subject-invalid",
        lambda b: b.admin.grant("bad subject", scope=SCOPE, roles=["read"]),
        InvalidIdError,
        "bad subject",
    ),
    Case("run-id-invalid", lambda b: b.agent.run("bad run"), InvalidIdError, "bad run"),
    # -- other malformed arguments ---------------------------------------------------------
    Case(
        "reason-empty", lambda b: b.reviewer.reject("C1", reason=" "), InvalidValueError, "reason"
    ),
    Case(
        "recipient-empty",
        lambda b: b.reviewer.deliver("M1", recipient=""),
        InvalidValueError,
        "recipient",
    ),
    Case(
        "recipient-two-lines",
        lambda b: b.reviewer.deliver("M1", recipient="ops@x.test\nBcc: eve@x.test"),
        InvalidValueError,
        "recipient 'ops@x.test\\nBcc: eve@x.test' contains control characters",
    ),
    # Line breaks beyond C0 split a one-line text as surely (str.splitlines)
    Case(
        "recipient-next-line",
        lambda b: b.reviewer.deliver("M1", recipient="ops@x.test\x85Bcc: eve@x.test"),
        InvalidValueError,
        "recipient 'ops@x.test\\x85Bcc: eve@x.test' contains control characters",
    ),
    Case(
        "claim-key-line-separator",
        lambda b: _propose(b, claim_key="a\u2028b"),
        InvalidValueError,
        "claim_key 'a\\u2028b' contains control characters",
    ),
    Case(
        "claim-key-paragraph-separator",
        lambda b: _propose(b, claim_key="a\u2029b"),
        InvalidValueError,
        "claim_key 'a\\u2029b' contains control characters",
    ),
    Case(
        "revoke-grant-not-held",
        lambda b: b.admin.revoke_grant("nobody", scope=SCOPE),
        InvalidInputError,
        "'nobody'",
    ),
    Case("claim-key-empty", lambda b: _propose(b, claim_key=""), InvalidValueError, "claim_key"),
    # An invisible format character (Unicode Cf) at either end spells a claim a
    # second way, as surrounding whitespace would: refused, naming its code point.
    Case(
        "claim-key-only-format",
        lambda b: _propose(b, claim_key="\u200b"),
        InvalidValueError,
        "claim_key '\\u200b' is made only of invisible format characters (U+200B ZERO WIDTH SPACE)",
    ),
    Case(
        "claim-key-trailing-format",
        lambda b: _propose(b, claim_key="k\u200b"),
        InvalidValueError,
        "claim_key 'k\\u200b' has a trailing invisible format character (U+200B ZERO WIDTH SPACE)",
    ),
    Case(
        "claim-key-leading-format",
        lambda b: _propose(b, claim_key="\ufeffk"),
        InvalidValueError,
        "claim_key '\\ufeffk' has a leading invisible format character "
        "(U+FEFF ZERO WIDTH NO-BREAK SPACE)",
    ),
    Case(
        "claim-key-trailing-joiner",
        lambda b: _propose(b, claim_key="k\u200d"),
        InvalidValueError,
        "(U+200D ZERO WIDTH JOINER)",
    ),
    Case(
        "claim-key-bidi-marks-only",
        lambda b: _propose(b, claim_key="\u200e\u200f"),
        InvalidValueError,
        "claim_key '\\u200e\\u200f' is made only of invisible format characters "
        "(U+200E LEFT-TO-RIGHT MARK, U+200F RIGHT-TO-LEFT MARK)",
    ),
    Case(
        "capture-claim-key-trailing-format",
        lambda b: b.agent.capture(
            scope=SCOPE, uri="https://d.test/f", content=b"f", claim_key="k\u2060"
        ),
        InvalidValueError,
        "claim_key 'k\\u2060' has a trailing invisible format character (U+2060 WORD JOINER)",
    ),
    Case(
        "propose-many-claim-key-format",
        lambda b: b.agent.propose_many(
            [{"scope": SCOPE, "claim_key": "\u00adk", "value": 1, "kind": "fact"}]
        ),
        InvalidValueError,
        "claim_key '\\xadk' has a leading invisible format character (U+00AD SOFT HYPHEN)",
    ),
    Case(
        "capture-uri-trailing-format",
        lambda b: b.agent.capture(scope=SCOPE, uri="https://d.test/f\u200b", content=b"f"),
        InvalidValueError,
        "uri 'https://d.test/f\\u200b' has a trailing invisible format character (U+200B",
    ),
    Case(
        "capture-uri-leading-format",
        lambda b: b.agent.capture(scope=SCOPE, uri="\u200bhttps://d.test/f", content=b"f"),
        InvalidValueError,
        "uri '\\u200bhttps://d.test/f' has a leading invisible format character (U+200B",
    ),
    Case(
        "as-of-beyond-log",
        lambda b: b.agent.as_of(position=b.ledger.position + 1),
        InvalidInputError,
        "beyond the log",
    ),
    Case(
        "as-of-both",
        lambda b: b.agent.as_of(position=1, time=_now(b)),
        InvalidInputError,
        "exactly one",
    ),
]


def test_fixture_holds_a_record_in_every_status(bad: Bad) -> None:
    got = {rid: bad.reviewer.get(rid).status for rid in ("E1", "C1", "X1", "Z1", "S1", "S2")}
    assert got == {
        "E1": "ACCEPTED",
        "C1": "CANDIDATE",
        "X1": "REJECTED",
        "Z1": "REVOKED",
        "S1": "STALE",
        "S2": "STALE",
    }
    assert bad.reviewer.get("SOLO1").proposer == "solo"


def test_case_names_are_unique() -> None:
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_refused_specifically_and_changes_nothing(bad: Bad, case: Case) -> None:
    # Given the log and the views as they are
    position, digest = bad.ledger.position, bad.ledger.views_digest()

    # When the bad input is given
    with pytest.raises(LedgerError) as info:
        case.act(bad)

    # Then the error is exactly the expected subclass and names the offending item
    assert type(info.value) is case.error, f"{type(info.value).__name__}: {info.value}"
    assert case.names in str(info.value)

    # And the log and the views are unchanged
    assert bad.ledger.position == position
    assert bad.ledger.views_digest() == digest


@pytest.mark.parametrize(
    "field",
    [
        "scope",
        "id",
        "parents",
        "supersedes",
        "kind",
        "get",
        "status",
        "history-type",
        "as-of-position",
        "role",
        "verify-against",
    ],
)
def test_a_huge_bad_argument_is_quoted_cut_with_its_length_told(bad: Bad, field: str) -> None:
    # An agent that sent a megabyte must not get it back in the refusal.
    huge = "x" * 100_000 + " "
    before = bad.ledger.position
    acts: dict[str, Callable[[], object]] = {
        "scope": lambda: _propose(bad, scope=huge),
        "id": lambda: _propose(bad, id=huge),
        "parents": lambda: _propose(bad, parents=[huge]),
        "supersedes": lambda: _propose(bad, supersedes=huge),
        "kind": lambda: _propose(bad, kind=huge),
        "get": lambda: bad.agent.get(huge),
        "status": lambda: bad.agent.records(SCOPE, status=huge),
        "history-type": lambda: bad.reviewer.history(type=huge),
        "as-of-position": lambda: bad.reviewer.as_of(position=huge),  # type: ignore[arg-type]
        "role": lambda: bad.admin.grant("outsider", scope=SCOPE, roles=[huge]),
        "verify-against": lambda: bad.ledger.verify(against=huge),
    }
    with pytest.raises(LedgerError) as refused:
        acts[field]()
    message = str(refused.value)
    assert len(message) < 400, message[:200]
    assert "… (100001 characters)" in message
    assert bad.ledger.position == before


def test_a_long_claim_key_ending_in_a_format_character_is_quoted_cut(bad: Bad) -> None:
    before = bad.ledger.position
    with pytest.raises(InvalidValueError) as refused:
        _propose(bad, claim_key="x" * 300 + "\u200b")
    message = str(refused.value)
    assert len(message) < 400, message[:200]
    assert "… (301 characters) has a trailing invisible format character (U+200B" in message
    assert bad.ledger.position == before


@pytest.mark.parametrize(
    "claim",
    [
        "team.\U0001f469\u200d\U0001f4bb",  # ZWJ inside an emoji sequence (woman technologist)
        "a\u200bb",  # anywhere inside, a format character is kept
        # A subdivision flag (England) ends with tag characters and U+E007F CANCEL TAG.
        "team.\U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f",
    ],
    ids=["zwj-emoji", "zwsp-inside", "flag-tail"],
)
def test_a_format_character_inside_a_claim_key_is_kept(bad: Bad, claim: str) -> None:
    rid = _propose(bad, claim_key=claim)
    assert bad.reviewer.get(rid).claim_key == claim
    bad.reviewer.accept(rid)
    assert bad.agent.read(SCOPE, claim).value == 1


def test_a_claim_key_an_earlier_version_took_with_a_format_character_at_an_end_is_kept(
    bad: Bad, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a ledger holding an accepted record under "k\u200b", as a version that
    # did not refuse such keys wrote it
    with monkeypatch.context() as earlier:
        earlier.setattr(proposals, "check_format_edges", lambda text, what: None)
        _propose(bad, claim_key="k\u200b", id="OLDK1")
    bad.reviewer.accept("OLDK1")
    # Then its claim is still read, and a new version of it proposed and accepted
    assert bad.agent.read(SCOPE, "k\u200b").value == 1
    _propose(bad, claim_key="k\u200b", value=2, supersedes="OLDK1", id="OLDK2")
    bad.reviewer.accept("OLDK2")
    assert bad.agent.read(SCOPE, "k\u200b").value == 2
    # But no new claim is made under such a key, nor a rival value proposed
    with pytest.raises(InvalidValueError, match="has a trailing invisible format character"):
        _propose(bad, claim_key="k\u200b", value=3, id="OLDK3")


def test_a_refused_proposal_without_an_id_names_no_id_drawn_for_it(bad: Bad) -> None:
    # No record holds the id drawn for a refused proposal: naming it would send the
    # caller looking for a record that does not exist.
    with pytest.raises(InvalidParentError) as refused:
        bad.agent.propose(SCOPE, "k", 1, Kind.INFERENCE, parents=["NEVER1"])
    assert str(refused.value) == (
        "parent 'NEVER1' of the new record is unknown or not readable by 'agent-1'"
    )
    with pytest.raises(InvalidParentError) as given:
        bad.agent.propose(SCOPE, "k", 1, Kind.INFERENCE, parents=["NEVER1"], id="MINE1")
    assert "of 'MINE1'" in str(given.value)


def test_parent_in_unreadable_scope_looks_exactly_like_an_unknown_parent(bad: Bad) -> None:
    # Given H1 exists in proj-c, where the agent holds no grant
    with pytest.raises(UnknownRecordError):
        bad.agent.get("H1")

    # When the agent names H1 as a parent, and then an id that never existed
    with pytest.raises(InvalidParentError) as hidden:
        _propose(bad, id="CHILD", parents=["H1"])
    with pytest.raises(InvalidParentError) as unknown:
        _propose(bad, id="CHILD", parents=["NEVER1"])

    # Then the two refusals read the same apart from the id: nothing leaks
    assert "'H1'" in str(hidden.value)
    assert str(hidden.value).replace("'H1'", "'<id>'") == str(unknown.value).replace(
        "'NEVER1'", "'<id>'"
    )


def test_expired_token_is_refused_on_the_sessions_next_call(bad: Bad) -> None:
    # Given a session whose token expires in an hour, working now
    assert bad.expiring.read(SCOPE, "claim.m1").value == "M1"

    # When just under the hour passes it still works; at the hour it is refused
    bad.clock.advance(minutes=59, seconds=59)
    assert bad.expiring.get("M1").status == "ACCEPTED"
    bad.clock.advance(seconds=1)
    with pytest.raises(AuthenticationError) as info:
        bad.expiring.get("M1")
    assert "'agent-1'" in str(info.value)
    assert "expired" in str(info.value)


def test_revoked_token_is_refused_on_the_sessions_next_call(bad: Bad) -> None:
    # Given a working session for a fresh token
    token = bad.admin.issue_token("agent-1")
    session = bad.ledger.authenticate(token)
    assert session.get("M1").id == "M1"

    # When the admin revokes the token
    bad.admin.revoke_token(token)

    # Then the very next call is refused, and so is authenticating again
    with pytest.raises(AuthenticationError, match="revoked"):
        session.get("M1")
    with pytest.raises(AuthenticationError, match="revoked"):
        bad.ledger.authenticate(token)


# -- corrupt stored bytes (SQLite file) ---------------------------------------------------


def _db_path(ledger_url: str) -> str:
    return ledger_url.removeprefix("sqlite:///")


def _seeded(open_ledger: Callable[..., Ledger]) -> Ledger:
    led = open_ledger()
    admin = led.admin()
    admin.grant("agent-1", scope=SCOPE, roles=["propose", "read"])
    admin.grant("reviewer", scope=SCOPE, roles=["approve", "read"])
    agent = led.authenticate(admin.issue_token("agent-1"))
    reviewer = led.authenticate(admin.issue_token("reviewer"))
    reviewer.accept(agent.propose(scope=SCOPE, claim_key="k", value=1, kind=Kind.FACT, id="F1"))
    return led


def _insert_garbage(path: str, topic: str, state: bytes) -> None:
    with closing(sqlite3.connect(path)) as con:
        con.execute(
            "INSERT INTO stored_events (originator_id, originator_version, topic, state) "
            "VALUES (?, ?, ?, ?)",
            (uuid4().hex, 1, topic, state),
        )
        con.commit()


GARBAGE = {
    "undecodable-bytes": ("ledger.domain:Record.Accepted", b"\xc1\xc1\xc1"),
    "wrong-shape": ("ledger.domain:Record.Accepted", pack(42)),
    "unknown-topic": ("ledger.domain:Record.NoSuchEvent", pack({"actor": "x"})),
}


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("garbage", sorted(GARBAGE))
def test_garbage_in_the_log_is_a_corrupt_event_naming_its_position(
    open_ledger: Callable[..., Ledger], ledger_url: str, garbage: str
) -> None:
    # Given a ledger file and a garbage row slipped into its event table
    led = _seeded(open_ledger)
    digest = led.views_digest()
    garbage_position = led.position + 1
    _insert_garbage(_db_path(ledger_url), *GARBAGE[garbage])
    assert led.position == garbage_position

    # When the views try to catch up, the bad event is reported by position
    with pytest.raises(CorruptEventError) as info:
        led.catch_up()
    assert f"position {garbage_position}" in str(info.value)

    # Then the views are unchanged, and a new write is refused the same way
    assert led.views_digest() == digest
    with pytest.raises(CorruptEventError, match=f"position {garbage_position}"):
        led.admin().grant("newcomer", scope=SCOPE, roles=["read"])
    assert led.position == garbage_position
    assert led.views_digest() == digest


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_rebuild_over_a_corrupt_event_names_it_and_leaves_the_views(
    open_ledger: Callable[..., Ledger], ledger_url: str
) -> None:
    # Given a ledger file with a garbage row after its good events
    led = _seeded(open_ledger)
    token = led.admin().issue_token("agent-1")
    digest = led.views_digest()
    garbage_position = led.position + 1
    _insert_garbage(_db_path(ledger_url), *GARBAGE["undecodable-bytes"])

    # When the views are rebuilt from the log
    with pytest.raises(CorruptEventError) as info:
        led.rebuild()

    # Then the error names the position, and the views are as they were
    assert f"position {garbage_position}" in str(info.value)
    assert led.views_digest() == digest
    # so a token issued before the rebuild still authenticates
    assert led.authenticate(token).principal == "agent-1"


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE stored_events SET state = x'00'",
        "UPDATE stored_events SET topic = 'x' WHERE rowid = 1",
        "DELETE FROM stored_events WHERE rowid = 1",
        "DELETE FROM stored_events",
    ],
)
def test_stored_events_refuse_update_and_delete(
    open_ledger: Callable[..., Ledger], ledger_url: str, statement: str
) -> None:
    # Given a ledger file with some events
    led = _seeded(open_ledger)
    with closing(sqlite3.connect(_db_path(ledger_url))) as con:
        before = con.execute("SELECT rowid, * FROM stored_events ORDER BY rowid").fetchall()

        # When the table is changed in place, the database refuses
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            con.execute(statement)
        con.rollback()

        # Then every stored event is still exactly there
        after = con.execute("SELECT rowid, * FROM stored_events ORDER BY rowid").fetchall()
    assert after == before
    assert len(after) == led.position


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_command_after_a_corrupt_event_is_refused_naming_the_event(
    open_ledger: Callable[..., Ledger], ledger_url: str
) -> None:
    # Given record F1 whose history gains a garbage event behind the ledger's back
    led = _seeded(open_ledger)
    admin = led.admin()
    reviewer = led.authenticate(admin.issue_token("reviewer"))
    digest, position = led.views_digest(), led.position
    with closing(sqlite3.connect(_db_path(ledger_url))) as con:
        con.execute(
            "INSERT INTO stored_events (originator_id, originator_version, topic, state) "
            "VALUES (?, ?, ?, ?)",
            (aggregate_of(led, "F1").hex, 3, *GARBAGE["undecodable-bytes"]),
        )
        con.commit()

    # When a command runs, the views refuse to apply the event it did not write
    # (every command first brings the views up to the log), naming its position
    with pytest.raises(CorruptEventError, match=rf"position {position + 1} was not appended"):
        reviewer.revoke("F1", reason="x")

    # And nothing else was written
    assert led.position == position + 1
    assert led.views_digest() == digest


class _NoRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


@pytest.mark.parametrize("returned", [False, True, 0, "", "  ", ["no"], _NoRepr()])
def test_an_acceptance_check_passes_only_by_returning_none(
    open_ledger: Callable[..., Ledger], returned: object
) -> None:
    # A check written as a predicate must not let a record through on False (nor
    # refuse it with "True" as its reason): only None passes.
    def predicate(view: Any) -> Any:
        return returned

    led = open_ledger(acceptance_checks=[predicate])
    admin = led.admin()
    admin.grant("agent-1", scope=SCOPE, roles=["propose", "read"])
    admin.grant("reviewer", scope=SCOPE, roles=["approve", "read"])
    agent = led.authenticate(admin.issue_token("agent-1"))
    reviewer = led.authenticate(admin.issue_token("reviewer"))
    rid = agent.propose(SCOPE, "k", 1, Kind.FACT, id="P1")
    before = led.position
    with pytest.raises(AcceptanceCheckError, match=r"returned .*None to pass or a reason string"):
        reviewer.accept(rid)
    assert led.position == before
    assert str(reviewer.get(rid).status) == "CANDIDATE"


@pytest.mark.parametrize("option", ["create", "catch_up"])
def test_open_takes_true_or_false_not_a_string(tmp_path: Any, option: str) -> None:
    path = tmp_path / "l.db"
    with pytest.raises(InvalidInputError, match=rf"{option} must be True or False, got 'false'"):
        Ledger.open(f"sqlite:///{path}", **{option: "false"})
    assert not path.exists()


def test_an_as_of_session_proves_what_it_had_and_previews_no_revocation(bad: Bad) -> None:
    # As of before E0's revocation, E0 had two events (proposed, accepted).
    events = bad.reviewer.audit("E0").events
    accepted = next(e for e in events if e.type == "Accepted")
    then = bad.reviewer.as_of(position=accepted.position)
    proofs = then.prove("E0")
    assert [p.position for p in proofs] == [e.position for e in events[:2]]
    assert all(p.verify() for p in proofs)
    assert len(bad.reviewer.prove("E0")) == len(events) > 2
    # (in the current tree, as every proof is): checked against a digest one trusts,
    # a proof holds for that tree's root only, not for the root it carries alone
    now = bad.ledger.digest()
    assert all(p.verify(now.root) and p.verify(now.root.upper()) for p in proofs)
    assert not any(p.verify("00" * 32) for p in proofs)
    # the digest itself, or its root's bytes, serve as well; anything else is named
    assert all(p.verify(now) and p.verify(bytes.fromhex(now.root)) for p in proofs)
    assert not any(p.verify(b"\0" * 32) for p in proofs)
    for wrong in (now.root[:-2], b"\0" * 31, "zz" * 32, 42):
        with pytest.raises(InvalidInputError, match="trusted_root must be a LogDigest"):
            proofs[0].verify(wrong)  # type: ignore[arg-type]
    with pytest.raises(ReadOnlyError, match=r"preview_revoke refused: this session is read-only"):
        then.preview_revoke("E0")


@pytest.mark.parametrize(
    "text", ["nope", "1:1:" + "zz" * 32, "1:1:" + "ab" * 32 + "x" * 100_000, 7, None]
)
def test_a_digest_that_is_not_one_is_refused_by_name_not_with_a_raw_error(text: object) -> None:
    from ledger import LogDigest
    from ledger.errors import InvalidInputError

    with pytest.raises(InvalidInputError) as refused:
        LogDigest.parse(text)  # type: ignore[arg-type]
    message = str(refused.value)
    assert len(message) < 400 and ("digest" in message)


def test_a_huge_key_or_heads_path_is_quoted_cut(bad: Bad) -> None:
    from ledger.errors import InvalidHeadError, InvalidKeyError

    huge = "k" * 100_000
    with pytest.raises(InvalidKeyError) as key_refused:
        bad.ledger.signed_head(huge)
    with pytest.raises(InvalidHeadError) as heads_refused:
        bad.ledger.verify(heads=huge, public_key=huge)
    for message in (str(key_refused.value), str(heads_refused.value)):
        assert len(message) < 400 and "(100000 characters)" in message, message[:300]
