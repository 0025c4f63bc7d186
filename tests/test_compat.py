"""A ledger written by provledger 0.1.0 keeps opening and answering the same.

``fixtures/ledger-0.1.0.db`` was written by 0.1.0 (``fixtures/make_v010_ledger.py``)
and ``fixtures/ledger-0.1.0.json`` holds the answers 0.1.0 gave about it. Each test
opens a *copy* with the current code: stored events are never rewritten, and view
tables whose layout changed are rebuilt on open.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ledger import Kind, Ledger, Outcome, Status
from ledger.errors import InvalidInputError, InvalidValueError, StorageError

FIXTURES = Path(__file__).parent / "fixtures"
ANSWERS: dict[str, Any] = json.loads((FIXTURES / "ledger-0.1.0.json").read_text())
EARLY = datetime(2026, 3, 1, tzinfo=UTC)
LATE = datetime(2026, 9, 1, tzinfo=UTC)
AT = {"early": EARLY, "late": LATE}


def _read(session: Any, scope: str, claim: str, at: datetime, context: Any = None) -> dict:
    r = session.read(scope=scope, claim_key=claim, at=at, context=context)
    return {
        "outcome": str(r.outcome),
        "ids": sorted(v.id for v in r.records),
        "values": sorted(repr(v.value) for v in r.records),
    }


@pytest.fixture
def old_ledger(tmp_path: Path) -> Any:
    """A fresh copy of the 0.1.0 file, opened with the current code."""
    path = tmp_path / "ledger-0.1.0.db"
    shutil.copyfile(FIXTURES / "ledger-0.1.0.db", path)
    led = Ledger.open(f"sqlite:///{path}")
    yield led
    led.close()


def _sessions(led: Ledger) -> tuple[Any, Any]:
    tokens = ANSWERS["tokens"]
    return led.authenticate(tokens["agent-1"]), led.authenticate(tokens["reviewer"])


def test_a_0_1_0_ledger_answers_every_question_as_0_1_0_did(old_ledger: Ledger) -> None:
    agent, reviewer = _sessions(old_ledger)
    assert old_ledger.position == ANSWERS["position"]
    for rid, status in ANSWERS["status"].items():
        view = reviewer.get(rid)
        assert view.status == status, rid
        assert list(view.parents) == ANSWERS["parents"][rid], rid
        assert list(view.observed) == ANSWERS["observed"][rid], rid
        assert [e.type for e in reviewer.audit(rid).events] == ANSWERS["audit"][rid], rid
    for key, expected in ANSWERS["reads"].items():
        where, when = key.rsplit("@", 1)
        scope, claim = where.split("/", 1)
        assert _read(agent, scope, claim, AT[when]) == expected, key
    for when, expected in ANSWERS["conditioned_reads"].items():
        got = _read(agent, "proj-a", "api.retry_safe", AT[when], {"api_version": "v2"})
        assert got == expected, when
    then = reviewer.as_of(position=ANSWERS["before_revocation"])
    assert (
        _read(then, "proj-a", "api.retry_safe", EARLY, {"api_version": "v2"})
        == (ANSWERS["as_of_reads"]["api.retry_safe"])
    )
    assert _read(then, "proj-a", "report.weekly", EARLY) == ANSWERS["as_of_reads"]["report.weekly"]
    assert (
        sorted(d.delivery.delivery_id for d in reviewer.corrections_due())
        == (ANSWERS["corrections_due"])
    )
    assert reviewer.snapshot(ANSWERS["snapshot_e1"]) == b"retries ok"


def test_a_0_1_0_ledger_verifies_against_its_old_digest_and_rebuilds_to_equal_views(
    old_ledger: Ledger, tmp_path: Path
) -> None:
    # Its views were rebuilt in the current layout on open: the old id map is gone.
    with sqlite3.connect(tmp_path / "ledger-0.1.0.db") as db:
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
    assert "pl_records" in tables and "pl_record_ids" not in tables
    assert old_ledger.verify().ok
    assert old_ledger.verify(against=ANSWERS["digest"]).ok
    assert str(old_ledger.digest()) == ANSWERS["digest"]
    report = old_ledger.rebuild()
    assert report.matched
    agent, _ = _sessions(old_ledger)
    assert _read(agent, "proj-b", "bulk.004", EARLY) == ANSWERS["reads"]["proj-b/bulk.004@early"]


def test_a_0_1_0_ledger_takes_new_writes_and_still_extends_its_old_digest(
    old_ledger: Ledger,
) -> None:
    agent, reviewer = _sessions(old_ledger)
    rid = agent.propose(
        scope="proj-a", claim_key="api.after_upgrade", value=1, kind=Kind.FACT, parents=["E2"]
    )
    assert reviewer.get(rid).status == Status.CANDIDATE
    # E2 has expired since (2026-06-01), so a record resting on it cannot be accepted
    # now; one without parents can.
    free = agent.propose(scope="proj-a", claim_key="api.after_upgrade2", value=2, kind=Kind.FACT)
    reviewer.accept(free)
    assert agent.read(scope="proj-a", claim_key="api.after_upgrade2").outcome == Outcome.FOUND
    reviewer.revoke("C1", reason="policy changed")
    assert reviewer.get("C1").status == Status.REVOKED
    assert old_ledger.position > ANSWERS["position"]
    assert old_ledger.verify(against=ANSWERS["digest"]).ok
    assert old_ledger.rebuild().matched


def test_a_0_1_0_ledgers_records_keep_their_hashed_ids_beside_new_time_ordered_ones(
    old_ledger: Ledger,
) -> None:
    from uuid import NAMESPACE_URL, uuid5

    agent, reviewer = _sessions(old_ledger)
    namespace = uuid5(NAMESPACE_URL, "urn:provledger")
    engine = old_ledger.engine
    # 0.1.0 stored each record's events under uuid5 of its name; the rebuilt view
    # finds them there, and every one of them is the record's
    with engine.reading() as c:
        for rid in ANSWERS["status"]:
            oid = engine.aggregate_of(c, rid)
            assert oid == uuid5(namespace, "record:" + rid), rid
            notes = engine.recorder.select_record_events(c, oid)
            assert [n.originator_version for n in notes] == list(range(1, len(notes) + 1))
            assert len(reviewer.audit(rid).events) == len(notes), rid
    # A record proposed now, on an old one, is stored under a version 7 id that
    # sorts after every id made before it, and the two work together
    new = agent.propose(scope="proj-a", claim_key="api.v7", value=7, kind=Kind.FACT)
    child = agent.propose(
        scope="proj-a", claim_key="api.v7c", value=8, kind=Kind.FACT, parents=[new]
    )
    with engine.reading() as c:
        made = [engine.aggregate_of(c, rid) for rid in (new, child)]
    assert [u.version for u in made] == [7, 7]
    assert made[0].hex < made[1].hex
    reviewer.accept(new)
    revoked = reviewer.revoke(new, reason="checked again")
    assert revoked.stale == (child,)
    assert [e.type for e in reviewer.audit(child).events] == ["Proposed", "MarkedStale"]
    assert old_ledger.verify(against=ANSWERS["digest"]).ok
    assert old_ledger.rebuild().matched


def test_a_0_1_0_ledger_opened_without_catch_up_has_its_views_rebuilt_by_the_first_command(
    tmp_path: Path,
) -> None:
    # Given a copy of the 0.1.0 file opened as an audit opens it (views as stored)
    path = tmp_path / "ledger-0.1.0.db"
    shutil.copyfile(FIXTURES / "ledger-0.1.0.db", path)
    with Ledger.open(f"sqlite:///{path}", catch_up=False) as led:
        agent, _ = _sessions(led)
        # (which verify checks as they are: 0.1.0's, though the open made this
        # version's extra tables beside them)
        report = led.verify()
        assert (report.ok, report.checks) == (True, ("log", "authorization", "evidence bytes"))
        # When it takes commands
        led.admin().grant("agent-1", scope="compat-new", roles=["propose", "read"])
        agent.propose("compat-new", "k", 1, Kind.FACT, id="after-audit-open")
        # Then they are applied to views in the current layout
        assert agent.get("after-audit-open").status == Status.CANDIDATE
        assert led.verify().ok
        assert led.rebuild().matched


def test_a_0_1_0_ledger_is_rebuilt_by_the_rebuild_command_as_it_is(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from ledger.cli import main

    path = tmp_path / "ledger-0.1.0.db"
    shutil.copyfile(FIXTURES / "ledger-0.1.0.db", path)
    url = f"sqlite:///{path}"
    rebuilt = CliRunner().invoke(main, ["rebuild", "--url", url])
    assert rebuilt.exit_code == 0 and "views match" in rebuilt.output, rebuilt.output
    verified = CliRunner().invoke(main, ["verify", "--url", url])
    assert verified.exit_code == 0 and "views" in verified.stdout, verified.output


@pytest.mark.parametrize("query", ["?mode=ro", ""], ids=["read-only", "writable"])
def test_a_0_1_0_ledger_left_as_stored_refuses_reads_its_views_cannot_answer(
    tmp_path: Path, query: str
) -> None:
    # Given a copy of the 0.1.0 file opened without catch-up (views as stored)
    path = tmp_path / "ledger-0.1.0.db"
    shutil.copyfile(FIXTURES / "ledger-0.1.0.db", path)
    with Ledger.open(f"sqlite:///{path}{query}", catch_up=False) as led:
        _, reviewer = _sessions(led)
        # When a read needs a column those views lack
        # Then it is refused with the StorageError naming the layout, not an IndexError
        for read in (
            lambda: reviewer.get("E2"),
            lambda: reviewer.audit("E2"),
            lambda: reviewer.records("proj-a"),
            lambda: reviewer.prove("E2"),
            lambda: reviewer.corrections_due(),
        ):
            with pytest.raises(StorageError, match="built by an earlier version"):
                read()


def test_claim_keys_0_1_0_took_are_read_and_take_new_versions_as_stored(tmp_path: Path) -> None:
    # Given a copy of a 0.1.0 ledger holding claim keys no new claim may have now:
    # whitespace at the ends, a tab or a line break inside (a line feed, NEL,
    # U+2028, U+2029), and a decomposed "café" beside a composed one
    answers = json.loads((FIXTURES / "ledger-0.1.0-keys.json").read_text())
    path = tmp_path / "ledger-0.1.0-keys.db"
    shutil.copyfile(FIXTURES / "ledger-0.1.0-keys.db", path)
    with Ledger.open(f"sqlite:///{path}") as led:
        tokens = answers["tokens"]
        agent, reviewer = led.authenticate(tokens["agent-1"]), led.authenticate(tokens["reviewer"])
        # Then each spelling answers as 0.1.0 answered it, in a read and an explanation
        for key, answer in answers["reads"]:
            read = reviewer.read(scope="s", claim_key=key)
            assert [str(read.outcome), sorted(v.id for v in read.records)] == [
                answer["outcome"],
                answer["ids"],
            ], key
            explained = reviewer.explain(scope="s", claim_key=key)
            assert sorted(e.record.id for e in explained.entries) == answer["ids"], key
        # A key no record holds is still refused as any new one is
        with pytest.raises(InvalidValueError, match="leading or trailing whitespace"):
            reviewer.read(scope="s", claim_key=" nothing ")
        with pytest.raises(InvalidValueError, match="contains control characters"):
            reviewer.read(scope="s", claim_key="no\u2028thing")
        # When a new version is proposed under the key as stored, it replaces the old
        for rid, key in answers["keys"].items():
            new = agent.propose(
                scope="s", claim_key=key, value={"v": 2}, kind=Kind.FACT, supersedes=rid
            )
            reviewer.accept(new)
            assert reviewer.get(rid).status == Status.SUPERSEDED
            assert [v.id for v in reviewer.read(scope="s", claim_key=key).records] == [new]
        # and a key spelt otherwise is refused, naming the key as stored
        stored = answers["keys"]["NFD"]
        new_nfd = reviewer.read(scope="s", claim_key=stored).records[0].id
        before = led.position
        with pytest.raises(InvalidInputError, match=re.escape("stored as 'cafe\\u0301'")):
            agent.propose(
                scope="s", claim_key="caf\u00e9", value=3, kind=Kind.FACT, supersedes=new_nfd
            )
        assert led.position == before  # nothing written
        assert led.verify(against=answers["digest"]).ok  # the log extends 0.1.0's
        # A token no longer valid learns nothing of which such keys are held
        token = led.admin().issue_token("reviewer")
        gone = led.authenticate(token)
        led.admin().revoke_token(token)
        for key in ("two\nlines", "no\nthing"):
            with pytest.raises(InvalidValueError, match="contains control characters"):
                gone.read(scope="s", claim_key=key)


def test_opening_a_0_1_0_ledger_says_once_that_its_views_were_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "ledger-0.1.0.db"
    shutil.copyfile(FIXTURES / "ledger-0.1.0.db", path)
    with caplog.at_level(logging.WARNING, logger="provledger.views"):
        Ledger.open(f"sqlite:///{path}").close()
        [said] = [r.getMessage() for r in caplog.records if r.name == "provledger.views"]
        assert f"rebuilt from its {ANSWERS['position']} stored events in layout" in said
        assert "the earlier version can no longer open this ledger" in said
        caplog.clear()
        Ledger.open(f"sqlite:///{path}").close()  # rebuilt already
        Ledger.open(f"sqlite:///{tmp_path / 'new.db'}").close()  # a new ledger
        assert [r for r in caplog.records if r.name == "provledger.views"] == []


@pytest.mark.parametrize("query", ["?mode=ro", ""], ids=["read-only", "writable"])
def test_digest_and_head_of_a_0_1_0_ledger_need_no_views_and_write_none(
    tmp_path: Path, query: str
) -> None:
    # Upgrade step 3 without a kept 0.1.0 digest: take one from the file as it is.
    from click.testing import CliRunner

    from ledger.cli import main
    from ledger.heads import generate_key

    path = tmp_path / "ledger-0.1.0.db"
    shutil.copyfile(FIXTURES / "ledger-0.1.0.db", path)
    before = path.read_bytes()
    url = f"sqlite:///{path}{query}"
    digest = CliRunner().invoke(main, ["digest", "--url", url])
    assert digest.exit_code == 0, digest.output
    assert digest.stdout.strip() == ANSWERS["digest"]
    generate_key(str(tmp_path / "k"))
    head = CliRunner().invoke(main, ["head", "--url", url, "--key", str(tmp_path / "k")])
    assert head.exit_code == 0, head.output
    assert json.loads(head.stdout)["tree_size"] == int(ANSWERS["digest"].split(":")[0])
    if query:
        assert path.read_bytes() == before
    # The views are still 0.1.0's: neither command rebuilt them.
    with Ledger.open(f"sqlite:///{path}?mode=ro", catch_up=False) as led:
        _, reviewer = _sessions(led)
        with pytest.raises(StorageError, match="built by an earlier version"):
            reviewer.get("E2")
