"""Attacks on a ledger by someone with write access to its database, and what catches them.

A *scene* (:func:`build_scene`) is a small ledger whose operator kept signed
tree heads elsewhere: E1 (evidence) and M1 (a fact resting on it) accepted, F1
and G1 candidates, a head kept; then E1 revoked (M1 STALE), one more proposal,
and a second head kept. Each attack in :data:`ATTACKS` then edits the database
directly, with the append-only triggers dropped, as an attacker holding the
database (not the signing key) could, and covers its tracks where it can
(rebuilding the views, removing forged rows). :func:`detect` runs
``Ledger.verify`` with and without the kept heads.

:data:`EXPECTED` is what docs/evidence.md promises for each attack:
``(detected with kept heads, detected without)``. ``tests/test_evidence.py``
asserts it on SQLite and PostgreSQL; ``scripts/soak.py --campaign tamper``
repeats the attacks on random victims and prints the table as measured.
"""

from __future__ import annotations

import contextlib
import random
import re
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from ledger import Kind, Ledger, Session, merkle
from ledger.access import hash_token
from ledger.domain import Record
from ledger.errors import CorruptEventError
from ledger.heads import generate_key, publish_head
from ledger.merkle import Verification
from ledger.persistence import resolve_url

from .conftest import aggregate_of


class Raw:
    """Direct SQL on the ledger's database, as an attacker with write access has.

    Statements use ``?`` placeholders, unqualified ``pl_…`` table names, ``EVENTS``
    for the stored events table and ``POS`` for its position column. Every call
    first drops the append-only triggers (whoever holds the database can).
    """

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        backend = resolve_url(ledger.url)
        self.backend = backend.kind
        if backend.kind == "sqlite":
            assert backend.path is not None
            self.path = backend.path
            self.events, self.pos = "stored_events", "rowid"
        elif backend.kind == "postgresql":
            self.env = backend.env
            self.schema = parse_qs(urlparse(ledger.url).query).get("schema", ["public"])[-1]
            self.events, self.pos = f"{self.schema}.provledger_events", "notification_id"
        else:
            raise ValueError("attacks need a database another connection can open")

    def _sql(self, sql: str) -> str:
        sql = sql.replace("EVENTS", self.events).replace("POS", self.pos)
        if self.backend == "postgresql":
            sql = re.sub(r"\bpl_", f"{self.schema}.pl_", sql).replace("?", "%s")
        return sql

    def connect(self, autocommit: bool = False) -> Any:
        """A psycopg connection of its own to the PostgreSQL ledger's database."""
        import psycopg

        env = self.env
        return psycopg.connect(
            host=env["POSTGRES_HOST"],
            port=int(env["POSTGRES_PORT"]),
            dbname=env["POSTGRES_DBNAME"],
            user=env["POSTGRES_USER"],
            password=env["POSTGRES_PASSWORD"] or None,
            autocommit=autocommit,
        )

    def run(self, *statements: tuple[str, Sequence[Any]]) -> list[list[tuple[Any, ...]]]:
        """Run ``statements`` in one transaction; the rows each returned."""
        out: list[list[tuple[Any, ...]]] = []
        if self.backend == "sqlite":
            con = sqlite3.connect(self.path)
            try:
                for table in ("stored_events", "pl_merkle_leaves", "pl_commits"):
                    for what in ("update", "delete"):
                        con.execute(f"DROP TRIGGER IF EXISTS {table}_no_{what}")
                for sql, params in statements:
                    out.append([tuple(r) for r in con.execute(self._sql(sql), tuple(params))])
                con.commit()
            finally:
                con.close()
            return out
        with self.connect() as conn:
            for table in ("provledger_events", "pl_merkle_leaves", "pl_commits"):
                for name in ("append_only", "no_truncate"):
                    conn.execute(f"DROP TRIGGER IF EXISTS {table}_{name} ON {self.schema}.{table}")
            for sql, params in statements:
                cursor = conn.execute(self._sql(sql), tuple(params))
                out.append([tuple(r) for r in cursor.fetchall()] if cursor.description else [])
        return out

    def one(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of one statement."""
        return self.run((sql, params))[0]


@dataclass
class Scene:
    """A ledger under attack, with the heads its operator kept elsewhere."""

    ledger: Ledger
    raw: Raw
    agent: Session
    agent2: Session
    reviewer: Session
    reviewer_token: str
    key: Path
    public_key: Path
    heads: Path
    clock: Callable[[], datetime]


def build_scene(
    ledger: Ledger, directory: Path, clock: Callable[[], datetime], noise: int = 0
) -> Scene:
    """The scene of the module docstring on ``ledger`` (heads and key in ``directory``);
    ``noise`` more records proposed by agent-2 (every other one accepted) before E1
    is revoked, so the attacked positions vary."""
    admin = ledger.admin()
    admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
    admin.grant("agent-2", scope="proj-a", roles=["propose", "read"])
    admin.grant("reviewer", scope="proj-a", roles=["approve", "read", "audit", "deliver"])
    reviewer_token = admin.issue_token("reviewer")
    agent = ledger.authenticate(admin.issue_token("agent-1"))
    agent2 = ledger.authenticate(admin.issue_token("agent-2"))
    reviewer = ledger.authenticate(reviewer_token)
    agent.capture(scope="proj-a", uri="https://docs.test/retries", content=b"retries ok", id="E1")
    reviewer.accept("E1")
    agent.propose(
        scope="proj-a",
        claim_key="api.retry_safe",
        value=True,
        kind=Kind.FACT,
        parents=["E1"],
        id="M1",
    )
    reviewer.accept("M1")
    agent.propose(scope="proj-a", claim_key="api.timeout", value=30, kind=Kind.FACT, id="F1")
    agent2.propose(scope="proj-a", claim_key="api.limit", value=100, kind=Kind.FACT, id="G1")
    key = directory / "ledger-key"
    generate_key(key)
    heads = directory / "heads.jsonl"
    publish_head(ledger, key, heads)
    for n in range(noise):
        agent2.propose(scope="proj-a", claim_key=f"noise.{n}", value=n, kind=Kind.FACT, id=f"N{n}")
        if n % 2 == 0:
            reviewer.accept(f"N{n}")
    reviewer.revoke("E1", reason="the page changed")
    agent.propose(scope="proj-a", claim_key="api.region", value="eu", kind=Kind.FACT, id="F2")
    publish_head(ledger, key, heads)
    return Scene(
        ledger=ledger,
        raw=Raw(ledger),
        agent=agent,
        agent2=agent2,
        reviewer=reviewer,
        reviewer_token=reviewer_token,
        key=key,
        public_key=Path(f"{key}.pub"),
        heads=heads,
        clock=clock,
    )


def detect(scene: Scene, with_heads: bool) -> Verification:
    """``verify`` as an auditor runs it: with the kept heads and key, or without."""
    if with_heads:
        return scene.ledger.verify(heads=scene.heads, public_key=scene.public_key)
    return scene.ledger.verify()


# -- the attacks -------------------------------------------------------------------------


def _last_positions(scene: Scene, n: int) -> list[int]:
    rows = scene.raw.one(f"SELECT POS FROM EVENTS ORDER BY POS DESC LIMIT {int(n)}")
    return sorted(int(r[0]) for r in rows)


def truncate(scene: Scene, rebuild: bool = True, n: int = 3) -> str:
    """Delete the last ``n`` events and their leaves (undoing the revocation of E1);
    rebuild the views so they agree with the shortened log."""
    victims = _last_positions(scene, n)
    marks = ", ".join("?" for _ in victims)
    scene.raw.run(
        (f"DELETE FROM EVENTS WHERE POS IN ({marks})", victims),
        (f"DELETE FROM pl_merkle_leaves WHERE position IN ({marks})", victims),
        (f"DELETE FROM pl_commits WHERE last_pos IN ({marks})", victims),
    )
    if rebuild:
        scene.ledger.rebuild()
    return f"deleted the events at positions {victims} and their leaves"


def append_event(scene: Scene, event: Any) -> int:
    """Append a well-formed event with a correct Merkle leaf, then let the views
    catch up (as the next open would); returns its position."""
    stored = scene.ledger.engine.app.mapper.to_stored_event(event)
    oid = stored.originator_id
    key = oid.hex if scene.raw.backend == "sqlite" else oid
    (row,) = scene.raw.run(
        (
            "INSERT INTO EVENTS (originator_id, originator_version, topic, state) "
            "VALUES (?, ?, ?, ?) RETURNING POS",
            (key, stored.originator_version, stored.topic, stored.state),
        )
    )[0]
    position = int(row[0])
    leaf = merkle.leaf_hash(
        merkle.leaf_data(position, oid, stored.originator_version, stored.topic, stored.state)
    )
    scene.raw.one("INSERT INTO pl_merkle_leaves (position, leaf) VALUES (?, ?)", (position, leaf))
    scene.ledger.catch_up()
    return position


def _version(scene: Scene, record_id: str) -> int:
    oid = aggregate_of(scene.ledger, record_id)
    key = oid.hex if scene.raw.backend == "sqlite" else oid
    rows = scene.raw.one("SELECT MAX(originator_version) FROM EVENTS WHERE originator_id=?", (key,))
    return int(rows[0][0])


def forge(scene: Scene, record_id: str, event_class: Any, **fields: Any) -> int:
    """Append the record's next event, of ``event_class`` with ``fields``, with a
    recomputed leaf (:func:`append_event`); returns its position."""
    event = event_class(
        originator_id=aggregate_of(scene.ledger, record_id),
        originator_version=_version(scene, record_id) + 1,
        timestamp=scene.clock(),
        **fields,
    )
    return append_event(scene, event)


def forged_accept(scene: Scene, actor: str, record_id: str = "F1") -> str:
    """Append ``Accepted`` of a candidate by ``actor`` with a recomputed leaf."""
    position = forge(scene, record_id, Record.Accepted, actor=actor, note="")
    return f"appended Accepted of {record_id} by {actor!r} at position {position}"


def rewrite_before_head(scene: Scene) -> str:
    """Rewrite the revocation's reason in the stored event and its leaf (a position
    the newest kept head covers); rebuild the views from the rewritten log."""
    oid = aggregate_of(scene.ledger, "E1")
    key = oid.hex if scene.raw.backend == "sqlite" else oid
    position, version, topic, state = scene.raw.one(
        "SELECT POS, originator_version, topic, state FROM EVENTS WHERE originator_id=? "
        "ORDER BY originator_version DESC LIMIT 1",
        (key,),
    )[0]
    state = bytes(state)
    forged = state.replace(b"the page changed", b"the page is fine")  # same length
    assert forged != state
    leaf = merkle.leaf_hash(merkle.leaf_data(int(position), oid, int(version), str(topic), forged))
    scene.raw.run(
        ("UPDATE EVENTS SET state=? WHERE POS=?", (forged, position)),
        ("UPDATE pl_merkle_leaves SET leaf=? WHERE position=?", (leaf, position)),
    )
    scene.ledger.rebuild()
    return f"rewrote the event at position {position} and its leaf"


def view_edit(scene: Scene) -> str:
    """``UPDATE pl_records SET status='ACCEPTED'`` on the STALE record M1."""
    scene.raw.one(
        "UPDATE pl_records SET status='ACCEPTED', cause_root=NULL, reason=NULL "
        "WHERE record_id='M1' AND to_pos IS NULL"
    )
    return "set M1 (STALE) to ACCEPTED in pl_records"


def forged_grant(scene: Scene, remove_rows: bool = True) -> str:
    """Forge token and grant rows for a 'ghost' principal, accept G1 as the ghost
    through the library (a genuine leaf), then remove the forged rows."""
    token = "plt_" + uuid.uuid4().hex
    position = scene.ledger.position
    scene.raw.run(
        (
            "INSERT INTO pl_tokens (token_hash, subject, issued_pos, issued_at) "
            "VALUES (?, 'ghost', ?, 0)",
            (hash_token(token), position),
        ),
        *(
            (
                "INSERT INTO pl_grants (subject, scope, role, from_pos, granted_at, granted_by) "
                "VALUES ('ghost', 'proj-a', ?, ?, 0, 'admin')",
                (role, position),
            )
            for role in ("approve", "read")
        ),
    )
    scene.ledger.authenticate(token).accept("G1")
    if remove_rows:
        scene.raw.run(
            ("DELETE FROM pl_tokens WHERE subject='ghost'", ()),
            ("DELETE FROM pl_grants WHERE subject='ghost'", ()),
        )
    return "forged pl_tokens/pl_grants rows for 'ghost', who accepted G1" + (
        "; rows removed" if remove_rows else ""
    )


def forged_role(scene: Scene) -> str:
    """Forge a ``pl_grants`` row giving agent-1 'approve'; agent-1 accepts G1."""
    scene.raw.one(
        "INSERT INTO pl_grants (subject, scope, role, from_pos, granted_at, granted_by) "
        "VALUES ('agent-1', 'proj-a', 'approve', ?, 0, 'admin')",
        (scene.ledger.position,),
    )
    scene.agent.accept("G1")
    scene.raw.one("DELETE FROM pl_grants WHERE subject='agent-1' AND role='approve'")
    return "forged an 'approve' row for agent-1, who accepted G1; row removed"


def delete_bytes(scene: Scene) -> str:
    """Delete E1's captured bytes from the snapshot store without an erasure."""
    scene.raw.one("DELETE FROM pl_snapshots")
    return "deleted the snapshot bytes without an erasure event"


def untyped_event(scene: Scene) -> str:
    """Append (recomputed leaves) an event of ``Record.Event`` itself, a type no command
    writes, to the REVOKED E1, then ``Accepted`` of E1 by the real approver: without a
    rule for the first, the status machine would not know E1 is REVOKED."""
    position = forge(scene, "E1", Record.Event)
    forged_accept(scene, "reviewer", "E1")
    return f"appended an untyped Record.Event of E1 at position {position}, then Accepted of E1"


def _remove_version(scene: Scene, rid: str, version: int) -> int:
    """Delete version ``version`` of ``rid``'s events and its leaf, and rebuild the
    views; its log position."""
    oid = aggregate_of(scene.ledger, rid)
    key = oid.hex if scene.raw.backend == "sqlite" else oid
    (row,) = scene.raw.one(
        "SELECT POS FROM EVENTS WHERE originator_id=? AND originator_version=?", (key, version)
    )
    position = int(row[0])
    scene.raw.run(
        ("DELETE FROM EVENTS WHERE POS=?", (position,)),
        ("DELETE FROM pl_merkle_leaves WHERE position=?", (position,)),
    )
    scene.ledger.rebuild()
    return position


def event_removed(scene: Scene) -> str:
    """Delete M1's acceptance (a version in the middle of its history) and its leaf,
    and rebuild the views: M1 then looks as if it had been marked STALE as a candidate."""
    position = _remove_version(scene, "M1", 2)
    return f"deleted M1's Accepted at position {position} and its leaf, views rebuilt"


def last_event_removed(scene: Scene) -> str:
    """Reject G1 and keep a head, then (after one more proposal) delete that
    rejection, the last event of G1's history, and its leaf, and rebuild the views:
    G1 is a candidate again, and nothing later in the log rested on the rejection."""
    scene.reviewer.reject("G1", reason="no source")
    publish_head(scene.ledger, scene.key, scene.heads)
    scene.agent.propose(scope="proj-a", claim_key="api.zone", value="a", kind=Kind.FACT, id="F4")
    position = _remove_version(scene, "G1", 2)
    return f"deleted G1's Rejected at position {position} and its leaf, views rebuilt"


def unmarked_revocation(scene: Scene) -> str:
    """Propose P1 (accepted) and P2 resting on it, then append (recomputed leaf) a
    ``Revoked`` of P1 by the real approver without the ``MarkedStale`` of P2 that
    every revocation writes with it: P2 would stay usable on a revoked basis."""
    scene.agent.propose(scope="proj-a", claim_key="p1", value=1, kind=Kind.FACT, id="P1")
    scene.reviewer.accept("P1")
    scene.agent.propose(
        scope="proj-a", claim_key="p2", value=2, kind=Kind.FACT, parents=["P1"], id="P2"
    )
    scene.reviewer.accept("P2")
    position = forge(scene, "P1", Record.Revoked, actor="reviewer", reason="forged")
    return f"appended Revoked of P1 at position {position} without marking P2 STALE"


def stale_elsewhere(scene: Scene) -> str:
    """Append (recomputed leaf) a ``MarkedStale`` of the candidate F1, which rests on
    nothing, citing the revoked E1 as its cause, by the real approver: a record
    withdrawn from use by a revocation it has nothing to do with."""
    position = forge(
        scene,
        "F1",
        Record.MarkedStale,
        actor="reviewer",
        cause="E1",
        reason="the page changed",
        superseded_by=None,
    )
    return f"appended MarkedStale of F1 (cause E1) at position {position}"


def unappliable_event(scene: Scene) -> str:
    """Append (recomputed leaf) a ``CorrectionIssued`` of M1 by the real deliverer,
    for a delivery that never was: no view can take it, so the views stay before
    it (and every later open that catches them up fails on it)."""
    position = int(scene.raw.one("SELECT MAX(POS) FROM EVENTS")[0][0]) + 1
    with contextlib.suppress(CorruptEventError):  # the catch-up refuses it
        forge(
            scene,
            "M1",
            Record.CorrectionIssued,
            actor="reviewer",
            correction_id="c-forged",
            delivery_id="d-never",
            note="forged",
            replacement=None,
        )
    return f"appended CorrectionIssued of M1 at position {position} for no delivery"


def revalidate_unexpired(scene: Scene) -> str:
    """Append (recomputed leaf) a ``Revalidated`` of the ACCEPTED P2 onto a new basis
    P3 by the real approver, although nothing it rests on expired: only a record
    whose basis expired may be re-based while ACCEPTED."""
    for rid, parents in (("P1", []), ("P3", []), ("P2", ["P1"])):
        kind = Kind.INFERENCE if parents else Kind.FACT
        scene.agent.propose(
            scope="proj-a", claim_key=f"rb.{rid}", value=1, kind=kind, parents=parents, id=rid
        )
        scene.reviewer.accept(rid)
    position = forge(
        scene, "P2", Record.Revalidated, actor="reviewer", note="forged",
        parents=("P3",), observed=None, status="ACCEPTED",
    )  # fmt: skip
    return f"appended Revalidated of the ACCEPTED P2 onto P3 at position {position}"


def superseded_by_nothing(scene: Scene) -> str:
    """Append (recomputed leaf) a ``Superseded`` of the candidate F1 by the real
    approver, naming a newer record that was never proposed."""
    position = forge(scene, "F1", Record.Superseded, actor="reviewer", by="NOPE")
    return f"appended Superseded of F1 by NOPE at position {position}"


def accept_without_supersession(scene: Scene) -> str:
    """Propose F3, a new version of the candidate F1, then append (recomputed leaf)
    its ``Accepted`` by the real approver without the ``Superseded`` of F1 that
    accepting it writes: reads of the claim would find two rival versions."""
    scene.agent.propose(
        scope="proj-a", claim_key="api.timeout", value=60, kind=Kind.FACT, id="F3",
        supersedes="F1",
    )  # fmt: skip
    position = forge(scene, "F3", Record.Accepted, actor="reviewer", note="")
    return f"appended Accepted of F3 at position {position}, F1 left as it was"


#: Attack name -> (what it does, how to run it on a scene).
ATTACKS: dict[str, tuple[str, Callable[[Scene], str]]] = {
    "truncation": ("truncation of the last 3 events + leaves, views rebuilt", truncate),
    "truncation-views-left": (
        "truncation of the last 3 events + leaves, views left as they were",
        lambda s: truncate(s, rebuild=False),
    ),
    "rewrite-before-head": (
        "rewrite of an event + its leaf before the newest head, views rebuilt",
        rewrite_before_head,
    ),
    "forged-append-authorized": (
        "forged append (recomputed leaf) of Accepted by a real approver, after the newest head",
        lambda s: forged_accept(s, "reviewer"),
    ),
    "forged-append-unauthorized": (
        "forged append (recomputed leaf) of Accepted by its own proposer",
        lambda s: forged_accept(s, "agent-1"),
    ),
    "view-edit": ("UPDATE pl_records SET status='ACCEPTED' on a STALE record", view_edit),
    "forged-grant": (
        "forged pl_grants/pl_tokens rows; the ghost accepts a candidate; rows removed",
        forged_grant,
    ),
    "forged-grant-kept": (
        "forged pl_grants/pl_tokens rows; the ghost accepts a candidate; rows kept",
        lambda s: forged_grant(s, remove_rows=False),
    ),
    "forged-role": ("forged 'approve' row for a real principal, who accepts", forged_role),
    "bytes-deleted": ("evidence bytes deleted without an erasure event", delete_bytes),
    "untyped-event": (
        "forged append of an event of a type no command writes, then Accepted of a REVOKED record",
        untyped_event,
    ),
    "event-removed": (
        "an event in the middle of a record's history deleted with its leaf, views rebuilt",
        event_removed,
    ),
    "last-event-removed": (
        "the last event of a record's history deleted with its leaf, views rebuilt",
        last_event_removed,
    ),
    "unmarked-revocation": (
        "forged append of Revoked by a real approver, without the stale markings it makes",
        unmarked_revocation,
    ),
    "stale-elsewhere": (
        "forged append of MarkedStale by a real approver, of a record not resting on the cause",
        stale_elsewhere,
    ),
    "unappliable-event": (
        "forged append of a correction of a delivery that never was, which no view can take",
        unappliable_event,
    ),
    "revalidate-unexpired": (
        "forged append of Revalidated of an ACCEPTED record onto a new basis, none expired",
        revalidate_unexpired,
    ),
    "superseded-by-nothing": (
        "forged append of Superseded naming a newer record that was never proposed",
        superseded_by_nothing,
    ),
    "accept-without-supersession": (
        "forged append of Accepted of a new version, without the supersession of the old",
        accept_without_supersession,
    ),
}

#: Attack -> (detected with kept heads, detected without): what docs/evidence.md says.
EXPECTED: dict[str, tuple[bool, bool]] = {
    "truncation": (True, False),
    "truncation-views-left": (True, True),
    "rewrite-before-head": (True, False),
    "forged-append-authorized": (False, False),
    "forged-append-unauthorized": (True, True),
    "view-edit": (True, True),
    "forged-grant": (True, True),
    "forged-grant-kept": (True, True),
    "forged-role": (True, True),
    "bytes-deleted": (True, True),
    "untyped-event": (True, True),
    "event-removed": (True, True),
    "last-event-removed": (True, False),
    "unmarked-revocation": (True, True),
    "stale-elsewhere": (True, True),
    "unappliable-event": (True, True),
    "revalidate-unexpired": (True, True),
    "superseded-by-nothing": (True, True),
    "accept-without-supersession": (True, True),
}


def random_victim(rng: random.Random) -> str:
    """An attack name drawn at random (for the soak campaign)."""
    return rng.choice(sorted(ATTACKS))
