"""The README's code blocks run, and its two set-up-and-go commands stay true."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger import Ledger, Status
from ledger.graph import STATUS_COLOURS

from .conftest import Clock

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_python_block_runs(
    index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"readme_block_{index}"}
    exec(compile(BLOCKS[index], f"README.md block {index}", "exec"), namespace)
    assert "led" in namespace


def test_readme_has_python_examples() -> None:
    assert len(BLOCKS) >= 2


def test_readme_has_exactly_two_set_up_and_go_commands() -> None:
    text = README.read_text()
    section = text.split("## Set up and go", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    assert len(commands) == 2
    assert commands[0].strip().endswith("provledger demo")
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command() -> None:
    text = README.read_text()
    section = text.split("## Set up and go", 1)[1].split("\n## ", 1)[0]
    test_command = re.findall(r"```sh\n(.*?)```", section, flags=re.S)[1].strip()
    ci = (README.parent / ".ci" / "run").read_text()
    assert test_command in ci


def test_the_compatibility_promise_names_every_upcast_event() -> None:
    from eventsourcing.domain import DomainEvent

    from ledger import domain

    versioned = sorted(
        f"{outer.__name__}.{inner.__name__}"
        for outer in vars(domain).values()
        if isinstance(outer, type) and outer.__module__ == domain.__name__
        for inner in vars(outer).values()
        if isinstance(inner, type)
        and issubclass(inner, DomainEvent)
        and getattr(inner, "class_version", 1) > 1
    )
    promise = README.read_text().split("**Compatibility promise.**", 1)[1].split("\n\n", 1)[0]
    named = sorted(set(re.findall(r"`(\w+\.\w+)`", promise)))
    assert versioned and named == versioned


def test_the_architecture_picture_names_files_that_exist_and_is_drawn_from_its_source() -> None:
    root = README.parent
    source = (root / "docs" / "architecture.dot").read_text()
    drawn = (root / "docs" / "architecture.svg").read_text()
    named = re.findall(r"(?:\\n|, )((?:ledger|projections)/[\w/.]*)", source)
    assert len(set(named)) >= 15
    missing = sorted({path for path in named if not (root / path).exists()})
    assert missing == [], f"docs/architecture.dot names what is not there: {missing}"
    # The picture is the source's rendering (dot -Tsvg docs/architecture.dot -o
    # docs/architecture.svg): each path and each step it draws is in it.
    steps = re.findall(r'"(\d\. [^\\"]+)', source)
    assert len(steps) == 3
    stale = sorted({text for text in [*named, *steps] if text not in drawn})
    assert stale == [], f"docs/architecture.svg is older than its source: {stale}"
    assert "](docs/architecture.svg)" in README.read_text()


def _status_machine_edges() -> list[tuple[str, str, str]]:
    source = (README.parent / "docs" / "status-machine.dot").read_text()
    return re.findall(r'^\s*(\w+) -> (\w+) \[label="([^"]+)"\];', source, flags=re.M)


class _Drive:
    """A memory ledger on a clock of its own, an agent proposing in ``p`` and a
    reviewer approving there: each drawn transition is made happen to a record."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.ledger = Ledger.open("memory:", clock=self.clock)
        admin = self.ledger.admin()
        admin.grant("agent", scope="p", roles=["propose", "read"])
        admin.grant("boss", scope="p", roles=["approve", "read"])
        self.agent = self.ledger.authenticate(admin.issue_token("agent"))
        self.boss = self.ledger.authenticate(admin.issue_token("boss"))
        self.n = 0

    def propose(self, accepted: bool = False, **kwargs: Any) -> str:
        self.n += 1
        kwargs.setdefault("claim_key", f"k{self.n}")
        rid = self.agent.propose(scope="p", value=self.n, kind="fact", **kwargs)
        if accepted:
            self.boss.accept(rid)
        return rid

    def status(self, rid: str) -> str:
        return str(self.boss.get(rid).status.value)

    def made(self, source: str, label: str) -> tuple[str, str]:
        """(the status a record had, the status it has) once ``label`` happened to
        a record in status ``source``."""
        if source == "start":
            return "start", self.status(self.propose())
        basis = self.propose(accepted=True)
        if label == "revalidate on a new basis (its basis expired)":
            expiring = self.propose(accepted=True, expires=self.clock.now + timedelta(hours=1))
            rid = self.propose(accepted=True, parents=[expiring])
            self.clock.advance(hours=2)
            before = self.status(rid)
            self.boss.revalidate(rid, parents=[self.propose(accepted=True)])
            return before, self.status(rid)
        if label.startswith("revalidate"):
            rid = self.propose(accepted=label == "revalidate (accepted before)", parents=[basis])
            self.boss.revoke(basis, reason="wrong")
            before = self.status(rid)
            self.boss.revalidate(rid, parents=[self.propose(accepted=True)])
            return before, self.status(rid)
        rid = self.propose(accepted=source != "CANDIDATE", parents=[basis])
        if source == "STALE":
            self.boss.revoke(basis, reason="wrong")
        before = self.status(rid)
        if label.startswith("accept"):
            self.boss.accept(rid)
        elif label == "reject":
            self.boss.reject(rid, reason="no")
        elif label == "revoke":
            self.boss.revoke(rid, reason="wrong")
        elif label == "a dependency revoked":
            self.boss.revoke(basis, reason="wrong")
        elif label == "a new version accepted":
            claim = self.boss.get(rid).claim_key
            newer = self.propose(claim_key=claim, supersedes=rid)
            if source == "CANDIDATE":  # a version of a version: the line is replaced
                newer = self.propose(claim_key=claim, supersedes=newer)
            self.boss.accept(newer)
        else:
            raise AssertionError(f"docs/status-machine.dot: no way to make {label!r} happen")
        return before, self.status(rid)


@pytest.mark.parametrize("edge", _status_machine_edges(), ids="/".join)
def test_each_transition_the_status_machine_picture_draws_happens(
    edge: tuple[str, str, str],
) -> None:
    source, target, label = edge
    drive = _Drive()
    try:
        assert drive.made(source, label) == (source, target)
    finally:
        drive.ledger.close()


def test_the_status_machine_picture_is_drawn_from_its_source_in_the_ledgers_colours() -> None:
    edges = _status_machine_edges()
    assert len(edges) == 14
    source = (README.parent / "docs" / "status-machine.dot").read_text()
    drawn = (README.parent / "docs" / "status-machine.svg").read_text()
    for status in Status:
        fill, border = STATUS_COLOURS[status]
        node = f'{status.value} [fillcolor="{fill}", color="{border}"];'
        assert node in source
        assert f'fill="{fill}" stroke="{border}"' in drawn, status
    # Every label drawn, as dot -Tsvg docs/status-machine.dot writes it
    stale = sorted({label for _, _, label in edges if label not in drawn})
    assert stale == [], f"docs/status-machine.svg is older than its source: {stale}"
    assert "](docs/status-machine.svg)" in README.read_text()
