"""Proposals' stored rows are assembled without eventsourcing's mapper
(``ledger.stored``); their bytes must be exactly the mapper's, and the mapper
must read them back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.persistence import Mapper
from eventsourcing.utils import get_topic

from ledger import Kind, Ledger, Status, serialization
from ledger.domain import Record, record_uuid
from ledger.errors import CorruptEventError
from ledger.serialization import MsgpackTranscoder
from ledger.stored import stored_events, stored_proposal
from projections.base import COPY_FROM
from projections.projector import decode_row
from tests.conftest import World

MAPPER: Mapper[Any] = Mapper(MsgpackTranscoder())
AT = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
INDIA = timezone(timedelta(hours=5, minutes=30))

#: Field values a proposal may carry, each unusual in some way.
VARIETY: list[dict[str, Any]] = [
    {},
    {"value": "ünïcødé \x00 text", "claim_key": "ключ"},
    {"value": 2**63 - 1, "kind": "inference"},
    {"value": -(2**63), "expires": AT + timedelta(days=3)},
    {"value": 1.5, "expires": datetime(2027, 1, 1, 9, 30, tzinfo=INDIA)},
    {"value": True, "parents": ("r-a",), "observed": ("r-b", "r-c")},
    {"value": None, "conditions": {"region": "eu", "tier": 2, "nested": {"a": [1, 2]}}},
    {"value": [1, "two", [3.0, None], {"k": "v"}], "run_id": "task-7"},
    {"value": {"b": 1, "a": {"deep": [True, False]}}, "supersedes": "r-old"},
    {"value": b"\x00\xffbytes", "kind": "evidence"},
    {
        "kind": "evidence",
        "evidence": {
            "uri": "https://example.org/page",
            "fetched_at": AT - timedelta(minutes=1),
            "content_hash": "sha256:" + "0" * 64,
            "snapshot_ref": "sha256:" + "0" * 64,
            "size": 12,
        },
    },
    {"value": ("a", 1), "conditions": {"pair": ("x", "y")}},
    {"value": "x" * 70_000},
]


@pytest.fixture(autouse=True)
def one_salt(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every event stored here gets the same salt, so that two encodings of one
    event (the mapper's and the direct one, or a stored event encoded again) can
    be compared byte for byte."""
    monkeypatch.setattr(serialization, "new_salt", lambda: b"\x5a" * 16)


def proposed(n: int, **fields: Any) -> Record.Proposed:
    base: dict[str, Any] = {
        "scope": "proj-a",
        "claim_key": f"claim:{n}",
        "kind": "fact",
        "value": n,
        "actor": "agent-1",
        "expires": None,
        "parents": (),
        "observed": (),
        "conditions": {},
        "evidence": None,
        "run_id": None,
        "supersedes": None,
    }
    return Record.proposed_event(at=AT, record_id=f"r-{n}", **(base | fields))


def test_a_proposals_row_is_the_mappers_byte_for_byte() -> None:
    for n, fields in enumerate(VARIETY):
        event = proposed(n, **fields)
        mine, theirs = stored_proposal(event), MAPPER.to_stored_event(event)
        assert mine.state == theirs.state, fields
        assert mine == theirs
        assert mine.originator_id == record_uuid(f"r-{n}", AT)
        assert mine.topic == get_topic(Record.Proposed)
        back = MAPPER.to_domain_event(mine)
        assert vars(back) == {**vars(event)}


def test_the_aggregates_own_proposal_is_stored_alike() -> None:
    # Record.propose builds its event through eventsourcing's constructor.
    record = Record.propose(
        at=AT,
        record_id="r-own",
        scope="proj-a",
        claim_key="claim",
        kind="fact",
        value={"x": 1},
        actor="agent-1",
        expires=AT + timedelta(hours=1),
        parents=("r-p",),
        observed=(),
        conditions={"c": 1},
        evidence=None,
        run_id=None,
        supersedes=None,
    )
    record.accept("reviewer", "ok", AT)
    events = record.collect_events()
    assert [s.state for s in stored_events(MAPPER, events)] == [
        MAPPER.to_stored_event(e).state for e in events
    ]


def test_a_proposal_with_its_fields_out_of_order_goes_through_the_mapper() -> None:
    event = proposed(1, value={"v": 1})
    reordered: Any = object.__new__(Record.Proposed)
    object.__setattr__(reordered, "__dict__", dict(reversed(list(vars(event).items()))))
    (stored,) = stored_events(MAPPER, [reordered])
    assert stored.state == MAPPER.to_stored_event(reordered).state
    assert stored.state != stored_proposal(event).state  # the order is in the bytes


def test_the_uuid_of_a_record_is_version_7_of_its_proposal_time_and_name() -> None:
    import hashlib

    from ledger.domain import _NAMESPACE

    times = (
        datetime(1970, 1, 1, tzinfo=UTC),
        AT,
        AT + timedelta(microseconds=1),
        AT.astimezone(INDIA) + timedelta(milliseconds=1),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    )
    for rid in ("a", "r-1", "ünïcødé", "x" * 300, "fill-0000001"):
        sha = hashlib.sha1(_NAMESPACE.bytes + b"record:" + rid.encode()).digest()
        for at in times:
            ms, sub = divmod((at - times[0]) // timedelta(microseconds=1), 1000)
            low = int.from_bytes(sha[:8]) & ((1 << 62) - 1)
            theirs = UUID(int=(ms % 2**48) << 80 | 7 << 76 | sub << 64 | 2 << 62 | low)
            mine = record_uuid(rid, at)
            assert (mine, mine.hex, str(mine), hash(mine), mine.version, mine.variant) == (
                theirs,
                theirs.hex,
                str(theirs),
                hash(theirs),
                7,
                theirs.variant,
            )
            assert theirs.variant == "specified in RFC 4122"
    # Later proposals sort later, whatever their names; one name at two times differs.
    made = [record_uuid(rid, at) for at in times[:4] for rid in ("zz", "a", "m")]
    assert [u.hex for u in made[::3]] == sorted(u.hex for u in made[::3])
    assert max(u.hex for u in made[:3]) < min(u.hex for u in made[3:6])
    assert len(set(made)) == len(made)


def _stored_rows(led: Ledger, record_id: str) -> list[Any]:
    with led.engine.reading() as c:
        oid = led.engine.aggregate_of(c, record_id)
        return list(led.engine.recorder.select_record_events(c, oid))


def test_a_batch_is_stored_as_the_mapper_stores_it_and_read_back(world: World) -> None:
    led, agent, reviewer = world.ledger, world.agent, world.reviewer
    now = world.clock.now
    base = agent.propose("proj-a", "base", {"b": 1}, Kind.FACT, conditions={"region": "eu"})
    reviewer.accept(base)
    old = agent.propose("proj-a", "versioned", 1, Kind.FACT)
    reviewer.accept(old)
    evidence = agent.capture("proj-a", "https://example.org/a", b"bytes", fetched_at=now)
    items: list[dict[str, Any]] = [
        {"scope": "proj-a", "claim_key": "plain", "value": "v", "kind": "fact", "id": "b-1"},
        {
            "scope": "proj-a",
            "claim_key": "child",
            "value": {"n": [1, 2.5, None, True]},
            "kind": Kind.INFERENCE,
            "parents": [base, "b-1"],
            "conditions": {"tier": 2},
            "expires": datetime(2027, 1, 1, 9, 30, tzinfo=INDIA),
            "id": "b-2",
        },
        {
            "scope": "proj-a",
            "claim_key": "versioned",
            "value": 2,
            "kind": "fact",
            "supersedes": old,
            "id": "b-3",
        },
        {
            "scope": "proj-b",
            "claim_key": "ключ",
            "value": "ünïcødé",
            "kind": "user_preference",
            "expires": now + timedelta(days=1),
            "id": "b-4",
        },
        {
            "scope": "proj-a",
            "claim_key": "from-evidence",
            "value": 1,
            "kind": "report",
            "parents": [evidence],
            "id": "b-5",
        },
    ]
    ids = agent.propose_many(items)
    with agent.run("task-9") as run:
        run.observe(base)
        ids.append(run.propose("proj-a", "in-run", 3, Kind.INFERENCE, id="b-6"))
    assert ids == ["b-1", "b-2", "b-3", "b-4", "b-5", "b-6"]
    for rid in [base, old, evidence, *ids]:
        (note, *_rest) = _stored_rows(led, rid)
        event = MAPPER.to_domain_event(note)
        # eventsourcing's own encoding of the event it decoded: the same bytes.
        again = MAPPER.to_stored_event(event)
        assert (again.state, again.topic, again.originator_version) == (
            note.state,
            note.topic,
            note.originator_version,
        )
        with led.engine.reading() as c:
            assert again.originator_id == note.originator_id == led.engine.aggregate_of(c, rid)
        assert note.originator_id.version == 7
    with led.engine.reading() as c:
        child = led.engine.load_record(c, "b-2")
        newer = led.engine.load_record(c, "b-3")
        pref = led.engine.load_record(c, "b-4")
        in_run = led.engine.load_record(c, "b-6")
        captured = led.engine.load_record(c, evidence)
    assert child.parents == (base, "b-1")
    assert child.conditions == {"tier": 2, "region": "eu"}
    assert child.expires == datetime(2027, 1, 1, 9, 30, tzinfo=INDIA)
    assert child.expires.utcoffset() == timedelta(hours=5, minutes=30)
    assert child.status == Status.CANDIDATE and child.kind == "inference"
    assert newer.supersedes == old
    assert pref.scope == "proj-b" and pref.claim_key == "ключ" and pref.value == "ünïcødé"
    assert in_run.run_id == "task-9" and in_run.observed == (base,)
    assert captured.evidence is not None and captured.evidence["fetched_at"] == now
    reviewer.accept("b-3")
    assert reviewer.get(old).status == Status.SUPERSEDED


def test_a_mapper_that_compresses_stores_every_event_itself() -> None:
    from eventsourcing.compressor import ZlibCompressor

    zipped: Mapper[Any] = Mapper(MsgpackTranscoder(), compressor=ZlibCompressor())
    event = proposed(1, value={"v": "x" * 100})
    (stored,) = stored_events(zipped, [event])
    assert stored.state == zipped.to_stored_event(event).state
    assert stored.state != stored_proposal(event).state


def test_the_rebuild_decodes_rows_as_the_mapper_does(world: World) -> None:
    led, agent, reviewer = world.ledger, world.agent, world.reviewer
    base = agent.propose("proj-a", "base", {"b": (1, 2)}, Kind.FACT, conditions={"r": "eu"})
    reviewer.accept(base)
    child = agent.propose("proj-a", "child", 1, Kind.FACT, parents=[base])
    reviewer.revoke(base, "withdrawn")
    reviewer.revalidate(child, "rebased", parents=[])
    agent.capture("proj-a", "https://example.org/a", b"bytes")
    with led.engine.reading() as c:
        rows = led.engine.recorder.read_rows_after(c, 0, 10_000)
        notes = led.engine.recorder.read_after(c, 0, 10_000)
    assert len(rows) == len(notes) > 10
    for row, note in zip(rows, notes, strict=True):
        mine, theirs = decode_row(row), MAPPER.to_domain_event(note)
        assert type(mine) is type(theirs)
        assert vars(mine) == vars(theirs)
    position, oid, version, topic, state = rows[-1]
    with pytest.raises(CorruptEventError, match=f"position {position}"):
        decode_row((position, oid, version, topic, state[:-3]))
    with pytest.raises(CorruptEventError, match="cannot be decoded"):
        decode_row((position, oid, version, "ledger.domain:Nowhere", state))
    report = led.rebuild()
    assert report.digest_before == report.digest_after


def test_a_large_batch_is_stored_in_order_at_consecutive_positions(world: World) -> None:
    """A batch large enough to be streamed (``COPY`` on PostgreSQL): the rows are
    the mapper's, in the items' order at consecutive positions, with their Merkle
    leaves and view rows; single commands before and after it take the positions
    next to it."""
    led, agent, reviewer = world.ledger, world.agent, world.reviewer
    base = agent.propose("proj-a", "base", {"b": 1}, Kind.FACT, conditions={"region": "eu"})
    reviewer.accept(base)
    before = led.position
    # Evidence is proposed by capture only; the rest of the variety goes in one batch.
    variety = [
        v
        for v in VARIETY
        if not {"parents", "observed", "supersedes", "evidence"} & set(v)
        and v.get("kind") != "evidence"
    ]
    items: list[dict[str, Any]] = [
        {
            "scope": "proj-a" if n % 3 else "proj-b",
            "claim_key": f"bulk:{n}",
            "value": n,
            "kind": "fact",
            "id": f"bulk-{n:02d}",
            **{k: v for k, v in variety[n % len(variety)].items() if k != "run_id"},
            **({"parents": [base, f"bulk-{n - 1:02d}"]} if n % 4 == 1 else {}),
        }
        for n in range(3 * COPY_FROM)
    ]
    for item in items:
        if "expires" in item:
            item["expires"] = world.clock.now + timedelta(days=2)
    ids = agent.propose_many(items)
    assert ids == [item["id"] for item in items]
    # One event whose view rows (its edges) are as many as a batch's.
    parents = [rid for rid, item in zip(ids, items, strict=True) if item["scope"] == "proj-a"]
    assert len(parents) >= COPY_FROM
    after = agent.propose("proj-a", "after", 1, Kind.FACT, parents=parents)
    assert led.position == before + len(items) + 1
    assert reviewer.get(after).parents == tuple(parents)

    with led.engine.reading() as c:
        rows = led.engine.recorder.read_rows_after(c, before, 10_000)
        made = [led.engine.aggregate_of(c, rid) for rid in [*ids, after]]
    assert [row[0] for row in rows] == list(range(before + 1, before + len(items) + 2))
    assert [UUID(str(row[1])) for row in rows] == made
    for position, oid, version, topic, state in rows:
        event = decode_row((position, oid, version, topic, state))
        again = MAPPER.to_stored_event(event)
        assert (again.originator_version, again.topic, again.state) == (version, topic, state)
    child = reviewer.get("bulk-05")
    assert child.parents == (base, "bulk-04")
    assert child.conditions["region"] == "eu"
    assert reviewer.get("bulk-12").value == items[12]["value"]
    reviewer.accept("bulk-04")
    reviewer.accept("bulk-05")
    report = led.verify()
    assert report.ok, report.problem
    assert report.digest.size == led.position
    rebuilt = led.rebuild()
    assert rebuilt.digest_before == rebuilt.digest_after
