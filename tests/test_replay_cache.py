"""A replay of the whole log (``rebuild``, the view migration on open) runs with a
small page cache on an SQLite file (``LedgerSQLiteRecorder.replaying``), so its
memory does not grow with the log; commands get the writer's full cache back.
Each thread's reading connection has a cache of its own, bigger than SQLite's
default, so a working set of records read again stays in it.

What each step sees is read with ``PRAGMA cache_size`` on the transaction's own
cursor, from inside the projector's methods.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from ledger import Kind, Ledger
from ledger.errors import CorruptEventError
from ledger.persistence.sqlite import READER_CACHE_KIB, REPLAY_CACHE_KIB, WRITER_CACHE_KIB
from projections import claims as queries
from projections.projector import Projector

SCOPE = "proj-a"


def cache_kib(c: Any) -> int:
    """The page cache of the cursor's connection in KiB (SQLite gives -KiB)."""
    c.execute("PRAGMA cache_size")
    return -int(c.fetchone()[0])


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[int]]]:
    """The cache size each of the projector's replay, digest, apply and catch-up
    saw, call by call."""
    seen: dict[str, list[int]] = {"replay": [], "digest": [], "apply": [], "catch_up": []}
    for name in seen:
        original: Callable[..., Any] = getattr(Projector, name)

        def wrapped(
            self: Projector, c: Any, *args: Any, _name: str = name, _f: Any = original, **kw: Any
        ) -> Any:
            seen[_name].append(cache_kib(c))
            return _f(self, c, *args, **kw)

        monkeypatch.setattr(Projector, name, wrapped)
    yield seen


def seeded(url: str) -> Ledger:
    led = Ledger.open(url)
    admin = led.admin()
    admin.grant("agent-1", scope=SCOPE, roles=["propose", "read"])
    admin.grant("reviewer", scope=SCOPE, roles=["approve", "read"])
    agent = led.authenticate(admin.issue_token("agent-1"))
    reviewer = led.authenticate(admin.issue_token("reviewer"))
    for i in range(3):
        reviewer.accept(agent.propose(SCOPE, f"k{i}", i, Kind.FACT, id=f"F{i}"))
    return led


@pytest.fixture
def seeded_file(tmp_path: Path, seen: dict[str, list[int]]) -> Iterator[tuple[Ledger, Path]]:
    """A seeded ledger file (what its creation saw is forgotten)."""
    path = tmp_path / "l.db"
    with closing(seeded(f"sqlite:///{path}")) as led:
        for calls in seen.values():
            calls.clear()
        yield led, path


def propose_one(led: Ledger, n: int) -> None:
    agent = led.authenticate(led.admin().issue_token("agent-1"))
    agent.propose(SCOPE, f"after{n}", n, Kind.FACT)


def test_a_rebuild_reads_and_replays_with_the_small_cache_then_gives_it_back(
    seeded_file: tuple[Ledger, Path], seen: dict[str, list[int]]
) -> None:
    # Given a ledger file whose writer serves commands with its full cache
    led, _ = seeded_file
    propose_one(led, 0)
    assert seen["apply"] and set(seen["apply"]) == {WRITER_CACHE_KIB}

    # When the views are rebuilt
    report = led.rebuild()

    # Then the digest before and the replay ran with the small cache
    assert report.matched
    assert seen["replay"] == [REPLAY_CACHE_KIB]
    assert REPLAY_CACHE_KIB in seen["digest"]
    assert REPLAY_CACHE_KIB < WRITER_CACHE_KIB

    # and the next command has the full cache again
    seen["apply"].clear()
    propose_one(led, 1)
    assert seen["apply"] and set(seen["apply"]) == {WRITER_CACHE_KIB}


def test_a_failed_rebuild_gives_the_cache_back_too(
    seeded_file: tuple[Ledger, Path], seen: dict[str, list[int]]
) -> None:
    # Given a ledger file with an undecodable event after its good ones
    led, path = seeded_file
    digest = led.views_digest()
    with closing(sqlite3.connect(path)) as con:
        con.execute(
            "INSERT INTO stored_events (originator_id, originator_version, topic, state) "
            "VALUES (?, 1, 'ledger.domain:Record.Accepted', x'c1c1c1')",
            ("f" * 32,),
        )
        con.commit()

    # When a rebuild fails on it
    with pytest.raises(CorruptEventError):
        led.rebuild()

    # Then it replayed with the small cache, and the views are as they were
    assert seen["replay"] == [REPLAY_CACHE_KIB]
    assert led.views_digest() == digest
    # and the writer's cache is the full one again: a command's catch-up, which
    # fails on the same event, sees it
    with pytest.raises(CorruptEventError):
        propose_one(led, 1)
    assert seen["catch_up"] == [WRITER_CACHE_KIB]


def test_the_view_migration_on_open_replays_with_the_small_cache(
    tmp_path: Path, seen: dict[str, list[int]]
) -> None:
    # Given a ledger file whose views say they were built with another layout
    path = tmp_path / "l.db"
    with closing(seeded(f"sqlite:///{path}")) as led:
        digest = led.views_digest()
    with closing(sqlite3.connect(path)) as con:
        con.execute("UPDATE pl_tracking SET position = -1 WHERE view = '#layout'")
        con.commit()
    seen["replay"].clear()

    # When it is opened, the views are rebuilt with the small cache
    with closing(Ledger.open(f"sqlite:///{path}")) as led:
        assert seen["replay"] == [REPLAY_CACHE_KIB]
        assert led.views_digest() == digest

        # and commands after get the full cache
        seen["apply"].clear()
        propose_one(led, 1)
        assert seen["apply"] and set(seen["apply"]) == {WRITER_CACHE_KIB}


def test_reads_on_a_ledger_file_run_with_each_threads_own_reader_cache(
    seeded_file: tuple[Ledger, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a ledger file, and the cache each read's statement runs with
    led, _ = seeded_file
    read_with: list[int] = []
    original = queries.for_claim_as

    def for_claim_as(c: Any, *args: Any, **kw: Any) -> Any:
        read_with.append(cache_kib(c))
        return original(c, *args, **kw)

    monkeypatch.setattr(queries, "for_claim_as", for_claim_as)
    agent = led.authenticate(led.admin().issue_token("agent-1"))

    # When a claim is read here and on another thread
    answers = [agent.read(SCOPE, "k0").value]
    other = threading.Thread(target=lambda: answers.append(agent.read(SCOPE, "k1").value))
    other.start()
    other.join()

    # Then both reads found their record, each with the readers' cache, which is
    # bigger than SQLite's default (2 MiB) and smaller than the writer's
    assert answers == [0, 1]
    assert read_with == [READER_CACHE_KIB, READER_CACHE_KIB]
    assert 2_000 < READER_CACHE_KIB < WRITER_CACHE_KIB


@pytest.mark.parametrize("ledger_url", ["memory", "postgres"], indirect=True)
def test_other_backends_rebuild_as_before(open_ledger: Callable[..., Ledger]) -> None:
    # Given a ledger on a backend with nothing to set for a replay
    led = open_ledger()
    led.admin().grant("agent-1", scope=SCOPE, roles=["propose", "read"])
    propose_one(led, 1)
    digest = led.views_digest()

    # When it is rebuilt, the views come back the same
    report = led.rebuild()
    assert report.matched and report.events == led.position
    assert led.views_digest() == digest
