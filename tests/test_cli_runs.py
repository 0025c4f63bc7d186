"""Runs from the shell, snapshots, grants withdrawn, tokens only for subjects with a
grant, tokens kept out of argv, and wording: usage errors exit 2 with an example,
messages name commands and the ids the user gave."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ledger import Ledger
from ledger.cli import main

ROOT = Path(__file__).resolve().parent.parent


class Shell:
    """``provledger`` on one SQLite file made by ``init``, with an agent and a reviewer."""

    def __init__(self, tmp_path: Path) -> None:
        self.url = f"sqlite:///{tmp_path / 'runs.db'}"
        self.ok("init")
        self.ok("grant", "agent-1", "--scope", "proj-a", "--roles", "propose,read")
        self.ok("grant", "reviewer", "--scope", "proj-a", "--roles", "approve,read,audit,deliver")
        self.agent = self.ok("token", "issue", "agent-1").stdout.strip()
        self.reviewer = self.ok("token", "issue", "reviewer").stdout.strip()

    def __call__(self, *args: str, token: str | None = None, **env: str) -> Result:
        environment: dict[str, str | None] = {
            "PROVLEDGER_URL": self.url,
            "PROVLEDGER_TOKEN": token,
            "PROVLEDGER_RUN": None,
            **env,
        }
        return CliRunner().invoke(main, list(args), env=environment)

    def ok(self, *args: str, token: str | None = None, **env: str) -> Result:
        result = self(*args, token=token, **env)
        assert result.exit_code == 0, (result.output, result.exception)
        return result


@pytest.fixture
def sh(tmp_path: Path) -> Shell:
    shell = Shell(tmp_path)
    doc = tmp_path / "doc.txt"
    doc.write_text("v2 only")
    shell.ok(
        "capture", str(doc), "--scope", "proj-a", "--uri", "u", "--id", "E1", token=shell.agent
    )
    shell.ok("accept", "E1", token=shell.reviewer)
    return shell


# -- runs ---------------------------------------------------------------------------------


def test_a_run_that_came_from_the_variable_says_so_when_refused(sh: Shell) -> None:
    # `run start` suggests `export PROVLEDGER_RUN=…`; the variable outlives the task
    sh.ok("run", "start", "task-9", token=sh.agent)
    sh.ok("run", "end", "task-9", token=sh.agent)
    result = sh("get", "E1", token=sh.agent, PROVLEDGER_RUN="task-9")
    assert result.exit_code == 1
    assert "has ended" in result.stderr
    assert result.stderr.rstrip().endswith(
        "(the run is $PROVLEDGER_RUN's: unset it to act outside a run)"
    )
    # given with --run, the message is the run's alone
    flagged = sh("get", "E1", "--run", "task-9", token=sh.agent)
    assert flagged.exit_code == 1 and "PROVLEDGER_RUN" not in flagged.stderr


def test_a_shell_run_records_its_reads_as_observed_dependencies(sh: Shell) -> None:
    a = sh.agent
    sh.ok("run", "start", "task-42", token=a)
    sh.ok("read", "--scope", "proj-a", "--claim", "source:u", token=a, PROVLEDGER_RUN="task-42")
    sh.ok(
        *("propose", "--scope", "proj-a", "--claim", "api.version", "--kind", "inference"),
        *("--value-str", "v2", "--id", "M", "--run", "task-42"),
        token=a,
    )
    sh.ok("run", "end", "task-42", token=a)
    m = json.loads(sh.ok("get", "M", "--json", token=sh.reviewer).stdout)
    assert m["observed"] == ["E1"] and m["parents"] == []
    # Revocation follows the observed edge.
    sh.ok("accept", "M", token=sh.reviewer)
    sh.ok("revoke", "E1", "--reason", "wrong page", token=sh.reviewer)
    assert json.loads(sh.ok("get", "M", "--json", token=sh.reviewer).stdout)["status"] == "STALE"


#: A command that shows E1 (and, for records, that a second page follows).
SHOWING_E1 = {
    "explain": ("explain", "--scope", "proj-a", "--claim", "source:u"),
    "records": ("records", "--scope", "proj-a", "--limit", "1"),
}


@pytest.mark.parametrize("how", ["--run", "PROVLEDGER_RUN"])
@pytest.mark.parametrize("command", list(SHOWING_E1))
def test_explain_and_records_in_a_run_record_what_they_show_as_observed(
    sh: Shell, tmp_path: Path, command: str, how: str
) -> None:
    # Given a second accepted record after E1, and a run started from the shell
    a = sh.agent
    (tmp_path / "other.txt").write_text("other page")
    capture = ("capture", str(tmp_path / "other.txt"), "--scope", "proj-a", "--uri", "w")
    sh.ok(*capture, "--id", "E2", token=a)
    sh.ok("accept", "E2", token=sh.reviewer)
    sh.ok("run", "start", "t", token=a)

    # When the command is run inside it (by option or environment), then a proposal made
    in_run: dict[str, str] = {"PROVLEDGER_RUN": "t"} if how == "PROVLEDGER_RUN" else {}
    args = SHOWING_E1[command] + (("--run", "t") if how == "--run" else ())
    shown = sh.ok(*args, token=a, **in_run).stdout
    assert "E1" in shown and "│ E2" not in shown
    propose = ("propose", "--scope", "proj-a", "--claim", "k", "--kind", "fact", "--value", "1")
    sh.ok(*propose, "--id", "F", "--run", "t", token=a)

    # Then the proposal names what the command showed as observed (not the E2 that
    # records only looked at to tell that more follow)
    assert json.loads(sh.ok("get", "F", "--json", token=a).stdout)["observed"] == ["E1"]


def test_a_run_shown_a_withdrawn_record_by_one_command_proposes_in_the_next(sh: Shell) -> None:
    # Each command continues the run in a process of its own: what it was shown
    # not VALID (E1, revoked) is no dependency there either, as in one process.
    a = sh.agent
    sh.ok("revoke", "E1", "--reason", "wrong page", token=sh.reviewer)
    sh.ok("run", "start", "t", token=a)
    listed = sh.ok("records", "--scope", "proj-a", "--run", "t", token=a).stdout
    assert "E1" in listed and "REVOKED" in listed
    propose = ("propose", "--scope", "proj-a", "--claim", "k", "--kind", "fact", "--value", "1")
    sh.ok(*propose, "--id", "F", "--run", "t", token=a)
    assert json.loads(sh.ok("get", "F", "--json", token=a).stdout)["observed"] == []


def test_run_observe_records_reads_made_outside_the_ledger(sh: Shell) -> None:
    a = sh.agent
    sh.ok("run", "start", "t", token=a)
    twice = sh.ok("run", "observe", "t", "E1", "E1", "--json", token=a)  # counts once
    assert json.loads(twice.stdout)["observed"] == ["E1"]
    propose = ("propose", "--scope", "proj-a", "--claim", "k", "--kind", "fact", "--value", "1")
    sh.ok(*propose, "--id", "F", "--run", "t", token=a)
    assert json.loads(sh.ok("get", "F", "--json", token=a).stdout)["observed"] == ["E1"]
    unknown = sh("run", "observe", "t", "NOPE", token=a)
    assert unknown.exit_code == 1 and "'NOPE' is unknown" in unknown.stderr


def test_a_run_cannot_be_used_before_its_start_or_after_its_end(sh: Shell) -> None:
    a = sh.agent
    never = sh("read", "--scope", "proj-a", "--claim", "source:u", "--run", "nope", token=a)
    assert never.exit_code == 1
    assert never.stderr == "error: run 'nope' of 'agent-1' was never started\n"
    sh.ok("run", "start", "t", token=a)
    again = sh("run", "start", "t", token=a)
    assert again.exit_code == 1 and "already exists" in again.stderr
    sh.ok("run", "end", "t", "--failed", token=a)
    ended = sh("run", "end", "t", token=a)
    assert ended.exit_code == 1 and ended.stderr == "error: run 't' of 'agent-1' has ended\n"


# -- snapshot, revoke-grant, token issue ------------------------------------------------


def test_snapshot_writes_the_captured_bytes_to_a_file(sh: Shell, tmp_path: Path) -> None:
    ref = json.loads(sh.ok("get", "E1", "--json", token=sh.agent).stdout)["evidence"][
        "snapshot_ref"
    ]
    target = tmp_path / "as-read.txt"
    out = sh.ok("snapshot", ref, "-o", str(target), token=sh.agent).stdout
    assert target.read_bytes() == b"v2 only" and f"wrote {target} (7 bytes" in out
    missing = sh("snapshot", "sha256:" + "0" * 64, "-o", str(target), token=sh.agent)
    assert missing.exit_code == 1 and missing.stderr.startswith("error: ")


def test_revoke_grant_withdraws_roles_and_the_commands_they_allowed(sh: Shell) -> None:
    out = sh.ok("revoke-grant", "agent-1", "--scope", "proj-a", "--roles", "propose").stdout
    assert out.startswith("withdrew propose in proj-a from agent-1")
    propose = ("propose", "--scope", "proj-a", "--claim", "k", "--kind", "fact", "--value", "1")
    refused = sh(*propose, token=sh.agent)
    assert refused.exit_code == 1 and "lacks role 'propose'" in refused.stderr
    data = json.loads(sh.ok("revoke-grant", "agent-1", "--scope", "proj-a", "--json").stdout)
    assert data["revoked_roles"] == ["read"]
    nothing = sh("revoke-grant", "agent-1", "--scope", "proj-a")
    assert nothing.exit_code == 1 and "does not hold any role" in nothing.stderr
    with Ledger.open(sh.url) as led:
        assert led.verify().ok


def test_token_issue_refuses_a_subject_without_a_grant_unless_forced(sh: Shell) -> None:
    refused = sh("token", "issue", "nobody")
    assert refused.exit_code == 1 and refused.stdout == ""
    assert "'nobody' holds no role in any scope" in refused.stderr and "--force" in refused.stderr
    forced = sh.ok("token", "issue", "nobody", "--force").stdout.strip()
    assert forced.startswith("plt_")
    both = sh("token", "issue", "agent-1", "--admin")
    assert both.exit_code == 2


# -- tokens in argv ---------------------------------------------------------------------


def _provledger(*args: str, url: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ledger", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PROVLEDGER_URL": url, **env},
        timeout=120,
    )


def test_a_token_given_in_argv_is_warned_about_and_the_environment_is_not(sh: Shell) -> None:
    in_argv = _provledger("get", "E1", "--token", sh.agent, url=sh.url)
    assert in_argv.returncode == 0
    assert "warning: --token on the command line is visible to other users" in in_argv.stderr
    in_env = _provledger("get", "E1", url=sh.url, PROVLEDGER_TOKEN=sh.agent)
    assert in_env.returncode == 0 and in_env.stderr == ""


# -- wording -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("propose", "--scope", "proj-a", "--claim", "k", "--kind", "fact", "--value", "1"),
        ("capture", "-", "--scope", "proj-a", "--uri", "u"),
    ],
    ids=["propose", "capture"],
)
def test_a_time_without_a_timezone_is_a_usage_error_with_an_example(
    sh: Shell, args: tuple[str, ...]
) -> None:
    result = sh(*args, "--expires", "2030-01-01T00:00:00", token=sh.agent)
    assert result.exit_code == 2
    assert "'2030-01-01T00:00:00' has no timezone" in result.stderr
    assert "e.g. 2030-01-01T00:00:00+00:00" in result.stderr


def test_a_time_may_have_a_lowercase_t_and_z_as_rfc_3339_allows(sh: Shell) -> None:
    args = ("propose", "--scope", "proj-a", "--claim", "k", "--kind", "fact", "--value", "1")
    result = sh(*args, "--expires", "2030-01-01t00:00:00z", "--json", token=sh.agent)
    assert result.exit_code == 0, result.output
    rid = json.loads(result.stdout)["id"]
    with Ledger.open(sh.url) as led:
        expires = led.authenticate(sh.reviewer).get(rid).expires
    assert expires == datetime(2030, 1, 1, tzinfo=UTC)


def test_refusals_name_the_command_typed_not_the_library_method(sh: Shell) -> None:
    result = sh("correct", "d-nope", "--note", "n", token=sh.reviewer)
    assert result.exit_code == 1
    assert result.stderr.startswith("error: correct refused: delivery 'd-nope'")
    assert "issue_correction" not in result.stderr


def test_refusals_name_the_ids_the_user_gave_not_generated_ones(sh: Shell) -> None:
    args = ("propose", "--scope", "proj-a", "--claim", "k", "--kind", "fact", "--value", "1")
    result = sh(*args, "--parent", "NOPE", token=sh.agent)
    assert result.exit_code == 1
    assert "'NOPE'" in result.stderr and "'r-" not in result.stderr
    assert "the new record" in result.stderr
    given = sh(*args, "--parent", "NOPE", "--id", "X1", token=sh.agent)
    assert "'X1'" in given.stderr


def test_an_admin_token_given_in_argv_is_warned_about_too(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'admin.db'}"
    admin = _provledger("init", url=url).stdout.strip()
    in_argv = _provledger("stats", "--admin-token", admin, url=url)
    assert in_argv.returncode == 0, in_argv.stderr
    assert in_argv.stderr == (
        "warning: --admin-token on the command line is visible to other users "
        "(ps, /proc/PID/cmdline); export PROVLEDGER_ADMIN_TOKEN instead\n"
    )
    in_env = _provledger("stats", url=url, PROVLEDGER_ADMIN_TOKEN=admin)
    assert in_env.returncode == 0 and in_env.stderr == ""
    # The admin token as what a command acts on (`token revoke` withdrawing the
    # very token in the environment) was not given as --admin-token: no warning.
    second = _provledger("token", "issue", "--admin", url=url, PROVLEDGER_ADMIN_TOKEN=admin)
    assert second.returncode == 0, second.stderr
    revoked = _provledger("token", "revoke", admin, url=url, PROVLEDGER_ADMIN_TOKEN=admin)
    assert revoked.returncode == 0, revoked.stderr
    assert "warning" not in revoked.stderr
