"""The README's code blocks run, its two set-up-and-go commands stay true, and its
pictures (``docs/*.dot``, rendered to ``docs/*.svg``) show what the ledger does."""

from __future__ import annotations

import contextlib
import html
import itertools
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger import AccessDeniedError, Ledger, LedgerError, Status
from ledger.diagram import STATUS_COLOURS

from .conftest import Clock
from .test_run_signatures import strict_mypy

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


def test_readme_python_blocks_pass_strict_mypy(tmp_path: Path) -> None:
    # Given each README block as a module of its own
    for index, block in enumerate(BLOCKS):
        (tmp_path / f"readme_block_{index}.py").write_text(block)

    # When strict mypy checks them, with the repository's configuration
    done = strict_mypy(tmp_path, tmp_path / "cache")

    # Then a reader's copy type-checks as it stands: no cast, no ignore
    assert done.returncode == 0, done.stdout + done.stderr


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


def _not_drawn(name: str) -> list[str]:
    """What ``docs/NAME.svg`` and its source ``docs/NAME.dot`` do not share: the
    lines of the source's labels the picture does not show, and the arrows one
    draws and the other lacks (empty when the picture is the rendering ``dot
    -Tsvg docs/NAME.dot -o docs/NAME.svg`` of its source)."""
    source = (README.parent / "docs" / f"{name}.dot").read_text()
    drawn = html.unescape((README.parent / "docs" / f"{name}.svg").read_text())
    labels = re.findall(r'label="((?:[^"\\]|\\.)*)"', source)
    lines = [line.replace('\\"', '"') for label in labels for line in label.split("\\n")]
    assert len([line for line in lines if line]) >= 5
    missing = [line for line in lines if line and line not in drawn]
    # And the arrows: dot titles each edge it draws "A->B"
    statements = re.sub(r"//[^\n]*|\[[^\]]*\]", "", source)  # no comments, no attributes
    arrows = {
        f"{a}->{b}"
        for chain in re.findall(r"\w+(?:\s*->\s*\w+)+", statements)
        for a, b in itertools.pairwise(re.findall(r"\w+", chain))
    }
    titles = {title for title in re.findall(r"<title>([^<]*)</title>", drawn) if "->" in title}
    assert len(arrows) >= 5
    return missing + sorted(arrows ^ titles)


def test_the_architecture_picture_names_files_that_exist_and_is_drawn_from_its_source() -> None:
    root = README.parent
    source = (root / "docs" / "architecture.dot").read_text()
    named = re.findall(r"(?:\\n|, )((?:ledger|projections)/[\w/.]*)", source)
    assert len(set(named)) >= 15
    missing = sorted({path for path in named if not (root / path).exists()})
    assert missing == [], f"docs/architecture.dot names what is not there: {missing}"
    assert _not_drawn("architecture") == []
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
        kwargs.setdefault("value", self.n)
        rid = self.agent.propose(scope="p", kind="fact", **kwargs)
        if accepted:
            self.boss.accept(rid)
        return rid

    def status(self, rid: str) -> str:
        return str(self.boss.get(rid).status.value)

    def in_status(self, status: str) -> str:
        """A record in ``status`` (resting on an accepted one), made so the usual way."""
        basis = self.propose(accepted=True)
        rid = self.propose(accepted=status != "CANDIDATE", parents=[basis])
        if status == "STALE":
            self.boss.revoke(basis, reason="wrong")
        elif status == "REVOKED":
            self.boss.revoke(rid, reason="wrong")
        elif status == "SUPERSEDED":
            self.supersede(rid)
        elif status == "REJECTED":
            rid = self.propose()
            self.boss.reject(rid, reason="no")
        assert self.status(rid) == status
        return rid

    def supersede(self, rid: str) -> None:
        """A new version of ``rid`` accepted (of a candidate, a version of a
        version: the line is replaced)."""
        claim = self.boss.get(rid).claim_key
        newer = self.propose(claim_key=claim, supersedes=rid)
        if self.status(rid) == "CANDIDATE":
            newer = self.propose(claim_key=claim, supersedes=newer)
        self.boss.accept(newer)

    def _dependency_goes(self, source: str, how: str) -> tuple[str, str]:
        """(status before, after) of a record in ``source`` resting on a record
        that is then revoked or superseded (``how``); a STALE one is made so by
        a first dependency revoked, the second going ``how``."""
        first, second = self.propose(accepted=True), self.propose(accepted=True)
        rid = self.propose(accepted=source != "CANDIDATE", parents=[first, second])
        if source == "STALE":
            self.boss.revoke(first, reason="wrong")
        before = self.status(rid)
        if how == "revoke":
            self.boss.revoke(second, reason="wrong")
        else:
            self.supersede(second)
        return before, self.status(rid)

    def made(self, source: str, label: str) -> tuple[str, str]:
        """(the status a record had, the status it has) once ``label`` happened to
        a record in status ``source``."""
        if source == "start":
            return "start", self.status(self.propose())
        if label == "revalidate on a new basis (its basis expired)":
            expiring = self.propose(accepted=True, expires=self.clock.now + timedelta(hours=1))
            rid = self.propose(accepted=True, parents=[expiring])
            self.clock.advance(hours=2)
            before = self.status(rid)
            self.boss.revalidate(rid, parents=[self.propose(accepted=True)])
            return before, self.status(rid)
        if label.startswith("revalidate"):
            basis = self.propose(accepted=True)
            rid = self.propose(accepted=label == "revalidate (accepted before)", parents=[basis])
            self.boss.revoke(basis, reason="wrong")
            before = self.status(rid)
            self.boss.revalidate(rid, parents=[self.propose(accepted=True)])
            return before, self.status(rid)
        if "revoked or superseded" in label:
            # Each way the arrow says, to a record of its own: both must get there
            made = {self._dependency_goes(source, how) for how in ("revoke", "supersede")}
            assert len(made) == 1, made
            return made.pop()
        rid = self.in_status(source)
        before = self.status(rid)
        if label == "accept":
            self.boss.accept(rid)
        elif label == "reject":
            self.boss.reject(rid, reason="no")
        elif label == "revoke":
            self.boss.revoke(rid, reason="wrong")
        elif label == "a new version accepted":
            self.supersede(rid)
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
    assert len(edges) == 15
    source = (README.parent / "docs" / "status-machine.dot").read_text()
    drawn = (README.parent / "docs" / "status-machine.svg").read_text()
    for status in Status:
        fill, border = STATUS_COLOURS[status]
        node = f'{status.value} [fillcolor="{fill}", color="{border}"];'
        assert node in source
        assert f'fill="{fill}" stroke="{border}"' in drawn, status
    assert _not_drawn("status-machine") == []
    assert "](docs/status-machine.svg)" in README.read_text()


def _eligibility_nodes() -> list[str]:
    source = (README.parent / "docs" / "eligibility.dot").read_text()
    return re.findall(r"^\s*(\w+) \[label=", source, flags=re.M)


def _stage_refuses(stage: str, drive: _Drive) -> tuple[str, tuple[str, ...], str]:
    """(outcome of a read of a claim whose one record fails only ``stage``, the
    reasons explain gives, the outcome once that stage is passed)."""
    agent, boss = drive.agent, drive.boss
    context: dict[str, Any] = {}
    if stage == "scope":
        # A read where the reader holds no grant is refused
        with pytest.raises(AccessDeniedError, match="lacks role 'read' in scope 'q'"):
            agent.read("q", "c")
        # Granted in q as well: the claim exists in p, and a read in q sees none of it
        drive.ledger.admin().grant("agent", scope="q", roles=["read"])
        drive.propose(accepted=True, claim_key="c")
        missing = agent.read("q", "c")
        assert agent.explain("q", "c").entries == ()
        return missing.outcome.value, (), agent.read("p", "c").outcome.value
    if stage == "status":
        rid = drive.propose(claim_key="c")
        before = agent.read("p", "c").outcome.value, agent.explain("p", "c").entries[0].reasons
        boss.accept(rid)
    elif stage == "time":
        drive.propose(accepted=True, claim_key="c", expires=drive.clock.now + timedelta(hours=1))
        drive.clock.advance(hours=2)
        before = agent.read("p", "c").outcome.value, agent.explain("p", "c").entries[0].reasons
        earlier = drive.clock.now - timedelta(hours=2)
        return (*before, agent.read("p", "c", at=earlier).outcome.value)
    elif stage == "time/ancestor":
        basis = drive.propose(accepted=True, id="B", expires=drive.clock.now + timedelta(hours=1))
        drive.propose(accepted=True, claim_key="c", parents=[basis])
        drive.clock.advance(hours=2)
        before = agent.read("p", "c").outcome.value, agent.explain("p", "c").entries[0].reasons
        earlier = drive.clock.now - timedelta(hours=2)
        return (*before, agent.read("p", "c", at=earlier).outcome.value)
    elif stage == "applicability/kind":
        drive.propose(accepted=True, claim_key="c")
        before = (
            agent.read("p", "c", kinds=["plan"]).outcome.value,
            agent.explain("p", "c", kinds=["plan"]).entries[0].reasons,
        )
    elif stage.startswith("applicability"):
        if stage == "applicability/parent":  # a condition inherited from the parent
            basis = drive.propose(accepted=True, conditions={"env": "prod"})
            drive.propose(accepted=True, claim_key="c", parents=[basis])
        else:
            drive.propose(accepted=True, claim_key="c", conditions={"env": "prod"})
        wrong = {"env": "dev"}
        before = (
            agent.read("p", "c", context=wrong).outcome.value,
            agent.explain("p", "c", context=wrong).entries[0].reasons,
        )
        context = {"env": "prod"}
    else:
        raise AssertionError(f"docs/eligibility.dot: no stage {stage!r}")
    return (*before, agent.read("p", "c", context=context).outcome.value)


@pytest.mark.parametrize(
    ("stage", "why"),
    [
        ("scope", ""),
        ("status", "candidate: not yet approved"),
        ("time", "expired at 2026-01-01T13:00:00+00:00"),
        ("time/ancestor", "ancestor B expired at 2026-01-01T13:00:00+00:00"),
        ("applicability", "condition env='prod' not met: context has 'dev'"),
        ("applicability/parent", "condition env='prod' not met: context has 'dev'"),
        ("applicability/kind", "kind fact not requested"),
    ],
)
def test_each_stage_of_the_eligibility_picture_refuses_a_record(stage: str, why: str) -> None:
    assert stage.split("/")[0] in _eligibility_nodes()
    drive = _Drive()
    try:
        outcome, reasons, passed = _stage_refuses(stage, drive)
    finally:
        drive.ledger.close()
    assert (outcome, reasons, passed) == ("MISSING", (why,) if why else (), "FOUND")


def test_each_outcome_of_the_eligibility_picture_happens() -> None:
    nodes = _eligibility_nodes()
    assert nodes[:5] == ["claim", "scope", "status", "time", "applicability"]
    drive = _Drive()
    try:
        outcomes = {drive.agent.read("p", "c").outcome.value}
        drive.propose(accepted=True, claim_key="c", value="v")
        drive.propose(accepted=True, claim_key="c", value="v")  # agreeing: one answer
        found = drive.agent.read("p", "c")
        assert (found.value, len(found.records)) == ("v", 2)
        outcomes.add(found.outcome.value)
        drive.propose(accepted=True, claim_key="c", value="w")  # another value
        conflict = drive.agent.read("p", "c")
        outcomes.add(conflict.outcome.value)
        assert len(conflict.records) == 3  # all named, none picked
    finally:
        drive.ledger.close()
    assert outcomes == {"MISSING", "FOUND", "CONFLICT"} == set(nodes[-3:])
    assert _not_drawn("eligibility") == []
    assert "](docs/eligibility.svg)" in README.read_text()


def test_the_status_machine_picture_draws_every_change_a_command_makes() -> None:
    drawn = {(a, b, label.split()[0]) for a, b, label in _status_machine_edges()}
    made: set[tuple[str, str, str]] = set()
    for status in Status:
        for command in ("accept", "reject", "revoke", "revalidate"):
            drive = _Drive()
            try:
                rid = drive.in_status(status.value)
                with contextlib.suppress(LedgerError):  # refused: no change to draw
                    if command == "revalidate":
                        drive.boss.revalidate(rid, parents=[drive.propose(accepted=True)])
                    elif command in ("reject", "revoke"):
                        getattr(drive.boss, command)(rid, reason="r")
                    else:
                        drive.boss.accept(rid)
                    made.add((status.value, drive.status(rid), command))
            finally:
                drive.ledger.close()
    assert made <= drawn, sorted(made - drawn)
    assert {(a, c) for a, _, c in made} == {
        ("CANDIDATE", "accept"),
        ("CANDIDATE", "reject"),
        ("CANDIDATE", "revoke"),
        ("ACCEPTED", "revoke"),
        ("STALE", "revoke"),
        ("STALE", "revalidate"),
    }
