"""Rough edges of the command line, each on a real SQLite file.

A refusal names the command as typed, never the ledger call behind it; options
that contradict each other are usage errors; a table too wide for the terminal
cuts no word (it prints ``column  value`` lines instead); an empty or misplaced
argument is named in one error line; and a reader of stdout that goes away early
ends every command the same way: exit 141 (128 + SIGPIPE), nothing on stderr.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from ledger import Ledger
from ledger.cli import main


@dataclass
class Drill:
    """One ledger file: E1 → M1 → R1 accepted, R1 delivered to ops@x.test, E1 revoked."""

    path: Path
    agent: str
    reviewer: str

    @property
    def url(self) -> str:
        return f"sqlite:///{self.path}"

    def __call__(
        self, *args: str, url: str | None = None, input: str | None = None, **env: str
    ) -> Result:
        environment: dict[str, str | None] = {
            "PROVLEDGER_URL": url or self.url,
            "PROVLEDGER_TOKEN": self.reviewer,
            "PROVLEDGER_ADMIN_TOKEN": None,
            "PROVLEDGER_RUN": None,
            **env,
        }
        return CliRunner().invoke(main, list(args), input=input, env=environment)

    @property
    def position(self) -> int:
        with Ledger.open(self.url) as led:
            return led.position


def build(path: Path, more: int = 0) -> Drill:
    """The drill's ledger at ``path``; ``more`` candidates on E1 besides M1."""
    with Ledger.open(f"sqlite:///{path}", create=True) as led:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
        admin.grant("reviewer", scope="proj-a", roles=["approve", "read", "audit", "deliver"])
        drill = Drill(path, admin.issue_token("agent-1"), admin.issue_token("reviewer"))
        agent, reviewer = led.authenticate(drill.agent), led.authenticate(drill.reviewer)
        agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"retries", id="E1")
        agent.propose(
            scope="proj-a", claim_key="api.k", value=True, kind="inference", parents=["E1"], id="M1"
        )
        agent.propose(
            scope="proj-a", claim_key="report.r", value="on", kind="report", parents=["M1"], id="R1"
        )
        for rid in ("E1", "M1", "R1"):
            reviewer.accept(rid)
        reviewer.deliver("R1", recipient="ops@x.test")
        agent.propose_many(
            {
                "scope": "proj-a",
                "claim_key": "api.k",
                "value": f"candidate {i} " + "x" * 80,
                "kind": "inference",
                "parents": ["E1"],
                "id": f"C{i:05d}",
            }
            for i in range(more)
        )
    return drill


@pytest.fixture
def drill(tmp_path: Path) -> Drill:
    return build(tmp_path / "drill.db")


def one_error_line(result: Result, code: int = 1) -> str:
    assert result.exit_code == code, (result.output, result.exception)
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    return result.stderr


# -- 1. a refusal names the command typed ---------------------------------------------------

READ_ONLY_REFUSALS = [
    ("grant", "grant a --scope proj-a --roles read"),
    ("revoke-grant", "revoke-grant agent-1 --scope proj-a --roles read"),
    ("token issue", "token issue agent-1"),
    ("token issue", "token issue --admin"),
    ("token revoke", "token revoke --fingerprint 0123456789ab"),
    ("token revoke", "token revoke -"),
    ("erase-snapshot", "erase-snapshot sha256:00 --reason request"),
    ("scrub-erased", "scrub-erased"),
    ("run start", "run start t1"),
    ("run observe", "run observe t1 E1"),
    ("run end", "run end t1"),
    ("correct", "correct d-1 --note x"),
]


@pytest.mark.parametrize(
    ("name", "line"), READ_ONLY_REFUSALS, ids=[r[1] for r in READ_ONLY_REFUSALS]
)
def test_a_refusal_on_a_read_only_ledger_names_the_command_as_typed(
    drill: Drill, name: str, line: str
) -> None:
    # Given the ledger opened read-only, when a command that writes runs
    refused = drill(*shlex.split(line), url=f"{drill.url}?mode=ro", input="plt_x\n")
    # Then its one error line names the command, not the library call behind it
    assert one_error_line(refused).startswith(
        f"error: {name} refused: ledger '{drill.url}?mode=ro' is opened read-only"
    )


def test_observing_an_unknown_record_in_a_run_names_run_observe(drill: Drill) -> None:
    drill("run", "start", "t1", PROVLEDGER_TOKEN=drill.agent)
    refused = drill("run", "observe", "t1", "NOPE", PROVLEDGER_TOKEN=drill.agent)
    assert one_error_line(refused) == (
        "error: run observe refused: record 'NOPE' is unknown or not visible to 'agent-1'\n"
    )


def test_a_refusal_under_as_of_names_as_of_and_the_read(drill: Drill) -> None:
    refused = drill("as-of", "--position", "3", "get", "NOPE")
    assert one_error_line(refused).startswith("error: as-of get refused: record 'NOPE'")


# -- 2. options that contradict each other -----------------------------------------------


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("history --all --limit 5", "give --all or --limit, not both (--all lists every event)"),
        ("history --all --limit 5 --json", "give --all or --limit, not both"),
        ("history --from 10 --to 5", "--from 10 is after --to 5 (an empty range)"),
        ("revoke E1 --reason x --all --limit 3", "give --all or --limit, not both"),
        ("revoke E1 --reason x --all --limit 20", "give --all or --limit, not both"),
    ],
)
def test_contradictory_options_are_a_usage_error_naming_both(
    drill: Drill, line: str, message: str
) -> None:
    before = drill.position
    refused = drill(*shlex.split(line))
    assert refused.exit_code == 2, refused.output
    assert refused.stdout == ""
    [error] = [x for x in refused.stderr.splitlines() if x.startswith("Error: ")]
    assert message in error
    assert drill.position == before  # revoke wrote nothing


@pytest.mark.parametrize(
    ("line", "command", "message"),
    [
        # click would keep the last value silently: one heads file of two checked
        (
            "verify --heads a.jsonl --public-key a.pub --heads b.jsonl",
            "verify",
            "--heads was given more than once",
        ),
        ("revoke E1 --reason x --reason y", "revoke", "--reason was given more than once"),
        # -h as an option's value asks for no help, a repeatable option's included
        ("read --scope proj-a --claim -h --claim k", "read", "--claim was given more"),
        ("as-of --position 1 --position 9 read --scope p --claim -h", "as-of", "--position was"),
        ("bundle R1 -o a.zip -o b.zip --extends -h", "bundle", "-o was given more than once"),
        ("get M1 --url=sqlite:///a.db --url sqlite:///b.db", "get", "--url was given more"),
        ("bundle R1 -o a.zip --output b.zip", "bundle", "--output was given more than once (as -o"),
        ("as-of --position 3 --position 4 get M1", "as-of", "--position was given more"),
        ("as-of --position 3 get M1 --token a --token b", "as-of get", "--token was given more"),
        (
            "token issue agent-9 --expires 2030-01-01T00:00:00Z --expires 2031-01-01T00:00:00Z",
            "token issue",
            "--expires was given more than once",
        ),
    ],
)
def test_an_option_taking_one_value_given_twice_is_a_usage_error(
    drill: Drill, line: str, command: str, message: str, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.chdir(tmp_path)  # where bundle -o would write
    before = drill.position
    refused = drill(*shlex.split(line))
    assert refused.exit_code == 2, refused.output
    assert refused.stdout == ""
    [error] = [x for x in refused.stderr.splitlines() if x.startswith("Error: ")]
    assert message in error and "only the last would count" in error
    # the usage shown is the command's own
    assert refused.stderr.splitlines()[0].split(" [OPTIONS]")[0].endswith(f" {command}")
    assert drill.position == before and not list(tmp_path.glob("*.zip"))


def test_help_and_shell_completion_of_a_line_repeating_an_option_still_answer(
    drill: Drill,
) -> None:
    helped = drill("get", "M1", "--url", "a", "--url", "b", "--help")
    assert helped.exit_code == 0 and helped.stdout.startswith("Usage: ")
    typed = "provledger as-of --position 1 --position 2 get M1 --url a --url b --"
    completed = CliRunner().invoke(
        main,
        [],
        prog_name="provledger",
        env={
            "_PROVLEDGER_COMPLETE": "bash_complete",
            "COMP_WORDS": typed,
            "COMP_CWORD": str(len(typed.split()) - 1),
        },
    )
    assert completed.exit_code == 0, completed.output
    assert "plain,--token" in completed.stdout.splitlines()


def test_an_option_repeated_as_a_value_or_after_double_dash_is_no_repetition(
    drill: Drill,
) -> None:
    # "--reason" is --reason's value here, and a flag may be repeated
    done = drill("revoke", "R1", "--reason", "--reason", "--json", "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["root"] == "R1"
    # and "--scope" is the value of --kind, which may be repeated
    refused = drill("read", "--scope", "proj-a", "--claim", "k", "--kind", "--scope")
    assert "more than once" not in refused.stderr and "'--scope'" in refused.stderr


def test_revoke_all_alone_and_history_of_one_position_still_work(drill: Drill) -> None:
    assert drill("history", "--from", "12", "--to", "12").exit_code == 0
    done = drill("revoke", "E1", "--reason", "x", "--all")
    assert done.exit_code == 0, done.output
    assert "M1" in done.stdout and "R1" in done.stdout


# -- 3. a table too wide cuts no word -------------------------------------------------------


def test_corrections_at_100_columns_cut_no_header_or_address(drill: Drill) -> None:
    drill("revoke", "E1", "--reason", "doc changed")
    shown = drill("corrections", COLUMNS="100").stdout
    assert max(len(line) for line in shown.splitlines()) <= 100, shown
    # The table cannot fit whole: each row prints as `column  value` lines
    assert "recipient  ops@x.test\n" in shown, shown
    assert "recipien " not in shown and "ops@x.te " not in shown, shown
    # Where it fits with its words whole, it is a table
    wide = drill("corrections", COLUMNS="130").stdout
    assert "┃ recipient " in wide and "│ ops@x.test " in wide, wide
    assert "│ E1 revoked: doc changed │" in wide, wide


# -- 4. an empty or misplaced argument is named --------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["keygen", "--out", ""],
            "error: keygen refused: --out '' is empty; give the path of the key file to "
            "write, e.g. --out ledger-key\n",
        ),
        (
            ["backup", ""],
            "error: backup refused: DEST '' is empty; give the path of a new file, e.g. "
            "/backups/provledger.db (nothing was written)\n",
        ),
        (
            ["backup", "sqlite:///x.db"],
            "error: backup refused: DEST 'sqlite:///x.db' is a URL; a backup destination "
            "is a file path, e.g. x.db (nothing was written)\n",
        ),
        (
            ["token", "revoke", ""],
            "error: token revoke refused: TOKEN '' is empty; give the token to withdraw, "
            "or - to read it from standard input\n",
        ),
        (
            ["backup", "m.db", "--url", "memory:"],
            "error: backup refused: memory: is a ledger in memory, with nothing on disk to "
            "back up (nothing was written)\n",
        ),
    ],
    ids=["keygen-empty", "backup-empty", "backup-url", "token-revoke-empty", "backup-memory"],
)
def test_an_empty_or_misplaced_argument_is_named_in_one_line(
    drill: Drill, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert one_error_line(drill(*args)) == message
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


# -- 5. a reader of stdout that goes away ---------------------------------------------------

#: Commands whose answer is written in one piece or a line at a time, as tables or JSON.
ANSWERS = [
    "history",
    "history --json",
    "records --scope proj-a",
    "records --scope proj-a --json",
    "audit E1",
    "explain --scope proj-a --claim api.k",
    "export",
    "graph E1 --format dot",
    "prove E1",
    "stats",
    "corrections",
    "get R1",
    "revoke E1 --reason gone --all",
    "demo --url memory:",
]


def _provledger(drill: Drill, line: str, **streams: Any) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVLEDGER_")}
    env |= {"PROVLEDGER_URL": drill.url, "PROVLEDGER_TOKEN": drill.reviewer}
    args = [sys.executable, "-m", "ledger", *shlex.split(line)]
    return subprocess.Popen(args, env=env, **streams)


@pytest.mark.parametrize("line", ANSWERS)
def test_a_reader_gone_before_the_answer_ends_every_command_with_exit_141(
    drill: Drill, line: str
) -> None:
    # Given stdout a pipe nobody reads any more (`provledger … | head -0`)
    reader, writer = os.pipe()
    os.close(reader)
    try:
        proc = _provledger(drill, line, stdout=writer, stderr=subprocess.PIPE)
    finally:
        os.close(writer)
    _, stderr = proc.communicate(timeout=120)
    # Then the command stops quietly with exit 141, whatever it prints and however
    assert (proc.returncode, stderr) == (141, b"")
    if line.startswith("revoke"):  # and what it wrote stands
        with Ledger.open(drill.url) as led:
            assert led.authenticate(drill.reviewer).get("E1").status == "REVOKED"


def test_a_reader_of_stderr_gone_ends_a_rebuild_with_exit_141_not_views_differ(
    drill: Drill,
) -> None:
    # Given stderr (the progress and the rebuild's report) a pipe nobody reads
    reader, writer = os.pipe()
    os.close(reader)
    try:
        proc = _provledger(drill, "rebuild", stdout=subprocess.PIPE, stderr=writer)
    finally:
        os.close(writer)
    proc.communicate(timeout=120)
    # Then it exits 141, as for stdout, not 1 (which says the views differed)
    assert proc.returncode == 141
    with Ledger.open(drill.url) as led:
        assert led.verify().ok


def test_an_admin_token_shown_to_no_reader_is_no_success(drill: Drill, tmp_path: Path) -> None:
    # Given `provledger init` of a new ledger, its stdout a pipe nobody reads
    fresh = Drill(tmp_path / "fresh.db", drill.agent, drill.reviewer)
    reader, writer = os.pipe()
    os.close(reader)
    try:
        proc = _provledger(fresh, "init", stdout=writer, stderr=subprocess.PIPE)
    finally:
        os.close(writer)
    proc.communicate(timeout=120)
    # Then the token it shows once reached nobody: not exit 0 (the ledger is made)
    assert proc.returncode == 141
    assert fresh.path.exists()


@pytest.fixture(scope="module")
def long_ledger(tmp_path_factory: pytest.TempPathFactory) -> Drill:
    """The drill with 2,000 more candidates: answers far longer than a pipe holds."""
    return build(tmp_path_factory.mktemp("long") / "long.db", more=2000)


@pytest.mark.parametrize("line", ["history", "history --json"])
def test_a_reader_leaving_after_one_line_ends_a_long_answer_with_exit_141(
    long_ledger: Drill, tmp_path: Path, line: str
) -> None:
    copy = Drill(tmp_path / "long.db", long_ledger.agent, long_ledger.reviewer)
    shutil.copyfile(long_ledger.path, copy.path)
    # Given `provledger … | head -1`: the reader leaves while the answer is written
    proc = _provledger(copy, line, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline()
    proc.stdout.close()
    stderr = proc.stderr.read()
    proc.wait(timeout=120)
    assert (proc.returncode, stderr) == (141, b"")


def test_a_refusal_is_exit_1_even_when_stderr_has_no_reader(drill: Drill) -> None:
    # Given stderr a pipe nobody reads: the error line cannot be written
    reader, writer = os.pipe()
    os.close(reader)
    try:
        proc = _provledger(
            Drill(drill.path, drill.agent, "plt_not-a-token"),
            "history",
            stdout=subprocess.PIPE,
            stderr=writer,
        )
    finally:
        os.close(writer)
    stdout, _ = proc.communicate(timeout=60)
    # Then it is still a refusal (exit 1), not a reader leaving (exit 141)
    assert (proc.returncode, stdout) == (1, b"")


def test_the_json_answers_are_whole_when_read_to_the_end(drill: Drill) -> None:
    # The quiet exit is only for a reader that left: one that reads on gets it all
    proc = _provledger(drill, "history --json", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = proc.communicate(timeout=60)
    assert (proc.returncode, stderr) == (0, b"")
    assert json.loads(stdout)["events"]
