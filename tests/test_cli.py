"""The ``provledger`` command line, through click's test runner on an SQLite file.

Every command: its success path, the shape of its ``--json`` output, refusals
(exit 1, one ``error:`` line naming the problem, log unchanged) and usage errors
(exit 2). Plus: every command has help with an example and appears in the README,
and the README's walkthrough runs as pasted.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from ledger import Kind, Ledger, RecordView
from ledger.access import token_fingerprint
from ledger.cli import main
from ledger.errors import InvalidInputError
from ledger.heads import generate_key

from .conftest import Clock, World

README = Path(__file__).resolve().parent.parent / "README.md"
DOCS_IMPACT = README.parent / "docs" / "impact.svg"
RECORD_KEYS = {f.name for f in fields(RecordView)} | {"undeclared"}


@dataclass
class Cli:
    """Runs ``provledger`` against one SQLite file, with the agent's and reviewer's tokens."""

    url: str
    path: Path
    agent: str = ""
    reviewer: str = ""

    def __call__(self, *args: str, input: str | bytes | None = None, **env: str | None) -> Result:
        environment: dict[str, str | None] = {
            "PROVLEDGER_URL": self.url,
            "PROVLEDGER_TOKEN": None,
            **env,
        }
        return CliRunner().invoke(main, list(args), input=input, env=environment)

    def ok(self, *args: str, input: str | bytes | None = None) -> Result:
        result = self(*args, input=input)
        assert result.exit_code == 0, (result.output, result.exception)
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.ok(*args, "--json").stdout)

    def as_agent(self, *args: str) -> Result:
        return self(*args, "--token", self.agent)

    def as_reviewer(self, *args: str) -> Result:
        return self(*args, "--token", self.reviewer)

    @property
    def position(self) -> int:
        with Ledger.open(self.url) as led:
            return led.position


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """A ledger file with agent-1 (propose, read) and reviewer (approve, read, audit,
    deliver) in proj-a. Set up through the library; the commands doing the same are
    tested on their own below."""
    path = tmp_path / "cli.db"
    c = Cli(url=f"sqlite:///{path}", path=path)
    with Ledger.open(c.url) as led:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
        admin.grant("reviewer", scope="proj-a", roles=["approve", "read", "audit", "deliver"])
        c.agent = admin.issue_token("agent-1")
        c.reviewer = admin.issue_token("reviewer")
    return c


@pytest.fixture
def chain(cli: Cli) -> Cli:
    """E1 (captured) → M1 → R1, all accepted, R1 delivered."""
    with Ledger.open(cli.url) as led:
        agent, reviewer = led.authenticate(cli.agent), led.authenticate(cli.reviewer)
        agent.capture(
            scope="proj-a", uri="https://x.test/doc", content=b"retries are safe", id="E1"
        )
        agent.propose(
            scope="proj-a",
            claim_key="api.retry_safe",
            value=True,
            kind="inference",
            parents=["E1"],
            id="M1",
        )
        agent.propose(
            scope="proj-a",
            claim_key="report.weekly",
            value="retries on",
            kind="report",
            parents=["M1"],
            id="R1",
        )
        for rid in ("E1", "M1", "R1"):
            reviewer.accept(rid)
        reviewer.deliver("R1", recipient="ops@x.test")
    return cli


def _revoked(chain: Cli) -> Cli:
    result = chain.as_reviewer("revoke", "E1", "--reason", "doc changed")
    assert result.exit_code == 0, result.output
    return chain


# -- admin commands -----------------------------------------------------------------


def test_init_creates_the_database_file_and_reports_its_admin_token(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    c = Cli(url=f"sqlite:///{path}", path=path)
    data = c.json("init")
    assert path.exists()
    assert data["admin_token"].startswith("plt_")
    assert data == {
        "url": c.url,
        "backend": "sqlite",
        "position": 2,  # the admin principal and its token
        "created": True,
        "admin_token": data["admin_token"],
        "reissued": False,
    }
    # Running it again opens the same ledger and prints no token.
    again = c.ok("init")
    assert again.stdout == "" and "log position 2" in again.stderr


def test_grant_records_an_access_event_and_token_issue_prints_only_the_token(cli: Cli) -> None:
    before = cli.position
    data = cli.json("grant", "auditor", "--scope", "proj-a", "--roles", "audit, read")
    assert data == {
        "subject": "auditor",
        "scope": "proj-a",
        "roles": ["audit", "read"],
        "position": before + 2,
    }
    issued = cli.ok("token", "issue", "auditor")
    out = issued.stdout
    assert re.fullmatch(r"plt_\S+\n", out)
    # stdout holds the token alone; stderr names it by the fingerprint `token list` shows
    assert issued.stderr == (
        f"issued a token to auditor (fingerprint {token_fingerprint(out.strip())}, no "
        "expiry); it is on stdout, shown this once: `provledger token list` and "
        "`token revoke --fingerprint` know it by its fingerprint\n"
    )
    with Ledger.open(cli.url) as led:
        assert led.authenticate(out.strip()).principal == "auditor"


def test_token_issue_json_and_revoke_make_the_token_stop_working(cli: Cli) -> None:
    expires = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    data = cli.json("token", "issue", "agent-1", "--expires", expires)
    assert set(data) == {"subject", "token", "fingerprint", "expires"}
    assert data["subject"] == "agent-1" and data["expires"] == expires
    assert data["fingerprint"] == token_fingerprint(data["token"])
    assert (
        cli("get", "X", "--token", data["token"]).exit_code == 1
    )  # unknown record, but authenticated
    revoked = cli.json("token", "revoke", data["token"])
    assert revoked["revoked"] is True
    result = cli("get", "X", "--token", data["token"])
    assert result.exit_code == 1
    assert result.stderr == "error: token of 'agent-1' was revoked\n"


def test_token_revoke_reads_the_token_from_standard_input_given_dash(cli: Cli) -> None:
    issued = cli.json("token", "issue", "agent-1")["token"]
    before = cli.position
    result = cli("token", "revoke", "-", "--json", input=f"{issued}\n")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {
        "revoked": True,
        "fingerprints": [token_fingerprint(issued)],
        "position": before + 1,
    }
    refused = cli("get", "X", "--token", issued)
    assert refused.stderr == "error: token of 'agent-1' was revoked\n"


def test_the_token_can_come_from_the_environment(chain: Cli) -> None:
    result = chain("get", "E1", "--json", PROVLEDGER_TOKEN=chain.agent)
    assert result.exit_code == 0
    assert json.loads(result.stdout)["id"] == "E1"


def test_stats_counts_events_records_and_statuses(chain: Cli) -> None:
    data = chain.json("stats")
    assert data["position"] == chain.position
    assert data["records"] == 3
    assert data["statuses"] == {"ACCEPTED": 3}
    assert data["deliveries"] == 1 and data["snapshots"] == 1
    assert "ACCEPTED" in chain.ok("stats").stdout


def test_stats_count_the_corrections_owed_and_say_when_the_newest_event_was_written(
    ledger: Ledger, clock: Clock
) -> None:
    # Given an empty ledger: nothing is owed, nothing was written
    empty = ledger.stats()
    assert empty["corrections_owed"] == 0 and empty["last_event_at"] is None

    # When a report is delivered, on the ledger's clock a minute later
    admin = ledger.admin()
    admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
    admin.grant("reviewer", scope="proj-a", roles=["approve", "read", "audit", "deliver"])
    agent = ledger.authenticate(admin.issue_token("agent-1"))
    reviewer = ledger.authenticate(admin.issue_token("reviewer"))
    agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"retries are safe", id="E1")
    agent.propose(
        scope="proj-a",
        claim_key="report.weekly",
        value="on",
        kind="report",
        parents=["E1"],
        id="R1",
    )
    reviewer.accept("E1")
    reviewer.accept("R1")
    delivered_at = clock.advance(minutes=1)
    delivery = reviewer.deliver("R1", recipient="ops@x.test")

    # Then it owes nothing, and the newest event is the delivery's
    delivered = ledger.stats()
    assert delivered["corrections_owed"] == 0
    assert delivered["last_event_at"] == delivered_at

    # When its evidence is revoked a minute later (the report becomes STALE)
    clock.advance(minutes=1)
    reviewer.revoke("E1", reason="doc changed")

    # Then the delivery owes a correction, as corrections_due lists it
    revoked = ledger.stats()
    assert revoked["corrections_owed"] == 1
    assert [due.delivery.delivery_id for due in reviewer.corrections_due()] == [delivery]
    newest = reviewer.history()[-1]
    assert newest.position == revoked["position"]
    assert revoked["last_event_at"] == newest.at == clock.now

    # When the correction is issued, it is owed no more
    corrected_at = clock.advance(minutes=1)
    reviewer.issue_correction(delivery, note="the evidence was withdrawn")
    corrected = ledger.stats()
    assert corrected["corrections_owed"] == 0 and corrected["corrections"] == 1
    assert corrected["last_event_at"] == corrected_at
    assert empty.keys() == corrected.keys()


def test_stats_of_views_in_an_earlier_layout_leave_the_corrections_owed_untold(
    tmp_path: Path,
) -> None:
    # Given a ledger 0.1.0 wrote, its views in that version's layout
    path = tmp_path / "old.db"
    fixtures = Path(__file__).parent / "fixtures"
    shutil.copyfile(fixtures / "ledger-0.1.0.db", path)
    url = f"sqlite:///{path}"

    # When its stats are asked for with the views left as stored
    with Ledger.open(f"{url}?mode=ro", catch_up=False) as ro:
        as_stored = ro.stats()
    with Ledger.open(url, catch_up=False) as left:
        assert left.stats() == as_stored

    # Then the counts are given, the corrections owed are not (the views cannot
    # tell), and the newest event's time is, as the views rebuilt give them
    assert as_stored["events"] == 84 and as_stored["corrections_owed"] is None
    reviewer = json.loads((fixtures / "ledger-0.1.0.json").read_text())["tokens"]["reviewer"]
    with Ledger.open(url) as rebuilt:  # the views rebuilt in this version's layout
        current = rebuilt.stats()
        session = rebuilt.authenticate(reviewer)
        due = session.corrections_due()
        newest = session.history()[-1]
    assert current["corrections_owed"] == len(due)
    assert newest.position == current["position"]
    assert as_stored["last_event_at"] == current["last_event_at"] == newest.at


def test_claim_keys_0_1_0_took_show_on_one_line_and_apart_from_their_look_alikes(
    tmp_path: Path,
) -> None:
    # Given a copy of a 0.1.0 ledger holding keys no new claim may have now (a tab,
    # line breaks, space at the ends, another normal form) beside plain ones
    fixtures = Path(__file__).parent / "fixtures"
    path = tmp_path / "keys.db"
    shutil.copyfile(fixtures / "ledger-0.1.0-keys.db", path)
    answers = json.loads((fixtures / "ledger-0.1.0-keys.json").read_text())
    tokens = answers["tokens"]
    cli = Cli(
        url=f"sqlite:///{path}", path=path, agent=tokens["agent-1"], reviewer=tokens["reviewer"]
    )
    keys: dict[str, str] = answers["keys"]

    # When a reviewer lists them, reads one with a line break and shows its record
    listed = cli.as_reviewer("records", "--scope", "s")
    read = cli.as_reviewer("read", "--scope", "s", "--claim", keys["LF"])
    shown = cli.as_reviewer("get", "LF")

    # Then each such key is a JSON string on its record's one line (escaped beyond
    # ASCII, so that "cafe\u0301" is not taken for "caf\u00e9"); a key a new
    # claim could have is shown as it is
    assert listed.exit_code == read.exit_code == shown.exit_code == 0, listed.output
    rows = {line.split()[1]: line for line in listed.stdout.splitlines() if line[:1] == "│"}
    assert set(rows) == set(keys)
    for rid, key in keys.items():
        expected = key if rid in ("PLAIN", "NFC") else json.dumps(key)
        assert f" {expected} " in rows[rid], (rid, rows[rid])
    assert read.stdout.startswith('FOUND  s/"two\\nlines" at ')
    # and a key given as the tables show it asks about the key as stored
    for rid in ("LF", "NFD", "PAD"):
        again = cli.as_reviewer("read", "--scope", "s", "--claim", json.dumps(keys[rid]), "--json")
        assert json.loads(again.stdout)["records"][0]["id"] == rid, again.output
    assert ["claim_key", '"two\\nlines"'] in [
        line.replace("│", " ").split() for line in shown.stdout.splitlines()
    ]
    # and so are a listing's prefix and a new version's key
    filtered = cli.as_reviewer("records", "--scope", "s", "--claim-prefix", json.dumps(keys["LF"]))
    assert [
        r["id"]
        for r in json.loads(
            cli.as_reviewer(
                "records", "--scope", "s", "--claim-prefix", json.dumps(keys["PAD"]), "--json"
            ).stdout
        )["records"]
    ] == ["PAD"]
    assert [line.split()[1] for line in filtered.stdout.splitlines() if line[:1] == "│"] == ["LF"]
    again = cli.as_agent(
        "propose",
        "--scope",
        "s",
        "--claim",
        json.dumps(keys["LF"]),
        "--kind",
        "fact",
        "--value",
        "2",
        "--supersedes",
        "LF",
        "--id",
        "LF2",
    )
    assert again.exit_code == 0, again.output
    with Ledger.open(cli.url) as led:
        assert led.authenticate(cli.reviewer).get("LF2").claim_key == keys["LF"]


def test_stats_show_the_corrections_owed_and_the_newest_event_time(chain: Cli) -> None:
    # Given a delivered report whose evidence is then revoked
    before = chain.json("stats")
    _revoked(chain)
    with Ledger.open(chain.url) as led:
        newest = led.authenticate(chain.reviewer).history()[-1]

    # Then --json counts the correction owed and gives the revocation's time
    data = chain.json("stats")
    assert before["corrections_owed"] == 0 and data["corrections_owed"] == 1
    assert newest.position == data["position"]
    assert datetime.fromisoformat(data["last_event_at"]) == newest.at

    # And the table for people shows both
    table = chain.ok("stats").stdout
    assert re.search(r"corrections_owed\s*│\s*1\b", table), table
    shown = newest.at.astimezone(UTC).isoformat(timespec="seconds")
    assert re.search(rf"last_event_at\s*│\s*{re.escape(shown)}", table), table


def test_rebuild_replays_the_log_and_the_views_match(chain: Cli) -> None:
    data = chain.json("rebuild")
    assert data["matched"] is True and data["events"] == chain.position
    said = chain.ok("rebuild").stderr
    # One line, the digest unbroken, whatever the terminal's width
    assert re.search(r"^replayed .* views match \(digest [0-9a-f]{16}\)$", said, re.M), said
    # and, stderr no terminal (a log), no progress bar: that line alone
    assert said.count("\n") == 1 and "rebuilding views" not in said, said


def test_rebuild_and_demo_print_json_as_every_other_command_does(chain: Cli) -> None:
    for args in (["rebuild"], ["demo"], ["stats"]):
        printed = chain.ok(*args, "--json").stdout
        assert printed == json.dumps(json.loads(printed), indent=2, ensure_ascii=False) + "\n"


def test_rebuild_over_an_edited_view_says_what_happened_and_where_to_look(chain: Cli) -> None:
    import sqlite3

    with sqlite3.connect(chain.path) as con:
        con.execute("UPDATE pl_records SET status='REJECTED' WHERE record_id='M1'")
    named = chain("verify")  # reads only: names the row
    assert named.exit_code == 1 and "record_id='M1'" in named.stderr

    result = chain("rebuild")

    assert result.exit_code == 1
    assert "error: rebuilt views differ" in result.stderr
    assert "they are rebuilt from the log now" in result.stderr
    assert "`provledger verify`, run before a rebuild, names the rows" in result.stderr
    assert chain("verify").exit_code == 0  # repaired


def test_demo_runs_the_experiment_and_every_row_passes() -> None:
    result = CliRunner().invoke(main, ["demo", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["passed"] is True and len(data["rows"]) == 10


def test_the_demo_table_cuts_no_word_of_its_checks_in_80_columns() -> None:
    result = CliRunner().invoke(main, ["demo", "--json"])
    checks = [row["check"] for row in json.loads(result.stdout)["rows"]]
    shown = CliRunner().invoke(main, ["demo"], env={"COLUMNS": "80"})
    assert shown.exit_code == 0, shown.output
    table = shown.stdout.split("all rows passed")[0]
    # every column's right edge shows, and every word of a check shows whole
    ruled = [line for line in table.splitlines() if line.startswith("│")]
    assert ruled and all(line.rstrip().endswith("│") for line in ruled), table
    column = [line.split("│")[1].strip() for line in ruled]
    shown_words = {word for cell in column for word in cell.split()}
    assert {word for check in checks for word in check.split()} <= shown_words, table


def test_demo_runs_on_an_empty_postgresql_schema_and_refuses_a_ledger_with_events(
    pg_url: str,
) -> None:
    result = CliRunner().invoke(main, ["demo", "--json", "--url", pg_url])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["passed"] is True
    with Ledger.open(pg_url) as led:
        position = led.position
    again = CliRunner().invoke(main, ["demo", "--url", pg_url])
    assert again.exit_code == 1
    assert again.stderr.startswith("error: the experiment needs an empty ledger; ")
    with Ledger.open(pg_url) as led:
        assert led.position == position


ADMIN_COMMANDS = [
    ["grant", "agent-1", "--scope", "proj-a", "--roles", "read"],
    ["token", "issue", "agent-1"],
    ["token", "revoke", "--fingerprint", "0123456789ab"],  # (a token given: warned of)
    ["stats"],
    ["rebuild"],
    ["digest"],
    ["verify"],
]


@pytest.mark.parametrize("args", ADMIN_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_admin_commands_check_a_given_admin_token(cli: Cli, args: list[str]) -> None:
    # On a file its user owns the token may be omitted, but one that is given must be valid.
    before = cli.position
    result = cli(*args, "--admin-token", "plt_wrong")
    # (verify, a check, exits 3 when it could not check: 1 is for a problem it found)
    assert result.exit_code == (3 if args == ["verify"] else 1)
    assert result.stderr == "error: admin token is unknown\n"
    assert cli.position == before


# -- write commands -------------------------------------------------------------------


def test_capture_reads_a_file_and_stores_its_hash(cli: Cli, tmp_path: Path) -> None:
    doc = tmp_path / "page.html"
    doc.write_bytes(b"<p>v2 only</p>")
    before = cli.position
    result = cli.as_agent(
        "capture",
        str(doc),
        "--scope",
        "proj-a",
        "--uri",
        "https://x.test/p",
        "--id",
        "E7",
        "--fetched-at",
        "2026-01-01T00:00:00+00:00",
        "--json",
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"id": "E7", "position": before + 1}
    record = json.loads(cli.as_agent("get", "E7", "--json").stdout)
    assert record["kind"] == "evidence" and record["status"] == "CANDIDATE"
    assert record["claim_key"] == "source:https://x.test/p"
    assert (
        record["evidence"]["content_hash"]
        == "sha256:" + hashlib.sha256(doc.read_bytes()).hexdigest()
    )
    assert record["evidence"]["fetched_at"] == "2026-01-01T00:00:00+00:00"


def test_capture_reads_stdin_for_a_dash_and_prints_the_id(cli: Cli) -> None:
    result = CliRunner().invoke(
        main,
        ["capture", "-", "--scope", "proj-a", "--uri", "https://x.test/s", "--token", cli.agent],
        input=b"from stdin",
        env={"PROVLEDGER_URL": cli.url},
    )
    assert result.exit_code == 0, result.output
    rid = result.stdout.strip()
    assert rid.startswith("r-")
    record = json.loads(cli.as_agent("get", rid, "--json").stdout)
    assert record["evidence"]["size"] == len(b"from stdin")


def test_propose_takes_json_values_plain_strings_parents_and_conditions(chain: Cli) -> None:
    result = chain.as_agent(
        "propose",
        "--scope",
        "proj-a",
        "--claim",
        "api.limits",
        "--kind",
        "fact",
        "--value",
        '{"rps": 10, "burst": [1, 2]}',
        "--parent",
        "M1",
        "--id",
        "F1",
        "--conditions",
        '{"api_version": "v2"}',
        "--expires",
        "2999-01-01T00:00:00+00:00",
        "--json",
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["id"] == "F1"
    record = json.loads(chain.as_agent("get", "F1", "--json").stdout)
    assert record["value"] == {"rps": 10, "burst": [1, 2]}
    assert record["parents"] == ["M1"]
    assert record["conditions"] == {"api_version": "v2"}
    assert record["expires"] == "2999-01-01T00:00:00+00:00"
    plain = chain.as_agent(
        "propose",
        "--scope",
        "proj-a",
        "--claim",
        "note",
        "--kind",
        "user_preference",
        "--value-str",
        "true",
    )
    rid = plain.stdout.strip()
    assert json.loads(chain.as_agent("get", rid, "--json").stdout)["value"] == "true"


def test_a_value_too_long_for_a_command_line_is_read_from_a_file_or_stdin(
    chain: Cli, tmp_path: Path
) -> None:
    value = {"text": "é" * 200_000, "n": [1, 2.5, None]}
    path = tmp_path / "value.json"
    path.write_text(json.dumps(value), encoding="utf-8")
    args = ("propose", "--scope", "proj-a", "--kind", "fact", "--token", chain.agent)
    from_file = chain(*args, "--claim", "big.file", "--value-file", str(path))
    from_stdin = chain(*args, "--claim", "big.stdin", "--value-file", "-", input=path.read_bytes())
    for result in (from_file, from_stdin):
        assert result.exit_code == 0, result.output
        got = json.loads(chain.as_agent("get", result.stdout.strip(), "--json").stdout)
        assert got["value"] == value
    # Not UTF-8, not JSON, or given beside --value: a usage error naming it, nothing written
    before = chain.position
    for extra, said in (
        (["--value-file", "-"], "is not UTF-8 text"),
        (["--value-file", str(path), "--value", "1"], "give exactly one of --value"),
    ):
        refused = chain(*args, "--claim", "x", *extra, input=b"\xff\xfe")
        assert refused.exit_code == 2 and said in refused.stderr, refused.output
    not_json = chain(*args, "--claim", "x", "--value-file", str(path.with_name("bad.json")))
    path.with_name("bad.json").write_text("{oops")
    not_json = chain(*args, "--claim", "x", "--value-file", str(path.with_name("bad.json")))
    assert not_json.exit_code == 2, not_json.output
    assert "Invalid value for --value-file: " in not_json.stderr and "bad.json" in not_json.stderr
    # A name given twice in one object would lose what the first said: refused
    for given in ('{"a": 1, "a": 2}', '{"a": {"b": 1, "b": 1}}'):
        twice = chain(*args, "--claim", "x", "--value", given)
        assert twice.exit_code == 2, twice.output
        assert "is given twice in one object" in twice.stderr
    assert chain.position == before
    # A byte order mark at the start (as some editors write) is no part of the JSON
    bom = chain(*args, "--claim", "bom", "--value-file", "-", input=b'\xef\xbb\xbf{"b": 1}')
    assert bom.exit_code == 0, bom.output
    assert json.loads(chain.as_agent("get", bom.stdout.strip(), "--json").stdout)["value"] == {
        "b": 1
    }


def test_accept_reject_revalidate_deliver_and_correct(chain: Cli, tmp_path: Path) -> None:
    # reject a fresh candidate
    chain.as_agent(
        "propose",
        "--scope",
        "proj-a",
        "--claim",
        "x",
        "--kind",
        "inference",
        "--value",
        "1",
        "--id",
        "X1",
    )
    rejected = chain.as_reviewer("reject", "X1", "--reason", "no basis", "--json")
    assert rejected.exit_code == 0
    assert json.loads(rejected.stdout)["status"] == "REJECTED"
    # a second source, then revoke E1 and revalidate M1 on the new basis
    doc = tmp_path / "two.txt"
    doc.write_bytes(b"second source")
    chain.as_agent(
        "capture", str(doc), "--scope", "proj-a", "--uri", "https://y.test", "--id", "E2"
    )
    accepted = chain.as_reviewer("accept", "E2", "--note", "checked", "--json")
    assert json.loads(accepted.stdout) == {
        "id": "E2",
        "status": "ACCEPTED",
        "position": chain.position,
    }
    _revoked(chain)
    revalidated = chain.as_reviewer(
        "revalidate", "M1", "--parent", "E2", "--note", "re-checked", "--json"
    )
    assert revalidated.exit_code == 0, revalidated.output
    m1 = json.loads(chain.as_reviewer("get", "M1", "--json").stdout)
    assert m1["status"] == "ACCEPTED" and m1["parents"] == ["E2"]
    # deliver M1 and correct R1's old delivery
    delivered = json.loads(chain.as_reviewer("deliver", "M1", "--to", "a@x.test", "--json").stdout)
    assert delivered["delivery_id"].startswith("d-") and delivered["id"] == "M1"
    due = json.loads(chain.as_reviewer("corrections", "--json").stdout)["due"]
    assert [d["delivery"]["record_id"] for d in due] == ["R1"]
    delivery_id = due[0]["delivery"]["delivery_id"]
    corrected = chain.as_reviewer("correct", delivery_id, "--note", "not safe", "--json")
    assert corrected.exit_code == 0, corrected.output
    assert json.loads(corrected.stdout)["correction_id"].startswith("c-")
    assert json.loads(chain.as_reviewer("corrections", "--json").stdout) == {"due": []}
    assert "no corrections due" in chain.as_reviewer("corrections").stdout


def test_revoke_reports_the_root_and_every_stale_descendant(chain: Cli) -> None:
    result = chain.as_reviewer("revoke", "E1", "--reason", "doc changed", "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    owing = data.pop("deliveries_owing_correction")
    assert data == {
        "root": "E1",
        "affected": ["E1", "M1", "R1"],
        "position": chain.position - 2,  # the Revoked event; two markings follow
        "stale": ["M1", "R1"],
        "before_position": chain.position - 3,
        "counts": {"REVOKED": 1, "STALE": 2},
    }
    assert [d["delivery"]["record_id"] for d in owing] == ["R1"]


def test_revoke_for_people_shows_the_statuses(chain: Cli) -> None:
    out = chain.as_reviewer("revoke", "E1", "--reason", "doc changed").stdout
    assert "revoked E1" in out
    assert re.search(r"M1\s+│ STALE", out) and re.search(r"E1\s+│ REVOKED", out)


# -- read commands --------------------------------------------------------------------


def test_read_json_has_the_outcome_value_and_usable_records(chain: Cli) -> None:
    data = json.loads(
        chain.as_agent("read", "--scope", "proj-a", "--claim", "api.retry_safe", "--json").stdout
    )
    assert set(data) == {"outcome", "scope", "claim_key", "at", "value", "records"}
    assert data["outcome"] == "FOUND" and data["value"] is True
    assert [r["id"] for r in data["records"]] == ["M1"]
    assert set(data["records"][0]) == RECORD_KEYS


def test_read_for_people_is_a_table_and_missing_after_revocation(chain: Cli) -> None:
    out = chain.as_agent("read", "--scope", "proj-a", "--claim", "api.retry_safe").stdout
    assert out.startswith("FOUND  proj-a/api.retry_safe") and "value: true" in out
    assert re.search(r"│ M1 │ inference │ ACCEPTED │ VALID", out)
    _revoked(chain)
    out = chain.as_agent("read", "--scope", "proj-a", "--claim", "api.retry_safe").stdout
    assert out.startswith("MISSING")


def test_read_with_context_and_kinds_filters(chain: Cli) -> None:
    chain.as_agent(
        "propose",
        "--scope",
        "proj-a",
        "--claim",
        "api.v",
        "--kind",
        "fact",
        "--value",
        "1",
        "--conditions",
        '{"api_version": "v2"}',
        "--id",
        "V1",
    )
    chain.as_reviewer("accept", "V1")
    args = ["read", "--scope", "proj-a", "--claim", "api.v", "--json"]
    assert json.loads(chain.as_agent(*args).stdout)["outcome"] == "MISSING"
    ctx = json.loads(chain.as_agent(*args, "--context", '{"api_version": "v2"}').stdout)
    assert ctx["outcome"] == "FOUND"
    other_kind = chain.as_agent(*args, "--context", '{"api_version": "v2"}', "--kind", "plan")
    assert json.loads(other_kind.stdout)["outcome"] == "MISSING"


def test_explain_says_why_a_record_is_not_usable(chain: Cli) -> None:
    _revoked(chain)
    data = json.loads(
        chain.as_agent("explain", "--scope", "proj-a", "--claim", "api.retry_safe", "--json").stdout
    )
    assert set(data) == {"outcome", "scope", "claim_key", "at", "entries"}
    assert data["outcome"] == "MISSING"
    [entry] = data["entries"]
    assert set(entry) == {"record", "usable", "reasons"}
    assert entry["usable"] is False
    assert entry["reasons"] == ["stale because E1 was revoked: doc changed"]
    out = chain.as_agent("explain", "--scope", "proj-a", "--claim", "api.retry_safe").stdout
    assert "stale because E1 was revoked: doc changed" in out


def test_get_json_has_every_record_field_and_delivery_state(chain: Cli) -> None:
    _revoked(chain)
    data = json.loads(chain.as_reviewer("get", "R1", "--json").stdout)
    assert set(data) == RECORD_KEYS
    assert data["status"] == "STALE" and data["validity"] == "NEEDS_REVALIDATION"
    assert data["cause"] == "E1" and data["reason"] == "doc changed"
    assert [d["state"] for d in data["deliveries"]] == ["DELIVERED"]
    out = chain.as_reviewer("get", "R1").stdout
    assert "NEEDS_REVALIDATION" in out and "DELIVERED to ops@x.test" in out


def _recaptured(chain: Cli, tmp_path: Path) -> None:
    """E1's page captured again with new bytes as E2, and accepted: E2 supersedes E1."""
    doc = tmp_path / "doc-v2.txt"
    doc.write_bytes(b"retries are NOT safe")
    capture = ("capture", str(doc), "--scope", "proj-a", "--uri", "https://x.test/doc")
    assert chain.as_agent(*capture, "--id", "E2").exit_code == 0
    assert chain.as_reviewer("accept", "E2").exit_code == 0


def test_get_and_corrections_say_a_stale_cause_was_superseded_not_revoked(
    chain: Cli, tmp_path: Path
) -> None:
    # Given E1's page captured again with new bytes: M1 and the delivered R1 rest on E1
    _recaptured(chain, tmp_path)
    m1 = json.loads(chain.as_reviewer("get", "M1", "--json").stdout)
    assert (m1["status"], m1["cause"], m1["cause_superseded_by"]) == ("STALE", "E1", "E2")

    # When get and corrections say why
    got = chain.as_reviewer("get", "M1").stdout
    due = chain.as_reviewer("corrections").stdout

    # Then both say E1 was superseded by E2, and neither that it was revoked
    assert re.search(r"│ stale cause\s+│ E1 superseded by E2\s+│", got), got
    assert re.search(r"│ R1\s+│.*│ E1 superseded by E2\s+│", due), due
    assert "revoked" not in got and "revoked" not in due


def test_get_shows_supersession_links_and_every_stale_cause(chain: Cli, tmp_path: Path) -> None:
    # Given X1 built on E1 and on a second source E3
    doc = tmp_path / "three.txt"
    doc.write_bytes(b"third source")
    chain.as_agent(
        "capture", str(doc), "--scope", "proj-a", "--uri", "https://z.test", "--id", "E3"
    )
    chain.as_reviewer("accept", "E3")
    chain.as_agent(
        "propose", "--scope", "proj-a", "--claim", "api.x", "--kind", "inference",
        "--value", "1", "--parent", "E1", "--parent", "E3", "--id", "X1",
    )  # fmt: skip
    chain.as_reviewer("accept", "X1")

    # When E1 is superseded by a new capture, and then E3 is revoked
    _recaptured(chain, tmp_path)
    chain.as_reviewer("revoke", "E3", "--reason", "wrong page")
    causes = json.loads(chain.as_reviewer("get", "X1", "--json").stdout)["stale_causes"]
    assert [c["cause"] for c in causes] == ["E1", "E3"]

    # Then get X1 names every stale cause, oldest first
    got = chain.as_reviewer("get", "X1").stdout
    first = re.search(r"│ stale cause\s+│ E1 superseded by E2\s+│", got)
    second = re.search(r"│ stale cause\s+│ E3 revoked: wrong page\s+│", got)
    assert first and second and first.start() < second.start(), got
    # And get names both ends of the supersession
    assert re.search(r"│ superseded by\s+│ E2\s+│", chain.as_reviewer("get", "E1").stdout)
    assert re.search(r"│ supersedes\s+│ E1\s+│", chain.as_reviewer("get", "E2").stdout)
    assert "supersede" not in chain.as_reviewer("get", "E3").stdout


def test_corrections_and_records_say_why_an_expired_record_is_not_valid(cli: Cli) -> None:
    # Given, a day ago, a fact that expired an hour later, and a delivered report on it
    then = datetime.now(UTC) - timedelta(days=1)
    with Ledger.open(cli.url, clock=lambda: then) as led:
        agent, reviewer = led.authenticate(cli.agent), led.authenticate(cli.reviewer)
        agent.propose(
            "proj-a", "api.rps", 10, Kind.FACT, id="F1", expires=then + timedelta(hours=1)
        )
        agent.propose("proj-a", "report.rps", "10 rps", Kind.REPORT, parents=["F1"], id="R1")
        reviewer.accept("F1")
        reviewer.accept("R1")
        reviewer.deliver("R1", recipient="ops@x.test")
        # and a candidate that expires next month: not VALID for its status alone
        agent.propose(
            "proj-a", "api.later", 1, Kind.FACT, id="C9", expires=then + timedelta(days=30)
        )
    expired = re.escape((then + timedelta(hours=1)).isoformat(timespec="seconds"))

    # When they are listed now
    records = cli("records", "--scope", "proj-a", "--token", cli.reviewer, COLUMNS="200").stdout
    due = cli("corrections", "--token", cli.reviewer, COLUMNS="200").stdout
    explained = cli.as_reviewer("explain", "--scope", "proj-a", "--claim", "report.rps", "--json")

    # Then they say which expiry passed, in explain's words
    [entry] = json.loads(explained.stdout)["entries"]
    assert entry["reasons"][0].startswith("ancestor F1 expired at ")
    assert re.search(rf"│ F1\s+│.*│ expired at {expired}\s+│", records), records
    assert re.search(rf"│ R1\s+│.*│ ancestor F1 expired at {expired}\s+│", records), records
    assert re.search(rf"│ R1\s+│.*│ ancestor F1 expired at {expired}\s+│", due), due
    [c9] = [line for line in records.splitlines() if "│ C9 " in line]
    assert "expired" not in c9, c9


def test_get_keeps_a_long_id_whole_at_80_columns(chain: Cli) -> None:
    # Given a record with an id of the longest legal length, and one built on it
    long_id = "P-" + "0123456789" * 12 + "abcdef"
    assert len(long_id) == 128
    with Ledger.open(chain.url) as led:
        agent = led.authenticate(chain.agent)
        agent.propose("proj-a", "api.long", 1, Kind.FACT, id=long_id)
        agent.propose("proj-a", "api.on", 2, Kind.INFERENCE, parents=["M1", long_id], id="C1")

    for rid in (long_id, "C1"):
        # When get shows it in an 80-column terminal
        result = chain("get", rid, "--token", chain.reviewer, COLUMNS="80")
        assert result.exit_code == 0, result.output

        # Then the long id is printed whole, on one line
        assert any(long_id in line for line in result.stdout.splitlines()), result.stdout

    # And a record whose ids fit is still a table within 80 columns
    r1 = chain("get", "R1", "--token", chain.reviewer, COLUMNS="80").stdout
    assert re.search(r"│ parents\s+│ M1\s+│", r1), r1
    assert max(len(line) for line in r1.splitlines()) <= 80


def test_listings_keep_kinds_statuses_and_validities_whole_at_80_columns(chain: Cli) -> None:
    _revoked(chain)
    for args in (("records", "--scope", "proj-a"), ("explain", "--scope", "proj-a", "--claim")):
        if args[0] == "explain":
            args = (*args, "api.retry_safe")
        shown = chain(*args, "--token", chain.reviewer, COLUMNS="80").stdout
        lines = shown.splitlines()
        assert max(len(line) for line in lines) <= 80 and "┏" in shown, shown  # a table
        assert "│ NEEDS_REVA" not in shown.replace("│ NEEDS_REVALIDATION ", ""), shown
        assert "│ inference " in shown and "│ STALE " in shown, shown
        assert args[0] == "explain" or "│ NEEDS_REVALIDATION " in shown, shown


def test_json_output_carries_an_infinite_float_as_the_string_inf(cli: Cli) -> None:
    with Ledger.open(cli.url) as led:
        agent, reviewer = led.authenticate(cli.agent), led.authenticate(cli.reviewer)
        value = {"huge": float("inf"), "small": [-float("inf"), 1.5]}
        reviewer.accept(agent.propose("proj-a", "api.huge", value, Kind.FACT, id="H1"))
    out = cli.as_reviewer("get", "H1", "--json").stdout
    assert "Infinity" not in out  # what json.dumps writes, and no JSON parser takes
    assert json.loads(out)["value"] == {"huge": "inf", "small": ["-inf", 1.5]}
    read = json.loads(
        cli.as_reviewer("read", "--scope", "proj-a", "--claim", "api.huge", "--json").stdout
    )
    assert read["value"] == {"huge": "inf", "small": ["-inf", 1.5]}
    # For people the number stays a number, told apart from the string "inf"
    shown = cli.as_reviewer("get", "H1").stdout
    assert "Infinity" in shown and '"inf"' not in shown


def test_audit_shows_the_whole_history_of_a_revoked_record(chain: Cli) -> None:
    _revoked(chain)
    data = json.loads(chain.as_reviewer("audit", "E1", "--json").stdout)
    assert set(data) == {"record", "events", "undeclared"}
    assert [e["type"] for e in data["events"]] == ["Proposed", "Accepted", "Revoked"]
    assert set(data["events"][0]) == {"position", "type", "at", "actor", "details"}
    assert data["events"][-1]["details"] == {"reason": "doc changed"}
    assert data["events"][-1]["actor"] == "reviewer"
    out = chain.as_reviewer("audit", "E1").stdout
    assert "REVOKED" in out and 'reason="doc changed"' in out


def test_history_lists_record_events_filtered_by_record_type_and_positions(chain: Cli) -> None:
    _revoked(chain)
    everything = json.loads(chain.as_reviewer("history", "--json").stdout)["events"]
    assert [(e["type"], e["details"]["record_id"]) for e in everything] == [
        ("Proposed", "E1"),
        ("Proposed", "M1"),
        ("Proposed", "R1"),
        ("Accepted", "E1"),
        ("Accepted", "M1"),
        ("Accepted", "R1"),
        ("Delivered", "R1"),
        ("Revoked", "E1"),
        ("MarkedStale", "M1"),
        ("MarkedStale", "R1"),
    ]
    positions = [e["position"] for e in everything]
    assert positions == sorted(positions)
    stale = json.loads(chain.as_reviewer("history", "--type", "MarkedStale", "--json").stdout)
    assert [e["details"]["cause"] for e in stale["events"]] == ["E1", "E1"]
    one = json.loads(chain.as_reviewer("history", "--record", "M1", "--json").stdout)["events"]
    assert [e["type"] for e in one] == ["Proposed", "Accepted", "MarkedStale"]
    window = json.loads(
        chain.as_reviewer(
            "history", "--from", str(positions[3]), "--to", str(positions[5]), "--json"
        ).stdout
    )["events"]
    assert [e["position"] for e in window] == positions[3:6]
    out = chain.as_reviewer("history", "--type", "Revoked").stdout
    assert "Revoked" in out and "E1" in out and "Proposed" not in out


def test_session_history_filters_on_every_backend(world: World) -> None:
    # Given records in proj-a and proj-b, and a reviewer auditing both
    world.agent.propose(scope="proj-a", claim_key="a", value=1, kind=Kind.FACT, id="A1")
    world.agent.propose(scope="proj-b", claim_key="b", value=2, kind=Kind.FACT, id="B1")
    world.reviewer.accept("A1")
    world.reviewer.accept("B1")
    world.reviewer.revoke("A1", reason="wrong")
    events = world.reviewer.history()
    assert [(e.type, e.details["record_id"]) for e in events] == [
        ("Proposed", "A1"),
        ("Proposed", "B1"),
        ("Accepted", "A1"),
        ("Accepted", "B1"),
        ("Revoked", "A1"),
    ]
    assert all(e.actor in ("agent-1", "reviewer") for e in events)
    # Then the filters narrow it; a principal without audit in proj-b sees none of it
    assert [e.type for e in world.reviewer.history(record="A1")] == [
        "Proposed",
        "Accepted",
        "Revoked",
    ]
    assert [e.details["record_id"] for e in world.reviewer.history(type="Accepted")] == [
        "A1",
        "B1",
    ]
    middle = [e.position for e in events[1:4]]
    window = world.reviewer.history(start=middle[0], stop=middle[-1])
    assert [e.position for e in window] == middle
    past = world.reviewer.as_of(position=events[2].position).history()
    assert [e.position for e in past] == [e.position for e in events[:3]]
    world.ledger.admin().grant("outsider", scope="proj-b", roles=["audit"])
    assert {e.details["record_id"] for e in world.outsider.history()} == {"B1"}
    with pytest.raises(InvalidInputError, match="history start -1 is not a position"):
        world.reviewer.history(start=-1)


def test_history_without_the_audit_role_anywhere_is_refused_not_empty(chain: Cli) -> None:
    for args in (("history", "--json"), ("history",)):
        result = chain.as_agent(*args)
        assert result.exit_code == 1
        assert "lacks role 'audit' in every scope" in result.stderr
        if "--json" in args:  # no listing: the refusal, as JSON
            error = {"type": "AccessDeniedError", "message": result.stderr[len("error: ") : -1]}
            assert json.loads(result.stdout) == {"error": error}
        else:
            assert result.stdout == ""


def test_corrections_json_lists_deliveries_needing_a_correction(chain: Cli) -> None:
    assert json.loads(chain.as_reviewer("corrections", "--json").stdout) == {"due": []}
    _revoked(chain)
    [due] = json.loads(chain.as_reviewer("corrections", "--json").stdout)["due"]
    assert set(due) == {
        "delivery", "scope", "validity", "status", "cause", "reason", "superseded_by",
        "cause_superseded_by",
    }  # fmt: skip
    assert due["superseded_by"] is None and due["cause_superseded_by"] is None  # revoked
    assert due["status"] == "STALE" and due["cause"] == "E1" and due["scope"] == "proj-a"
    assert due["delivery"]["recipient"] == "ops@x.test"
    assert "R1" in chain.as_reviewer("corrections").stdout
    # --record: that record's only (E1 itself was never delivered)
    of_r1 = json.loads(chain.as_reviewer("corrections", "--record", "R1", "--json").stdout)
    assert of_r1 == {"due": [due]}
    of_e1 = json.loads(chain.as_reviewer("corrections", "--record", "E1", "--json").stdout)
    assert of_e1 == {"due": []}
    unknown = chain.as_reviewer("corrections", "--record", "nope")
    assert unknown.exit_code == 1 and unknown.stdout == ""
    assert "record 'nope' is unknown or not visible" in unknown.stderr


def test_an_auditor_lists_the_corrections_owed_with_their_scope_but_issues_none(
    chain: Cli,
) -> None:
    _revoked(chain)
    with Ledger.open(chain.url) as led:
        led.admin().grant("auditor", scope="proj-a", roles=["audit"])
        auditor = led.admin().issue_token("auditor")
    listed = chain("corrections", "--token", auditor)
    assert listed.exit_code == 0, listed.output
    assert "scope" in listed.stdout and "proj-a" in listed.stdout and "R1" in listed.stdout
    [due] = json.loads(chain("corrections", "--json", "--token", auditor).stdout)["due"]
    position = chain.position
    refused = chain("correct", due["delivery"]["delivery_id"], "--note", "n", "--token", auditor)
    assert refused.exit_code == 1
    assert "'auditor' lacks role 'deliver' in scope 'proj-a'" in refused.stderr
    assert chain.position == position
    # and a principal with neither role is told which would do
    nothing = chain.as_agent("corrections")
    assert nothing.exit_code == 1
    assert "lacks role 'deliver' or 'audit' in every scope" in nothing.stderr


def test_corrections_say_why_a_valid_record_is_owed_one(chain: Cli) -> None:
    # R1 is VALID again, but on another basis than its delivered copy (M1 re-based)
    _revoked(chain)
    with Ledger.open(chain.url) as led:
        agent, reviewer = led.authenticate(chain.agent), led.authenticate(chain.reviewer)
        agent.propose(scope="proj-a", claim_key="e2", value=1, kind="fact", id="E2")
        reviewer.accept("E2")
        reviewer.revalidate("M1", note="re-based", parents=["E2"])
        reviewer.revalidate("R1", note="M1 holds again")
    shown = chain("corrections", "--token", chain.reviewer, COLUMNS="200").stdout
    row = next(line for line in shown.splitlines() if "R1" in line)
    assert "VALID" in row and "re-based since the delivery" in row


def test_correct_only_if_owed_issues_one_correction_however_often_it_runs(chain: Cli) -> None:
    _revoked(chain)
    [due] = json.loads(chain.as_reviewer("corrections", "--json").stdout)["due"]
    delivery_id = due["delivery"]["delivery_id"]
    args = ("correct", delivery_id, "--note", "withdrawn", "--only-if-owed")

    assert chain.as_reviewer(*args).exit_code == 0
    position = chain.position
    again = chain.as_reviewer(*args)

    assert again.exit_code == 1 and "error:" in again.stderr
    assert chain.position == position  # nothing written
    assert json.loads(chain.as_reviewer("corrections", "--json").stdout) == {"due": []}


def test_as_of_position_answers_as_the_ledger_did_then(chain: Cli) -> None:
    before = chain.position
    _revoked(chain)
    args = ["read", "--scope", "proj-a", "--claim", "api.retry_safe", "--json"]
    result = chain("as-of", "--position", str(before), *args, "--token", chain.agent)
    assert result.exit_code == 0, result.output
    then = json.loads(result.stdout)
    assert then["outcome"] == "FOUND"
    now = json.loads(chain.as_agent(*args).stdout)
    assert now["outcome"] == "MISSING"
    got = chain(
        "as-of", "--position", str(before), "get", "R1", "--json", "--token", chain.reviewer
    )
    assert json.loads(got.stdout)["status"] == "ACCEPTED"
    history = chain(
        "as-of", "--position", str(before), "history", "--json", "--token", chain.reviewer
    )
    assert "Revoked" not in [e["type"] for e in json.loads(history.stdout)["events"]]


def test_as_of_time_answers_as_the_ledger_did_at_that_instant(chain: Cli) -> None:
    with Ledger.open(chain.url) as led:
        moment = led.now()
    _revoked(chain)
    result = chain(
        "as-of", "--time", moment.isoformat(), "get", "E1", "--json", "--token", chain.reviewer
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "ACCEPTED"


def test_export_without_the_audit_role_anywhere_is_refused_not_empty(chain: Cli) -> None:
    result = chain.as_agent("export")
    assert result.exit_code == 1
    assert result.stderr == "error: export refused: 'agent-1' lacks role 'audit' in every scope\n"
    assert result.stdout == ""


def test_revalidating_a_record_never_accepted_reports_it_candidate(cli: Cli) -> None:
    # SPEC 13.2: a STALE record that was never accepted returns to CANDIDATE.
    with Ledger.open(cli.url) as led:
        agent, reviewer = led.authenticate(cli.agent), led.authenticate(cli.reviewer)
        reviewer.accept(agent.propose("proj-a", "a", 1, Kind.FACT, id="EA"))
        reviewer.accept(agent.propose("proj-a", "b", 2, Kind.FACT, id="EB"))
        agent.propose("proj-a", "c", 3, Kind.INFERENCE, parents=["EA"], id="CX")
        reviewer.revoke("EA", reason="wrong")
    out = json.loads(cli.as_reviewer("revalidate", "CX", "--parent", "EB", "--json").stdout)
    assert out == {"id": "CX", "status": "CANDIDATE", "position": cli.position}
    assert cli.as_reviewer("get", "CX", "--json").stdout.count('"CANDIDATE"') == 1


def test_export_writes_prov_json_to_stdout_or_a_file(chain: Cli, tmp_path: Path) -> None:
    from prov.model import ProvDocument

    out = chain.as_reviewer("export", "--record", "R1", "--ancestors")
    assert out.exit_code == 0, out.output
    doc = ProvDocument.deserialize(content=out.stdout, format="json")
    labels = {str(e.identifier) for e in doc.get_records() if e.is_element()}
    assert {"rec:E1", "rec:M1", "rec:R1", "agent:agent-1", "agent:reviewer"} <= labels
    target = tmp_path / "r1.provn"
    written = chain.as_reviewer(
        "export", "--format", "prov-n", "--scope", "proj-a", "-o", str(target)
    )
    assert written.exit_code == 0 and f"wrote {target}" in written.stdout
    assert target.read_text().startswith("document")
    xml = chain.as_reviewer("export", "--format", "prov-xml")
    assert "<prov:document" in xml.stdout


def test_graph_dot_and_mermaid_print_to_stdout(chain: Cli) -> None:
    _revoked(chain)
    dot = chain.as_reviewer("graph", "E1", "--descendants", "--format", "dot")
    assert dot.exit_code == 0, dot.output
    assert dot.stdout.startswith("digraph provledger {")
    assert '"E1" -> "M1";' in dot.stdout and '"M1" -> "R1";' in dot.stdout
    mermaid = chain.as_reviewer("graph", "M1", "--format", "mermaid")
    assert mermaid.stdout.startswith("flowchart TD")
    assert ":::revoked" in mermaid.stdout and ":::stale" in mermaid.stdout


@pytest.mark.parametrize("side", ["-wal", "-shm", "-journal"])
def test_a_side_file_sqlite_has_not_made_yet_is_the_ledgers_own_all_the_same(
    chain: Cli, side: str
) -> None:
    # Given the ledger closed: SQLite has removed its -wal and -shm
    name = Path(f"{chain.path}{side}")
    assert not name.exists()
    # Then writing there is refused (SQLite would take it for its own, or delete it)
    result = chain.as_reviewer("export", "-o", str(name))
    assert result.exit_code == 1 and "is the ledger's own file" in result.stderr, result.output
    assert not name.exists()


@pytest.mark.parametrize(
    "command",
    [
        ["export", "-o", "{file}", "--token", "{token}"],
        ["graph", "E1", "--format", "svg", "-o", "{file}", "--token", "{token}"],
        ["snapshot", "{ref}", "-o", "{file}", "--token", "{token}"],
        ["bundle", "E1", "--key", "{key}", "-o", "{file}", "--token", "{token}"],
        ["head", "--key", "{key}", "--append", "{file}"],
    ],
    ids=["export", "graph", "snapshot", "bundle", "head"],
)
@pytest.mark.parametrize("target", ["ledger", "link", "wal"])
def test_an_output_file_that_is_the_ledgers_own_is_refused_and_left_alone(
    chain: Cli, tmp_path: Path, command: list[str], target: str
) -> None:
    # Given the ledger's file, a link to it, and its -wal, named as a file to write
    generate_key(tmp_path / "k")
    (tmp_path / "link.db").symlink_to(chain.path)
    file = {"ledger": chain.path, "link": tmp_path / "link.db"}.get(target)
    file = file or Path(f"{chain.path}-wal")
    with Ledger.open(chain.url) as led:  # open: its -wal is there while the command runs
        evidence = led.authenticate(chain.reviewer).get("E1").evidence
        assert evidence is not None
        position = led.position
        values = {"file": file, "key": tmp_path / "k", "ref": evidence["snapshot_ref"]}
        args = [a.format(token=chain.reviewer, **values) for a in command]
        before = file.read_bytes()
        result = chain(*args)
        # Then the command is refused, naming the file, and the file is as it was
        assert result.exit_code == 1, result.output
        assert f"{command[0]} refused: {file} is the ledger's own file" in result.stderr
        assert "nothing was written" in result.stderr
        assert file.read_bytes() == before
    with Ledger.open(chain.url) as led:
        assert led.position == position and led.verify().ok


def test_the_wal_of_a_ledger_opened_through_a_link_is_its_own_file(
    chain: Cli, tmp_path: Path
) -> None:
    # Given the ledger opened through a link elsewhere: SQLite keeps its -wal
    # beside the file itself, not beside the link
    (tmp_path / "links").mkdir()
    link = tmp_path / "links" / "ledger.db"
    link.symlink_to(chain.path)
    via_link = Cli(url=f"sqlite:///{link}", path=link, agent=chain.agent, reviewer=chain.reviewer)
    wal = Path(f"{chain.path}-wal")
    with Ledger.open(via_link.url):
        before = wal.read_bytes()
        result = via_link.as_reviewer("export", "-o", str(wal))
        # Then writing to that -wal is refused, and it is left alone
        assert result.exit_code == 1, result.output
        assert "is the ledger's own file" in result.stderr
        assert wal.read_bytes() == before


def test_a_revocation_too_long_to_list_says_how_to_list_what_it_marked(cli: Cli) -> None:
    # Given E with 25 records resting on it, and a STALE record an earlier
    # revocation left
    with Ledger.open(cli.url) as led:
        agent = led.authenticate(cli.agent)
        reviewer = led.authenticate(cli.reviewer)
        for rid in ("E", "OLD"):
            agent.propose(scope="proj-a", claim_key=rid, value=1, kind=Kind.FACT, id=rid)
            reviewer.accept(rid)
        agent.propose(scope="proj-a", claim_key="o", value=1, kind=Kind.INFERENCE,
                      parents=["OLD"], id="O1")  # fmt: skip
        reviewer.accept("O1")
        reviewer.revoke("OLD", reason="earlier")
        agent.propose_many(
            {"scope": "proj-a", "claim_key": f"m.{i}", "value": i, "kind": "inference",
             "parents": ["E"], "id": f"M{i:02d}"}
            for i in range(25)
        )  # fmt: skip
    # When E is revoked, its summary points to a command listing what it marked
    said = cli.as_reviewer("revoke", "E", "--reason", "wrong").stdout
    hint = re.search(r"\(provledger (history --type MarkedStale --from \d+ --limit \d+),", said)
    assert hint is not None, said
    listed = cli.as_reviewer(*hint[1].split(), "--json")
    # and that command lists the records it marked, and only those
    marked = [e["details"]["record_id"] for e in json.loads(listed.stdout)["events"]]
    assert sorted(marked) == [f"M{i:02d}" for i in range(25)]


def test_a_mermaid_graph_over_mermaids_edge_limit_is_written_with_a_warning(
    cli: Cli, tmp_path: Path
) -> None:
    # Given 26 records resting on R, and 20 resting on all 26: 546 edges below R
    with Ledger.open(cli.url) as led:
        agent = led.authenticate(cli.agent)
        agent.propose(scope="proj-a", claim_key="r", value=0, kind=Kind.FACT, id="R")
        bases = [f"B{i}" for i in range(26)]
        agent.propose_many(
            {"scope": "proj-a", "claim_key": f"b.{i}", "value": i, "kind": "inference",
             "parents": ["R"], "id": rid}
            for i, rid in enumerate(bases)
        )  # fmt: skip
        agent.propose_many(
            {"scope": "proj-a", "claim_key": f"c.{i}", "value": i, "kind": "inference",
             "parents": bases, "id": f"C{i}"}
            for i in range(20)
        )  # fmt: skip
    target = tmp_path / "many.mmd"
    result = cli.as_reviewer(
        "graph", "R", "--descendants", "--format", "mermaid", "-o", str(target)
    )
    small = cli.as_reviewer("graph", "C0", "--ancestors", "--format", "mermaid")
    # Then it is written, saying Mermaid will not draw it by default; a small one is quiet
    assert result.exit_code == 0, result.output
    assert target.read_text().startswith("flowchart TD")
    assert "warning: the picture has 546 edges, and Mermaid draws at most 500" in result.stderr
    assert small.exit_code == 0 and small.stderr == "", small.output


@pytest.mark.parametrize("fmt", ["svg", "png"])
def test_graph_renders_svg_and_png_with_graphviz_or_falls_back_to_dot(
    chain: Cli, tmp_path: Path, fmt: str
) -> None:
    _revoked(chain)
    target = tmp_path / f"impact.{fmt}"
    result = chain.as_reviewer("graph", "E1", "--descendants", "--format", fmt, "-o", str(target))
    assert result.exit_code == 0, result.output
    if shutil.which("dot"):
        data = target.read_bytes()
        assert data.startswith(b"\x89PNG") if fmt == "png" else b"<svg" in data
        assert f"wrote {target} ({fmt}: 3 records, 2 edges)" in result.stdout
        assert result.stderr == ""
    else:  # pragma: no cover - only where Graphviz is not installed
        assert not target.exists()
        assert target.with_suffix(".dot").read_text().startswith("digraph")
        assert "dot` program is not installed" in result.stderr


def test_graph_falls_back_to_dot_text_when_the_dot_program_is_missing(
    chain: Cli, tmp_path: Path
) -> None:
    target = tmp_path / "impact.svg"
    result = chain(
        "graph",
        "E1",
        "--descendants",
        "-o",
        str(target),
        "--token",
        chain.reviewer,
        PATH=str(tmp_path / "empty-bin"),
    )
    assert result.exit_code == 0, result.output
    assert not target.exists()
    assert target.with_suffix(".dot").read_text().startswith("digraph provledger {")
    assert result.stderr.startswith("warning: Graphviz's `dot` program is not installed")
    assert "apt-get install graphviz" in result.stderr
    assert "impact.dot (dot:" in result.stdout
    assert "replaced" not in result.stderr
    # A second run writes that file again: a name not given is said to be replaced.
    target.with_suffix(".dot").write_text("digraph mine {}")
    again = chain(
        "graph", "E1", "-o", str(target), "--token", chain.reviewer, PATH=str(tmp_path / "e")
    )
    assert again.exit_code == 0, again.output
    assert f"({target.with_suffix('.dot')}; the file there before was replaced)" in again.stderr
    assert target.with_suffix(".dot").read_text().startswith("digraph provledger {")


@pytest.mark.parametrize("fmt", ["svg", "png"])
def test_graph_to_stdout_without_the_dot_program_is_refused_not_written_as_dot_text(
    chain: Cli, tmp_path: Path, fmt: str
) -> None:
    # `graph E1 --format png > impact.png` would otherwise leave DOT text in a .png
    # and exit 0
    result = chain(
        "graph", "E1", "--format", fmt, "--token", chain.reviewer, PATH=str(tmp_path / "empty")
    )
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert result.stderr == (
        f"error: graph refused: Graphviz's `dot` program is not installed, so no "
        f"{fmt.upper()} can be drawn, and standard output would get DOT text in its "
        "place; nothing was written: install Graphviz (Debian/Ubuntu: apt-get install "
        "graphviz; macOS: brew install graphviz), give --format dot or mermaid, or -o "
        f"FILE.{fmt} (which writes the DOT source to FILE.dot)\n"
    )


# -- refused commands: exit 1, one line naming the problem, log unchanged ----------


PROPOSE = "propose --scope proj-a --claim k --kind fact --value 1"

#: (who, command line, what the one error line must say)
REFUSALS: list[tuple[str, str, str]] = [
    ("agent", "accept M9", "accept refused: record 'M9' is unknown or not visible to 'agent-1'"),
    ("reviewer", "accept E1", "record 'E1' is ACCEPTED; accept needs CANDIDATE"),
    ("agent", "revoke E1 --reason x", "revoke refused: 'agent-1' lacks role 'approve'"),
    ("agent", f"{PROPOSE} --parent NOPE", "parent 'NOPE' of "),
    ("agent", f"{PROPOSE} --id M1", "record 'M1' already exists"),
    ("agent", f"{PROPOSE} --expires 2000-01-01T00:00:00+00:00", "is not in the future"),
    ("agent", f"{PROPOSE} --conditions '[1, 2]'", "conditions must be a mapping"),
    ("agent", "propose --scope proj-b --claim k --kind fact --value 1", "lacks role 'propose'"),
    ("agent", "capture - --scope proj-b --uri u", "capture refused: 'agent-1' lacks role"),
    ("agent", "read --scope proj-b --claim k", "lacks role 'read' in scope 'proj-b'"),
    ("agent", "audit E1", "audit refused: 'agent-1' lacks role 'audit' in scope 'proj-a'"),
    ("agent", "history --record E1", "history refused: 'agent-1' lacks role 'audit'"),
    ("reviewer", "revalidate M1", "record 'M1' is ACCEPTED; revalidate needs STALE"),
    ("reviewer", "reject M1 --reason x", "record 'M1' is ACCEPTED; reject needs CANDIDATE"),
    ("reviewer", "deliver NOPE --to a@x.test", "deliver refused: record 'NOPE' is unknown"),
    ("reviewer", "correct d-nope --note x", "delivery 'd-nope' is unknown"),
    ("reviewer", "as-of --position 99999 get E1", "as-of --position 99999 is beyond the log"),
    ("reviewer", "export --scope proj-b", "export refused: 'reviewer' lacks role 'audit'"),
    ("agent", "export --record E1", "export refused: 'agent-1' lacks role 'audit'"),
    ("reviewer", "graph NOPE --format dot", "graph refused: record 'NOPE' is unknown"),
    ("bad", "get E1", "error: token is unknown"),
    ("bad", "capture - --scope proj-a --uri u", "error: token is unknown"),
]


@pytest.mark.parametrize(("who", "line", "message"), REFUSALS, ids=[r[1] for r in REFUSALS])
def test_a_refused_command_exits_1_with_one_error_line_and_leaves_the_log_unchanged(
    chain: Cli, who: str, line: str, message: str
) -> None:
    token = {"agent": chain.agent, "reviewer": chain.reviewer, "bad": "plt_not-a-token"}[who]
    before = chain.position
    result = chain(*shlex.split(line), "--token", token, input=b"content")
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("error: ")
    assert result.stderr.count("\n") == 1
    assert message in result.stderr
    assert chain.position == before


def test_accepting_ones_own_proposal_is_refused(cli: Cli) -> None:
    cli.ok("grant", "agent-1", "--scope", "proj-a", "--roles", "approve")
    cli.as_agent(
        "propose",
        "--scope",
        "proj-a",
        "--claim",
        "k",
        "--kind",
        "fact",
        "--value",
        "1",
        "--id",
        "S1",
    )
    before = cli.position
    result = cli.as_agent("accept", "S1")
    assert result.exit_code == 1
    assert result.stderr == "error: 'agent-1' proposed record 'S1' and may not accept it\n"
    assert cli.position == before


def test_a_grant_with_an_unknown_role_is_refused(cli: Cli) -> None:
    before = cli.position
    result = cli("grant", "x", "--scope", "proj-a", "--roles", "read,superuser")
    assert result.exit_code == 1
    assert "role 'superuser' is not one of" in result.stderr
    assert cli.position == before


def test_revoking_an_unknown_token_is_refused(cli: Cli) -> None:
    before = cli.position
    result = cli("token", "revoke", "plt_nope")
    assert result.exit_code == 1
    assert result.stderr == "error: token is unknown: this ledger never issued it\n"
    assert cli.position == before


def test_a_database_that_cannot_be_opened_is_one_error_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'missing-dir' / 'x.db'}"
    result = CliRunner().invoke(main, ["init", "--url", url])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    folder = tmp_path / "missing-dir"
    assert f"the directory {str(folder)!r} does not exist (create it first)" in result.stderr
    missing = CliRunner().invoke(main, ["get", "E1", "--token", "t", "--url", url])
    assert missing.exit_code == 1 and "no ledger at" in missing.stderr


def test_an_output_file_that_cannot_be_written_is_one_error_line(
    chain: Cli, tmp_path: Path
) -> None:
    target = tmp_path / "missing-dir" / "impact.dot"
    result = chain.as_reviewer("graph", "E1", "--format", "dot", "-o", str(target))
    assert result.exit_code == 1
    assert result.stderr == f"error: {target}: No such file or directory\n"


# -- usage errors: exit 2 ---------------------------------------------------------------


USAGE_ERRORS = [
    "propose --scope proj-a --claim k --kind fact",
    f"{PROPOSE} --value-str 1",
    "propose --scope proj-a --claim k --kind fact --value 'not json'",
    # Python's json reads these; JSON has no such numbers
    "propose --scope proj-a --claim k --kind fact --value Infinity",
    "propose --scope proj-a --claim k --kind fact --value -Infinity",
    "propose --scope proj-a --claim k --kind fact --value NaN",
    "propose --scope proj-a --claim k --kind fact --value 1e999",
    f"{PROPOSE} --conditions '{{\"a\": Infinity}}'",
    "propose --scope proj-a --claim k --kind fact --value " + "1" * 5000,
    "propose --scope proj-a --claim k --kind gossip --value 1",
    f"{PROPOSE} --conditions '{{'",
    "capture no-such-file.txt --scope proj-a --uri u",
    "read --claim k",
    "read --scope proj-a --claim k --at yesterday",
    "read --scope proj-a --claim k --at 2026-01-01T00:00:00",
    f"{PROPOSE} --expires 2030-01-01T00:00:00",
    "history --from -1",
    "history --type Revoke",
    "graph E1 --format bmp",
    "export --ancestors",
    "export --format rdf",
    "as-of get E1",
    "as-of --position 1 --time 2026-01-01T00:00:00+00:00 get E1",
    "accept",
    "frobnicate",
]


@pytest.mark.parametrize("line", USAGE_ERRORS)
def test_a_usage_error_exits_2_and_writes_nothing(chain: Cli, line: str) -> None:
    before = chain.position
    result = chain(*shlex.split(line), "--token", chain.agent)
    assert result.exit_code == 2, result.output
    assert "Error" in result.stderr
    # ... with an example of the command (its --help's), or of a fix the error names
    example = result.stderr.split("Example:\n", 1)[-1] if "Example:\n" in result.stderr else ""
    assert example.startswith("  provledger ") or "e.g." in result.stderr, result.stderr
    assert "set_int_max_str_digits" not in result.stderr  # Python's advice, not ours
    assert chain.position == before


def test_a_principal_command_without_a_token_is_a_usage_error(chain: Cli) -> None:
    result = chain("get", "E1")
    assert result.exit_code == 2
    assert "Missing option '--token'" in result.stderr


# -- help, README -------------------------------------------------------------------------


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        yield (*prefix, name)
        if isinstance(command, click.Group) and name != "as-of":
            yield from _commands(command, (*prefix, name))


ALL_COMMANDS = list(_commands(main))


def test_the_cli_has_every_command_the_issue_asks_for() -> None:
    names = {" ".join(c) for c in ALL_COMMANDS}
    wanted = {
        "init",
        "grant",
        "token",
        "token issue",
        "token revoke",
        "capture",
        "propose",
        "accept",
        "reject",
        "revoke",
        "revalidate",
        "deliver",
        "read",
        "get",
        "explain",
        "audit",
        "history",
        "as-of",
        "corrections",
        "rebuild",
        "stats",
        "demo",
        "export",
        "graph",
        "records",
    }
    assert wanted <= names


@pytest.mark.parametrize("path", ALL_COMMANDS, ids=" ".join)
def test_every_command_has_help_with_an_example_and_is_in_the_readme(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(main, [*path, "-h"])
    assert result.exit_code == 0
    help_text = result.stdout
    assert "Example:" in help_text
    example = help_text.split("Example:", 1)[1]
    assert f"provledger {' '.join(path)}" in example
    assert f"provledger {' '.join(path)}" in README.read_text()


def test_read_commands_are_also_available_under_as_of() -> None:
    result = CliRunner().invoke(main, ["as-of", "--help"])
    for name in (
        "read",
        "get",
        "explain",
        "audit",
        "history",
        "corrections",
        "export",
        "graph",
        "records",
    ):
        assert re.search(rf"^\s+{name}\s", result.stdout, flags=re.M), name
    # and each one's help is shown there as anywhere, with no moment given yet
    shown = CliRunner().invoke(main, ["as-of", "read", "--help"])
    assert shown.exit_code == 0 and shown.stdout.startswith("Usage: main as-of read [OPTIONS]")
    # while running one without a moment (or with both) is a usage error
    for moment in ([], ["--position", "1", "--time", "2026-01-01T00:00:00+00:00"]):
        bare = CliRunner().invoke(main, ["as-of", *moment, "get", "E1", "--token", "t"])
        assert bare.exit_code == 2, bare.output
        assert "as-of: give exactly one of --position or --time" in bare.stderr


def _walkthrough() -> str:
    section = README.read_text().split("## Command line", 1)[1].split("\n## ", 1)[0]
    walkthrough = section.split("### Walkthrough", 1)[1]
    blocks = re.findall(r"```sh\n(.*?)```", walkthrough, flags=re.S)
    # the walkthrough, then the Mermaid / PROV and the run follow-ups that continue the
    # same session (the last block repeats the start on PostgreSQL)
    return "\n".join(blocks[:3])


def _svg_texts(svg: str) -> list[str]:
    # The revocation's time differs from run to run.
    texts = [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg)]
    return sorted(re.sub(r"\d{4}-\d\d-\d\dT[\d:]{8}[+-]\d\d:\d\d", "TIME", t) for t in texts)


def test_the_readme_walkthrough_runs_from_an_empty_directory_to_a_picture(tmp_path: Path) -> None:
    # The venv "Set up and go" made: activating it puts a `provledger` on the PATH that
    # runs this interpreter's package, however pytest was started.
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    shim = bin_dir / "provledger"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ledger "$@"\n')
    shim.chmod(0o755)
    (bin_dir / "activate").write_text(f'export PATH="{bin_dir}:$PATH"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVLEDGER_")}
    script = _walkthrough()
    assert script.splitlines()[0] == "source .venv/bin/activate"
    assert script.splitlines()[1].startswith("mkdir -p provledger-walkthrough && cd")
    assert "graph E1 --descendants --format svg -o impact.svg" in script
    assert "--token" not in script  # tokens go in the environment

    done = subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert done.returncode == 0, done.stderr
    here = tmp_path / "provledger-walkthrough"
    assert "FOUND" in done.stdout and "MISSING" in done.stdout
    assert "stale because E1 was revoked: doc changed" in done.stdout
    assert (here / "r1.prov.json").exists()
    assert (here / "as-read.txt").read_text() == "POST /orders is not idempotent; do not retry.\n"
    assert "warning" not in done.stderr
    if shutil.which("dot"):
        svg = (here / "impact.svg").read_text()
        # The README's picture is what the walkthrough draws.
        assert _svg_texts(svg) == _svg_texts(DOCS_IMPACT.read_text())
        assert "REVOKED / INVALID" in svg and "DELIVERED" in svg
    else:  # pragma: no cover - only where Graphviz is not installed
        assert (here / "impact.dot").read_text().startswith("digraph")
    # Pasted again, it starts over: no "already exists", nothing written elsewhere.
    again = subprocess.run(
        ["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert again.returncode == 0, again.stderr
    assert "FOUND" in again.stdout and "stale because E1 was revoked" in again.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == [".venv", "provledger-walkthrough"]


def test_the_readme_shows_the_walkthrough_picture() -> None:
    assert "](docs/impact.svg)" in README.read_text()
    assert DOCS_IMPACT.read_text().lstrip().startswith("<?xml")


def test_with_stdout_closed_nothing_runs_and_a_full_stdout_is_no_refusal(tmp_path: Path) -> None:
    # Given stdout closed: init is refused before it creates a ledger whose one-time
    # admin token would be printed nowhere
    url = f"sqlite:///{tmp_path / 'closed.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVLEDGER_")}
    provledger = [sys.executable, "-m", "ledger"]
    closed = subprocess.run(
        [*provledger, "init", "--url", url],
        env=env,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: os.close(1),  # the child's own stdout
        check=False,
    )
    assert closed.returncode == 1
    assert (
        closed.stderr.decode() == "error: stdout is closed; provledger writes its answers there\n"
    )
    assert not (tmp_path / "closed.db").exists()
    # And an answer that cannot be written (a full disk) after a write is not
    # reported as a refusal: the record was proposed
    token = _fresh_token(tmp_path, env)
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [
                *provledger,
                "propose",
                "--scope",
                "proj-a",
                "--claim",
                "c",
                "--value",
                "1",
                "--kind",
                "fact",
            ],
            env={
                **env,
                "PROVLEDGER_URL": f"sqlite:///{tmp_path / 'l.db'}",
                "PROVLEDGER_TOKEN": token,
            },
            stdout=full,
            stderr=subprocess.PIPE,
            check=False,
        )
    assert done.returncode == 1
    assert done.stderr.decode().startswith(
        "error: the answer could not be written to stdout (No space left on device); "
        "anything the command wrote to the ledger stands"
    )
    with Ledger.open(f"sqlite:///{tmp_path / 'l.db'}") as led:
        assert led.stats()["records"] == 1


def test_a_full_output_file_is_named_not_taken_for_stdout(tmp_path: Path) -> None:
    # Given an output file on a full device
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVLEDGER_")}
    token = _fresh_token(tmp_path, env)
    env |= {"PROVLEDGER_URL": f"sqlite:///{tmp_path / 'l.db'}", "PROVLEDGER_TOKEN": token}
    provledger = [sys.executable, "-m", "ledger"]
    with Ledger.open(env["PROVLEDGER_URL"]) as led:
        led.admin().grant("agent-1", scope="proj-a", roles=["audit"])
    # When an export is written there, the error names the file, not stdout
    done = subprocess.run(
        [*provledger, "export", "--format", "prov-json", "-o", "/dev/full"],
        env=env,
        capture_output=True,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.decode() == "error: /dev/full: No space left on device\n"
    assert done.stdout == b""


def _fresh_token(tmp_path: Path, env: dict[str, str]) -> str:
    """A ledger file ``l.db`` in ``tmp_path`` and a proposer's token in proj-a."""
    with Ledger.open(f"sqlite:///{tmp_path / 'l.db'}") as led:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
        return admin.issue_token("agent-1")


def test_ci_installs_graphviz_when_dot_is_missing() -> None:
    ci = (README.parent / ".ci" / "run").read_text()
    assert "command -v dot" in ci and "apt_get install -y -qq graphviz" in ci
    assert "apt_get() {" in ci and "apt-get -o DPkg::Lock::Timeout=600" in ci


# -- tamper evidence ----------------------------------------------------------------------


def test_digest_then_verify_against_it_after_more_commands(chain: Cli) -> None:
    kept = chain.ok("digest").stdout.strip()
    size, position, root = kept.split(":")
    assert int(size) == int(position) == chain.position and len(root) == 64
    assert chain.json("digest")["digest"] == kept

    _revoked(chain)
    result = chain.ok("verify", "--against", kept)
    assert result.stdout.startswith("ok: ") and f"extends {kept}" in result.stdout
    report = chain.json("verify", "--against", kept)
    assert report["ok"] is True and report["consistency_proof"]


def test_a_signed_head_line_stands_for_the_digest_it_signs(chain: Cli, tmp_path: Path) -> None:
    key = tmp_path / "ledger-key"
    chain.ok("keygen", "--out", str(key))
    line = chain.ok("head", "--key", str(key)).stdout.strip()
    kept = chain.ok("digest").stdout.strip()
    _revoked(chain)
    # verify and prove take the head's line for its digest, and say the digest
    result = chain.ok("verify", "--against", line)
    assert f"; extends {kept} (" in result.stdout and "signature" not in result.stdout
    proofs = json.loads(chain.as_reviewer("prove", "E1", "--against", line).stdout)
    assert proofs and all(p["size"] == int(kept.split(":")[0]) for p in proofs)


def test_verify_exits_1_naming_the_position_of_tampered_bytes(chain: Cli) -> None:
    import sqlite3

    with sqlite3.connect(chain.path) as con:
        con.execute("DROP TRIGGER stored_events_no_update")
        con.execute("UPDATE stored_events SET topic = topic || 'x' WHERE rowid = 6")
    result = chain("verify")
    assert result.exit_code == 1
    assert result.stderr == (
        "error: tampering detected: the stored bytes at position 6 differ from what was appended\n"
    )


def test_verify_says_how_many_more_problems_its_json_lists(chain: Cli) -> None:
    import sqlite3

    # Given E1's acceptance removed with its leaf (M1's, after it, now looks forged)
    # once E1 was revoked (its revocation now misses the version before it)
    _revoked(chain)
    with sqlite3.connect(chain.path) as con:
        con.execute("DROP TRIGGER stored_events_no_delete")
        con.execute("DROP TRIGGER pl_merkle_leaves_no_delete")
        (gone,) = con.execute(
            "SELECT min(rowid) FROM stored_events WHERE topic LIKE '%Accepted'"
        ).fetchone()
        con.execute("DELETE FROM stored_events WHERE rowid = ?", (gone,))
        con.execute("DELETE FROM pl_merkle_leaves WHERE position = ?", (gone,))
    assert chain("rebuild").exit_code != 0  # (the views as stored differed: rebuilt)
    # When it is verified, the one line says how many more problems --json lists
    result = chain("verify")
    assert result.exit_code == 1
    report = json.loads(chain("verify", "--json").stdout)
    more = len(report["problems"]) - 1
    assert more >= 1, report
    assert result.stderr == (
        f"error: tampering detected: {report['problem']} (and {more} more: --json lists "
        "every one)\n"
    )


def test_verify_against_a_malformed_digest_could_not_check(chain: Cli) -> None:
    result = chain("verify", "--against", "not-a-digest")
    assert result.exit_code == 3  # not 1: nothing was checked, no problem was found
    assert result.stderr.startswith("error: cannot verify against 'not-a-digest'")


@pytest.mark.parametrize(
    ("given", "missing"), [("--heads", "--public-key"), ("--public-key", "--heads")]
)
def test_verify_with_heads_or_their_key_alone_is_a_usage_error(
    chain: Cli, given: str, missing: str
) -> None:
    result = chain("verify", given, "some-file")
    assert result.exit_code == 2, result.output
    assert f"Error: {given} needs {missing}" in result.stderr


def test_prove_prints_inclusion_proofs_a_third_party_can_check(chain: Cli) -> None:
    from ledger import merkle

    root = chain.ok("digest").stdout.strip().split(":")[2]
    proofs = json.loads(chain.as_reviewer("prove", "E1").stdout)
    assert len(proofs) == 2  # Proposed, Accepted
    for proof in proofs:
        assert proof["root"] == root
        leaf = merkle.leaf_hash(bytes.fromhex(proof["leaf_data"]))
        path = [bytes.fromhex(p) for p in proof["path"]]
        assert merkle.verify_inclusion(
            leaf, proof["index"], proof["size"], path, bytes.fromhex(root)
        )


def test_prove_against_a_kept_digest_gives_proofs_that_digest_checks(chain: Cli) -> None:
    from ledger import merkle

    kept = merkle.LogDigest.parse(chain.ok("digest").stdout)
    with Ledger.open(chain.url) as led:  # the log grows after the digest was kept
        led.authenticate(chain.reviewer).revoke("E1", reason="moved")
    proofs = json.loads(chain.as_reviewer("prove", "E1", "--against", str(kept)).stdout)
    assert len(proofs) == 2  # Proposed, Accepted: the revocation came after
    for proof in proofs:
        assert (proof["root"], proof["size"]) == (kept.root, kept.size)
        leaf = merkle.leaf_hash(bytes.fromhex(proof["leaf_data"]))
        path = [bytes.fromhex(p) for p in proof["path"]]
        assert merkle.verify_inclusion(
            leaf, proof["index"], kept.size, path, bytes.fromhex(kept.root)
        )
    forged = f"{kept.size}:{kept.position}:{'0' * 64}"
    result = chain.as_reviewer("prove", "E1", "--against", forged)
    assert result.exit_code == 1
    assert f"the log does not extend digest {forged}" in result.stderr


def test_prove_needs_the_audit_role(chain: Cli) -> None:
    before = chain.position
    result = chain.as_agent("prove", "E1")
    assert result.exit_code == 1
    assert "lacks role 'audit' in scope 'proj-a'" in result.stderr
    assert chain.position == before


# -- records, propose --supersedes ---------------------------------------------------------


def _ids(result: Result) -> list[str]:
    return [r["id"] for r in json.loads(result.stdout)["records"]]


def test_records_lists_a_scope_in_id_order_with_whole_ids_and_as_json(chain: Cli) -> None:
    # Given a candidate with a generated id and a very long value next to E1, M1, R1
    long_value = json.dumps("x" * 300)
    rid = chain.as_agent(
        "propose", "--scope", "proj-a", "--claim", "api.notes", "--kind", "fact",
        "--value", long_value,
    ).stdout.strip()  # fmt: skip
    assert re.fullmatch(r"r-[0-9a-f]{32}", rid)

    # When the reviewer lists the scope as a table
    table = chain.as_reviewer("records", "--scope", "proj-a")
    assert table.exit_code == 0, table.output

    # Then every id is printed whole, on one line, in id order, with status and validity
    lines = table.stdout.splitlines()
    for wanted in ("E1", "M1", "R1", rid):
        [line] = [x for x in lines if re.search(rf"│ {re.escape(wanted)}\s+│", x)]
        assert "ACCEPTED" in line or "CANDIDATE" in line
    rows = [x.split("│")[1].strip() for x in lines if x.startswith("│") and "│" in x[1:]]
    assert [r for r in rows if r] == sorted(["E1", "M1", "R1", rid])
    assert "more follow" not in table.stdout

    # And --json has every record field, in the same order
    data = json.loads(chain.as_reviewer("records", "--scope", "proj-a", "--json").stdout)
    assert [r["id"] for r in data["records"]] == sorted(["E1", "M1", "R1", rid])
    assert set(data["records"][0]) == RECORD_KEYS
    assert data["next_after"] is None


def test_records_filters_by_status_validity_kind_and_claim_prefix(chain: Cli) -> None:
    chain.as_agent(
        "propose", "--scope", "proj-a", "--claim", "api.timeout", "--kind", "fact",
        "--value", "30", "--id", "C1",
    )  # fmt: skip
    queue = chain.as_reviewer("records", "--scope", "proj-a", "--status", "CANDIDATE", "--json")
    assert _ids(queue) == ["C1"]
    _revoked(chain)
    attention = chain.as_reviewer(
        "records", "--scope", "proj-a", "--validity", "NEEDS_REVALIDATION", "--json"
    )
    assert _ids(attention) == ["C1", "M1", "R1"]  # a candidate is not yet valid either
    stale = chain.as_reviewer("records", "--scope", "proj-a", "--status", "STALE")
    assert "E1 revoked: doc changed" in stale.stdout
    kinds = chain.as_reviewer("records", "--scope", "proj-a", "--kind", "evidence", "--json")
    assert _ids(kinds) == ["E1"]
    prefix = chain.as_reviewer("records", "--scope", "proj-a", "--claim-prefix", "api.", "--json")
    assert _ids(prefix) == ["C1", "M1"]
    none = chain.as_reviewer("records", "--scope", "proj-a", "--status", "SUPERSEDED")
    assert none.exit_code == 0 and none.stdout == "no records\n"


def test_records_pages_with_limit_and_after(chain: Cli) -> None:
    args = ["records", "--scope", "proj-a", "--limit", "2"]
    first = json.loads(chain.as_reviewer(*args, "--json").stdout)
    assert [r["id"] for r in first["records"]] == ["E1", "M1"]
    assert first["next_after"] == "M1"
    table = chain.as_reviewer(*args)
    assert table.stdout.rstrip().endswith("more follow: add --after M1")
    second = json.loads(chain.as_reviewer(*args, "--after", "M1", "--json").stdout)
    assert [r["id"] for r in second["records"]] == ["R1"]
    assert second["next_after"] is None
    # A full page that nothing follows is the last one
    whole = json.loads(chain.as_reviewer(*args[:-1], "3", "--json").stdout)
    assert [r["id"] for r in whole["records"]] == ["E1", "M1", "R1"]
    assert whole["next_after"] is None
    assert "more follow" not in chain.as_reviewer(*args[:-1], "3").stdout


def test_records_is_refused_without_a_grant_and_for_bad_filters(chain: Cli) -> None:
    refused = chain.as_reviewer("records", "--scope", "proj-b")
    assert refused.exit_code == 1
    assert refused.stdout == ""
    assert (
        refused.stderr == "error: records refused: 'reviewer' lacks role 'read' in scope 'proj-b'\n"
    )
    for bad in (
        ["--status", "GONE"],
        ["--validity", "valid"],
        ["--limit", "0"],
        ["--limit", "1001"],
    ):
        result = chain.as_reviewer("records", "--scope", "proj-a", *bad)
        assert result.exit_code == 2, (bad, result.output)
        assert "Invalid value" in result.stderr


def test_records_under_as_of_lists_the_scope_as_it_was(chain: Cli) -> None:
    before = chain.position
    _revoked(chain)
    args = ["records", "--scope", "proj-a", "--validity", "VALID", "--json"]
    then = chain("as-of", "--position", str(before), *args, "--token", chain.reviewer)
    assert then.exit_code == 0, then.output
    assert _ids(then) == ["E1", "M1", "R1"]
    assert _ids(chain.as_reviewer(*args)) == []


def test_propose_supersedes_updates_a_claim_instead_of_conflicting(chain: Cli) -> None:
    # Given M1 answers api.retry_safe, the agent proposes a new version of it
    new = chain.as_agent(
        "propose", "--scope", "proj-a", "--claim", "api.retry_safe", "--kind", "inference",
        "--value", "false", "--parent", "E1", "--supersedes", "M1", "--id", "M2", "--json",
    )  # fmt: skip
    assert new.exit_code == 0, new.output
    assert json.loads(chain.as_agent("get", "M2", "--json").stdout)["supersedes"] == "M1"

    # When the reviewer accepts it
    chain.as_reviewer("accept", "M2")

    # Then the claim answers M2's value (not CONFLICT), M1 is SUPERSEDED and R1 is STALE
    read = json.loads(
        chain.as_agent("read", "--scope", "proj-a", "--claim", "api.retry_safe", "--json").stdout
    )
    assert (read["outcome"], read["value"]) == ("FOUND", False)
    m1 = json.loads(chain.as_reviewer("get", "M1", "--json").stdout)
    assert (m1["status"], m1["validity"], m1["superseded_by"]) == ("SUPERSEDED", "INVALID", "M2")
    table = chain.as_reviewer("records", "--scope", "proj-a").stdout
    assert re.search(r"│ M1 .*SUPERSEDED.*superseded by M2", table)
    assert re.search(r"│ M2 .*new version of M1", table)
    assert re.search(r"│ R1 .*STALE.*M1 superseded by M2", table)


def test_propose_supersedes_is_refused_for_another_claim(chain: Cli) -> None:
    before = chain.position
    result = chain.as_agent(
        "propose", "--scope", "proj-a", "--claim", "other", "--kind", "fact",
        "--value", "1", "--supersedes", "M1",
    )  # fmt: skip
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "keeps scope and claim key" in result.stderr
    assert chain.position == before


def test_version_is_the_installed_package_version() -> None:
    from importlib.metadata import version

    import ledger

    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"provledger, version {version('provledger')}"
    assert ledger.__version__ == version("provledger")
    assert not ledger.__version__.startswith("0.1.")  # what 0.2 adds is not 0.1.0
