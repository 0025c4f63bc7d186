"""A 0.1.0 ledger continued with new writes answers as the same history does anywhere.

``fixtures/make_v010_ledger.py`` wrote ``fixtures/ledger-0.1.0.db`` with 0.1.0.
Here the same script writes the same history with the current code on memory,
an SQLite file and PostgreSQL; a copy of the 0.1.0 file and those three then take
the same new commands (on the old records too: revocation of old evidence,
revalidation on a new basis, supersession, delivery and correction, a batch with
a bad item, a rebuild, a reopen), and every backend must answer every question
alike, now and as of every position since. The moments of the old events are
left out of the comparison: 0.1.0 read its one-second-a-call clock fewer times.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from ledger import Ledger

from .conftest import Clock, new_pg_schema_url
from .differential_driver import Backend, Driver, Normalizer, Op
from .test_differential import BACKENDS, run_sequence

FIXTURES = Path(__file__).parent / "fixtures"
OLD_IDS = ("E1", "E2", "M1", "R1", "G1", "C1", "C2", "O1", "B000", "B001", "B039")
OLD_CLAIMS = (
    "api.retry_safe",
    "report.weekly",
    "policy.publish",
    "source:https://x.test/doc",
    "source:https://x.test/other",
    "api.version",
    "guess",
    "bulk.000",
    "k0",
)
#: 0.1.0 did not give a record its parents' conditions (SPEC §13.2 came later) and
#: its events are answered as written (SPEC §13.7): R1, a report on M1, holds none.
INHERITED_SINCE = {"R1": {"api_version": "v2"}}
#: The continuation starts after every event of the fixture and after E2 expired.
RESUMED = datetime(2026, 7, 1, tzinfo=UTC)


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "make_v010_ledger", FIXTURES / "make_v010_ledger.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Switch:
    """A clock that reads another one, which can be changed once the ledger is open."""

    def __init__(self) -> None:
        self.to: Callable[[], datetime] = lambda: RESUMED

    def __call__(self) -> datetime:
        return self.to()


class _KeptOpen:
    """The script closes the ledger it wrote; the test goes on using it."""

    def __init__(self, led: Ledger) -> None:
        self._led = led

    def __getattr__(self, name: str) -> Any:
        return getattr(self._led, name)

    def close(self) -> None:
        return None


def _rewrite(url: str, directory: Path) -> tuple[Ledger, _Switch, dict[str, str]]:
    """The fixture's history written by the current code on ``url``; its tokens."""
    script = _script()
    switch = _Switch()
    made: list[Ledger] = []

    class Into:
        @staticmethod
        def open(_: str, clock: Callable[[], datetime]) -> _KeptOpen:
            switch.to = clock
            made.append(Ledger.open(url, clock=switch))
            return _KeptOpen(made[0])

    script.Ledger = Into  # type: ignore[attr-defined]  # the script opens its ledger here
    directory.mkdir()
    script.build(directory)
    answers = json.loads((directory / "ledger-0.1.0.json").read_text())
    return made[0], switch, answers["tokens"]


# fmt: off
CONTINUATION: list[Op] = [
    ("revoke", "bob", 1),  # E2: M1 (revalidated on it by 0.1.0) and O1 go STALE
    ("capture", "alice", "A", 7, 1, None),
    ("accept", "bob", 11),
    ("revalidate", "bob", 2, (11,)),  # M1 on the new capture
    ("revalidate", "bob", 7, (11,)),  # O1 too: its kind needs no basis
    ("propose", "alice", "A", "policy.publish", "publish after review", "fact", (), None, (), 5),
    ("accept", "bob", 12),  # supersedes C1 (delivered by 0.1.0)
    ("correct", "bob", 0, True),
    ("deliver", "bob", 2),
    ("propose_many", "alice", (("B", "bulk.000", 1, (8,), "none"),
                               ("B", "k0", 2, (), "ghost-parent"))),  # nothing written
    ("propose_many", "alice", (("B", "bulk.000", 1, (8,), "none"),
                               ("B", "k0", 2, (14,), "none"))),
    ("accept", "bob", 15),
    ("revoke", "bob", 8),  # B000: the batch's new records go STALE
    ("rebuild",),
    ("reopen",),
    ("advance", 61),
    ("verify",),
    ("revoke", "bob", 11),
    ("run", "alice", "A", ("api.retry_safe", "report.weekly"), "api.version", 3),
    ("propose", "alice", "A", "report.weekly", 4, "report", (2,), None, (), 3),
]
# fmt: on


def test_a_0_1_0_ledger_continued_answers_as_the_same_history_on_every_backend(
    tmp_path: Path,
) -> None:
    clock = Clock()
    clock.now = RESUMED
    driver = Driver(clock=clock, scopes={"A": "proj-a", "B": "proj-b"}, claims=OLD_CLAIMS, page=25)
    try:
        # Given the 0.1.0 file
        path = tmp_path / "ledger-0.1.0.db"
        shutil.copyfile(FIXTURES / "ledger-0.1.0.db", path)
        old = Backend(
            "0.1.0 file", f"sqlite:///{path}", clock, norm=Normalizer(RESUMED, INHERITED_SINCE)
        )
        driver.adopt(old, Ledger.open(old.url, clock=clock))
        tokens = json.loads((FIXTURES / "ledger-0.1.0.json").read_text())["tokens"]
        old.tokens.update(tokens)
        # and the same history written now on every backend
        for name in BACKENDS:
            drop = None
            if name == "memory":
                url = "memory:"
            elif name == "sqlite":
                url = f"sqlite:///{tmp_path / 'now.db'}"
            else:
                url, drop = new_pg_schema_url()
            led, switch, written = _rewrite(url, tmp_path / f"build-{name}")
            switch.to = clock
            b = Backend(name, url, clock, norm=Normalizer(RESUMED))
            b.tokens.update(written)
            driver.adopt(b, led, drop)
        assert len({b.led.position for b in driver.backends}) == 1
        driver.ids.extend(OLD_IDS)
        # When each takes the same new commands, then every answer agrees
        run_sequence(driver, CONTINUATION)
    finally:
        driver.close()
