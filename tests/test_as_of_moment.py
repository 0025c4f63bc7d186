"""Every answer given as of a past moment says which moment it shows.

A printout or a saved JSON answer of a past state must not pass for the present:
under ``provledger as-of`` an answer for people begins with the moment (its log
position and the instant of that moment), ``--json`` carries
``"as_of": {"position", "time"}``, and a file written says it in its ``wrote``
line; over HTTP, every answer asked with ``as_of_position`` or ``as_of_time``
carries ``as_of``, declared in the OpenAPI document. Answers of now are left
as they were: no line, no field.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from openapi_schema_validator import OAS31Validator, oas31_format_checker
from starlette.testclient import TestClient

from ledger import Kind, Ledger
from ledger.cli import main
from ledger.serve import create_app
from tests.conftest import Clock
from tests.serve_support import DOC, PREFIX, Api, _resolve

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@dataclass
class Scene:
    """E1 → M1 → R1 in proj-a, accepted (a minute apart), R1 delivered, then E1
    revoked (three events in one transaction: the revocation and two markings)."""

    url: str
    agent: str
    reviewer: str
    #: The log position before the revocation, and the time of its event.
    before: int
    before_time: str
    #: The revocation's first event, and the last of its transaction (and its time).
    revoked: int
    revoked_end: int
    revoked_end_time: str

    def run(self, *args: str, token: str | None = None) -> Result:
        env = {"PROVLEDGER_URL": self.url, "PROVLEDGER_TOKEN": token or self.reviewer}
        result = CliRunner().invoke(main, list(args), env=env)
        assert result.exit_code == 0, (args, result.output, result.exception)
        return result


def _build(url: str, clock: Clock) -> tuple[str, str, int, int, int]:
    """The scene's history on ``url``: the tokens, the position before the
    revocation, the revocation's position and the end of its transaction."""
    with Ledger.open(url, clock=clock) as led:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
        admin.grant("reviewer", scope="proj-a", roles=["approve", "read", "audit", "deliver"])
        agent_token, reviewer_token = admin.issue_token("agent-1"), admin.issue_token("reviewer")
        agent, reviewer = led.authenticate(agent_token), led.authenticate(reviewer_token)
        agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"retries", id="E1")
        agent.propose("proj-a", "api.retry_safe", True, Kind.INFERENCE, parents=["E1"], id="M1")
        agent.propose("proj-a", "report.weekly", "on", Kind.REPORT, parents=["M1"], id="R1")
        for rid in ("E1", "M1", "R1"):
            clock.advance(minutes=1)
            reviewer.accept(rid)
        clock.advance(minutes=1)
        reviewer.deliver("R1", recipient="ops@x.test")
        before = led.position
        clock.advance(minutes=1)
        revocation = reviewer.revoke("E1", reason="doc changed")
        assert led.position > revocation.position  # the markings follow in its transaction
        return agent_token, reviewer_token, before, revocation.position, led.position


def _event_times(url: str, token: str) -> dict[int, str]:
    """Each event's time as ``history`` gives it, by log position (what the
    moment's time must be: the instant the state after that event was reached)."""
    with Ledger.open(url) as led:
        return {e.position: e.at.isoformat() for e in led.authenticate(token).history()}


@pytest.fixture
def scene(tmp_path: Path, clock: Clock) -> Scene:
    url = f"sqlite:///{tmp_path / 'moment.db'}"
    agent, reviewer, before, revoked, end = _build(url, clock)
    times = _event_times(url, reviewer)
    return Scene(url, agent, reviewer, before, times[before], revoked, end, times[end])


#: The as-of read commands whose answers are text or JSON, each with its arguments.
COMMANDS: dict[str, list[str]] = {
    "read": ["read", "--scope", "proj-a", "--claim", "api.retry_safe"],
    "get": ["get", "R1"],
    "explain": ["explain", "--scope", "proj-a", "--claim", "api.retry_safe"],
    "audit": ["audit", "R1"],
    "history": ["history"],
    "corrections": ["corrections"],
    "records": ["records", "--scope", "proj-a"],
}


# -- the command line: answers for people ---------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
def test_an_as_of_answer_for_people_begins_with_the_position_and_its_time(
    scene: Scene, command: str
) -> None:
    # Given the state before the revocation, asked for by position
    then = scene.run("as-of", "--position", str(scene.before), *COMMANDS[command])

    # Then the answer's first line names that position and the time of its event
    first, rest = then.stdout.split("\n", 1)
    assert first == f"as of log position {scene.before} ({scene.before_time})"
    assert rest.strip()

    # And the same command of now is as it was: no such line
    now = scene.run(*COMMANDS[command])
    assert not now.stdout.startswith("as of")
    assert "as of log position" not in now.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_an_as_of_time_answer_for_people_begins_with_that_time_and_its_position(
    scene: Scene, command: str
) -> None:
    then = scene.run("as-of", "--time", scene.before_time, *COMMANDS[command])
    first = then.stdout.split("\n", 1)[0]
    assert first == f"as of {scene.before_time} (log position {scene.before})"


def test_a_position_inside_a_transaction_says_the_end_of_it_is_shown(scene: Scene) -> None:
    # Given the revocation's own position (its markings follow in its transaction)
    asked = str(scene.revoked)

    # When a record is shown as of it
    shown = scene.run("as-of", "--position", asked, "get", "R1")
    answer = json.loads(scene.run("as-of", "--position", asked, "get", "R1", "--json").stdout)

    # Then the moment named is the transaction's end, whose state is shown (R1 STALE)
    assert shown.stdout.split("\n", 1)[0] == (
        f"as of log position {scene.revoked_end} ({scene.revoked_end_time}), the end of "
        f"the transaction holding position {scene.revoked}: its events are shown together"
    )
    assert answer["as_of"] == {"position": scene.revoked_end, "time": scene.revoked_end_time}
    assert answer["status"] == "STALE"


def test_the_empty_ledger_before_the_first_event_is_named_so(scene: Scene) -> None:
    shown = scene.run("as-of", "--position", "0", "records", "--scope", "proj-a")
    first, rest = shown.stdout.split("\n", 1)
    assert first.startswith("as of log position 0: the empty ledger (")
    assert rest == "no records\n"


def test_a_record_unknown_as_of_a_moment_is_said_unknown_then(scene: Scene) -> None:
    # R1 was proposed after position 0: as of then it is unknown, and the refusal
    # says as of when (a record that never existed reads the same without as-of)
    env = {"PROVLEDGER_URL": scene.url, "PROVLEDGER_TOKEN": scene.reviewer}
    then = CliRunner().invoke(main, ["as-of", "--position", "0", "get", "R1"], env=env)
    assert then.exit_code == 1
    assert then.stderr.startswith(
        "error: as-of get refused: record 'R1' is unknown or not visible to 'reviewer' "
        "as of log position 0: the empty ledger ("
    ), then.stderr
    now = CliRunner().invoke(main, ["get", "R9"], env=env)
    assert now.stderr == "error: get refused: record 'R9' is unknown or not visible to 'reviewer'\n"
    owed = CliRunner().invoke(
        main, ["as-of", "--position", str(scene.before), "corrections", "--record", "R9"], env=env
    )
    assert owed.exit_code == 1 and f"as of log position {scene.before} (" in owed.stderr


# -- the command line: --json -------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
def test_an_as_of_json_answer_carries_as_of_and_one_of_now_does_not(
    scene: Scene, command: str
) -> None:
    # Given the same command as of a past position, and of now
    then = json.loads(
        scene.run("as-of", "--position", str(scene.before), *COMMANDS[command], "--json").stdout
    )
    now = json.loads(scene.run(*COMMANDS[command], "--json").stdout)

    # Then the past answer is an object whose first field is the moment
    assert isinstance(then, dict)
    assert next(iter(then)) == "as_of"
    assert then["as_of"] == {"position": scene.before, "time": scene.before_time}
    # And otherwise has the fields of the answer of now, which has no as_of
    assert "as_of" not in now
    assert set(then) - {"as_of"} == set(now)


def test_an_as_of_time_json_answer_gives_that_time_and_the_position_it_found(
    scene: Scene,
) -> None:
    then = json.loads(scene.run("as-of", "--time", scene.before_time, "get", "R1", "--json").stdout)
    assert then["as_of"] == {"position": scene.before, "time": scene.before_time}
    assert then["status"] == "ACCEPTED"


# -- the command line: files written ---------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["export", "--format", "prov-json"],
        ["graph", "E1", "--descendants", "--format", "dot"],
        ["graph", "E1", "--format", "mermaid"],
    ],
)
def test_a_file_written_as_of_a_past_moment_is_said_to_show_it(
    scene: Scene, tmp_path: Path, command: list[str]
) -> None:
    target = tmp_path / "out.txt"
    then = scene.run("as-of", "--position", str(scene.before), *command, "-o", str(target))
    assert then.stdout.startswith(f"wrote {target} (")
    assert then.stdout.endswith(f"), as of log position {scene.before} ({scene.before_time})\n"), (
        then.stdout
    )
    now = scene.run(*command, "-o", str(target))
    assert "as of" not in now.stdout


# -- the HTTP API -----------------------------------------------------------------------------


@dataclass
class Served:
    ledger: Ledger
    agent: Api
    reviewer: Api
    before: int
    before_time: str


@pytest.fixture(params=["memory", "sqlite"])
def served(request: pytest.FixtureRequest, tmp_path: Path, clock: Clock) -> Iterator[Served]:
    url = "memory:" if request.param == "memory" else f"sqlite:///{tmp_path / 'api.db'}"
    led = Ledger.open(url, clock=clock)
    try:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
        admin.grant("reviewer", scope="proj-a", roles=["approve", "read", "audit", "deliver"])
        tokens = {name: admin.issue_token(name) for name in ("agent-1", "reviewer")}
        agent, reviewer = led.authenticate(tokens["agent-1"]), led.authenticate(tokens["reviewer"])
        agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"retries", id="E1")
        agent.propose("proj-a", "api.retry_safe", True, Kind.INFERENCE, parents=["E1"], id="M1")
        for rid in ("E1", "M1"):
            clock.advance(minutes=1)
            reviewer.accept(rid)
        reviewer.deliver("M1", recipient="ops@x.test")
        before = led.position
        times = {e.position: e.at.isoformat() for e in reviewer.history()}
        clock.advance(minutes=1)
        reviewer.revoke("E1", reason="doc changed")
        app = create_app(led, mcp_factory=None)
        with TestClient(app) as client:
            yield Served(
                led,
                Api(client, tokens["agent-1"]),
                Api(client, tokens["reviewer"]),
                before,
                times[before],
            )
    finally:
        led.close()


#: (who, template, path parameters, query): each GET the API answers as of a moment
#: with JSON.
_AS_OF_GETS: list[tuple[str, str, dict[str, str], dict[str, str]]] = [
    ("agent", "/records", {}, {"scope": "proj-a"}),
    ("agent", "/records/{record_id}", {"record_id": "M1"}, {}),
    ("reviewer", "/records/{record_id}/audit", {"record_id": "M1"}, {}),
    ("agent", "/records/{record_id}/deliveries", {"record_id": "M1"}, {}),
    ("agent", "/records/{record_id}/graph", {"record_id": "M1"}, {"format": "json"}),
    ("agent", "/read", {}, {"scope": "proj-a", "claim_key": "api.retry_safe"}),
    ("agent", "/explain", {}, {"scope": "proj-a", "claim_key": "api.retry_safe"}),
    ("reviewer", "/corrections", {}, {}),
]


def _declared(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The top-level properties ``schema`` declares, through ``$ref`` and ``allOf``."""
    schema = _resolve(schema)
    properties = dict(schema.get("properties", {}))
    for part in schema.get("allOf", ()):
        properties.update(_declared(part))
    return properties


def _answer_schema(template: str) -> Mapping[str, Any]:
    op = DOC["paths"][PREFIX + template]["get"]
    schema: Mapping[str, Any] = op["responses"]["200"]["content"]["application/json"]["schema"]
    return schema


def test_every_operation_taking_as_of_declares_the_as_of_of_its_answer() -> None:
    taking = sorted(
        path.removeprefix(PREFIX)
        for path, ops in DOC["paths"].items()
        for op in ops.values()
        if any(p["name"] == "as_of_position" for p in op.get("parameters", ()))
    )
    assert taking == sorted(template for _, template, _, _ in _AS_OF_GETS)
    for template in taking:
        declared = _declared(_answer_schema(template))
        assert declared.get("as_of") == {"$ref": "#/components/schemas/AsOf"}, template
        assert "as_of" not in _resolve(_answer_schema(template)).get("required", ()), template


@pytest.mark.parametrize("asked", ["as_of_position", "as_of_time"])
def test_every_as_of_answer_of_the_api_carries_the_moment_it_shows(
    served: Served, asked: str
) -> None:
    moment = {"position": served.before, "time": served.before_time}
    query = {"as_of_position": str(served.before)} if asked == "as_of_position" else {}
    if asked == "as_of_time":
        query = {"as_of_time": served.before_time}
    for who, template, path, params in _AS_OF_GETS:
        api = served.agent if who == "agent" else served.reviewer
        # When asked as of the moment before the revocation (checked against the document)
        then = api.get(template, params={**params, **query}, **path)
        assert then.status_code == 200, (template, then.text)
        answer = then.json()
        # Then its first field is that moment, valid as the document declares it
        assert next(iter(answer)) == "as_of", template
        assert answer["as_of"] == moment, template
        declared = _declared(_answer_schema(template))
        assert set(answer) <= set(declared), (template, set(answer) - set(declared))
        OAS31Validator(
            {**declared["as_of"], "components": DOC["components"]},
            format_checker=oas31_format_checker,
        ).validate(answer["as_of"])
        # And the answer of now has no as_of, and otherwise the same fields
        now = api.get(template, params=params, **path).json()
        assert "as_of" not in now, template
        assert set(answer) - {"as_of"} == set(now), template
