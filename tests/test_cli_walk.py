"""The command line as a person at a shell meets it: a long event log listed a page
at a time, Ctrl-C, and usage errors that show the example of the command typed."""

from __future__ import annotations

import json
import os
import platform
import re
import resource
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ledger import Ledger
from ledger.cli import main
from ledger.cli.reads import HISTORY_TABLE_ROWS
from ledger.heads import generate_key
from ledger.jsonable import json_safe, plain


def run(url: str, *args: str, token: str | None = None) -> Result:
    env = {"PROVLEDGER_URL": url, "PROVLEDGER_TOKEN": token, "COLUMNS": "200"}
    return CliRunner().invoke(main, list(args), env=env)


@pytest.fixture
def ledger_url(tmp_path: Path) -> tuple[str, str]:
    """A ledger with an auditor's token and twelve records proposed one by one."""
    url = f"sqlite:///{tmp_path / 'walk.db'}"
    with Ledger.open(url) as led:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose"])
        admin.grant("auditor", scope="proj-a", roles=["read", "audit"])
        agent = led.authenticate(admin.issue_token("agent-1"))
        for i in range(12):
            agent.propose(scope="proj-a", claim_key=f"k{i}", value=i, kind="fact", id=f"F{i:02d}")
        token = admin.issue_token("auditor")
    return url, token


def _positions(table: str) -> list[int]:
    return [int(m) for m in re.findall(r"^│\s+(\d+) │", table, re.MULTILINE)]


def test_history_lists_a_page_and_names_where_the_next_one_starts(
    ledger_url: tuple[str, str],
) -> None:
    url, token = ledger_url
    everything = json.loads(run(url, "history", "--json", token=token).stdout)["events"]
    assert len(everything) == 12
    shown: list[int] = []
    args: tuple[str, ...] = ("history", "--limit", "5")
    while True:
        result = run(url, *args, token=token)
        assert result.exit_code == 0, result.output
        shown += _positions(result.stdout)
        more = re.search(r"--from (\d+) lists the next page", result.stdout)
        if more is None:
            break
        args = ("history", "--limit", "5", "--from", more.group(1))
    assert shown == [e["position"] for e in everything]
    whole = run(url, "history", "--all", token=token)
    assert _positions(whole.stdout) == shown and "next page" not in whole.stdout
    # --json gives every event unless --limit is given: then the first so many
    first = json.loads(run(url, "history", "--json", "--limit", "5", token=token).stdout)
    assert first["events"] == everything[:5]
    # and --all is every event there too
    every = run(url, "history", "--json", "--all", token=token).stdout
    assert json.loads(every)["events"] == everything
    # --all and --limit together contradict each other: a usage error
    for given in (("--all", "--limit", "5"), ("--json", "--all", "--limit", "5")):
        both = run(url, "history", *given, token=token)
        assert both.exit_code == 2 and both.stdout == ""
        assert "Error: give --all or --limit, not both" in both.stderr


def test_history_json_of_a_long_log_is_the_whole_log_as_one_document(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'long.db'}"
    with Ledger.open(url) as led:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose", "read", "audit"])
        token = admin.issue_token("agent-1")
        agent = led.authenticate(token)
        n = HISTORY_TABLE_ROWS + 50
        # Values holding characters Python takes as line breaks and JSON leaves as
        # they are (U+2028, U+2029, U+0085): the stream must not indent them
        agent.propose_many(
            {
                "scope": "proj-a",
                "claim_key": f"k{i}",
                "value": f"{i}\u2028\u2029\x85\n.",
                "kind": "fact",
            }
            for i in range(n)
        )
        expected = json.dumps(
            json_safe(plain({"events": agent.history(), "next_from": None})),
            indent=2,
            ensure_ascii=False,
        )
    result = run(url, "history", "--json", token=token)
    assert result.exit_code == 0, result.output
    assert result.stdout == expected + "\n"
    assert len(json.loads(result.stdout)["events"]) == n
    # With --limit, the next page's --from is given (none after the last page)
    page = json.loads(run(url, "history", "--json", "--limit", "10", token=token).stdout)
    every = json.loads(result.stdout)["events"]
    assert page["events"] == every[:10] and page["next_from"] == every[10]["position"]
    last = run(url, "history", "--json", "--limit", "10", "--from", str(every[-3]["position"]),
               token=token)  # fmt: skip
    assert json.loads(last.stdout) == {"events": every[-3:], "next_from": None}
    table = run(url, "history", token=token)  # for people: the first 1000, then a pointer
    assert table.exit_code == 0, table.output
    positions = _positions(table.stdout)
    assert len(positions) == 1000
    assert f"--from {positions[-1] + 1} lists the next page" in table.stdout


def test_as_of_without_a_moment_shows_the_as_of_example(ledger_url: tuple[str, str]) -> None:
    url, token = ledger_url
    result = run(url, "as-of", "get", "F01", token=token)
    assert result.exit_code == 2
    assert "give exactly one of --position or --time" in result.stderr
    assert "provledger as-of --position" in result.stderr
    assert "provledger get R1" not in result.stderr


@pytest.mark.parametrize("command", ["propose", "accept", "stats", "as-of"])
def test_as_of_a_command_it_does_not_run_says_which_it_runs(
    ledger_url: tuple[str, str], command: str
) -> None:
    url, token = ledger_url
    with Ledger.open(url) as led:
        before = led.position
    result = run(url, "as-of", "--position", "3", command, "X", token=token)
    assert result.exit_code == 2, result.output
    assert f"Error: {command!r} does not run as of a past moment" in result.stderr
    assert "as-of runs read, get, explain, audit, history" in result.stderr
    unknown = run(url, "as-of", "--position", "3", "bogus", token=token)
    assert unknown.exit_code == 2 and "No such command 'bogus'" in unknown.stderr
    with Ledger.open(url) as led:
        assert led.position == before


def _reading_stdin(pid: int) -> bool:
    """Whether process ``pid`` is blocked in read(2) on its file descriptor 0."""
    try:
        fields = Path(f"/proc/{pid}/syscall").read_text().split()
    except OSError:
        return False
    return fields[:2] == ["0", "0x0"]  # x86-64: syscall 0 is read


def _capture_from_stdin(
    ledger_url: tuple[str, str],
) -> tuple[str, int, list[str], dict[str, str]]:
    """(url, log position, command line, environment) of `provledger capture -` run
    as a process on the ledger."""
    url, token = ledger_url
    with Ledger.open(url) as led:
        before = led.position
    env = {**os.environ, "PROVLEDGER_URL": url, "PROVLEDGER_TOKEN": token}
    args = ["capture", "-", "--scope", "proj-a", "--uri", "https://x.test/doc"]
    return url, before, [sys.executable, "-m", "ledger", *args], env


@pytest.mark.skipif(
    not (sys.platform == "linux" and platform.machine() == "x86_64"),
    reason="reads /proc/PID/syscall with x86-64 syscall numbers",
)
def test_ctrl_c_says_it_was_interrupted_and_exits_130(ledger_url: tuple[str, str]) -> None:
    url, before, command, env = _capture_from_stdin(ledger_url)
    proc = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        # Ctrl-C as a terminal delivers it, even where this process was started
        # with SIGINT ignored (a background job of a shell without job control)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        # The command waits for its content on stdin; Python's SIGINT handler is
        # installed long before that read.
        while not _reading_stdin(proc.pid):
            assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert out == b""
    lines = err.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: interrupted"), err
    assert "Aborted" not in err.decode() and "Traceback" not in err.decode()
    with Ledger.open(url) as led:
        assert led.position == before


def _sleeping(pid: int) -> bool:
    """Whether process ``pid`` is in nanosleep(2) or clock_nanosleep(2) (x86-64), as
    SQLite's busy handler is between its tries for a lock."""
    try:
        fields = Path(f"/proc/{pid}/syscall").read_text().split()
    except OSError:
        return False
    return fields[:1] in (["35"], ["230"])


@pytest.mark.skipif(
    not (sys.platform == "linux" and platform.machine() == "x86_64"),
    reason="reads /proc/PID/syscall with x86-64 syscall numbers",
)
def test_ctrl_c_while_waiting_for_the_sqlite_write_lock_interrupts_the_wait(
    tmp_path: Path,
) -> None:
    path = tmp_path / "locked.db"
    with Ledger.open(f"sqlite:///{path}") as led:
        led.admin().grant("agent-1", scope="proj-a", roles=["propose"])
        token = led.admin().issue_token("agent-1")
        before = led.position
    env = {**os.environ, "PROVLEDGER_URL": f"sqlite:///{path}?timeout=300"}
    env["PROVLEDGER_TOKEN"] = token
    args = ["propose", "--scope", "proj-a", "--claim", "k", "--kind", "fact", "--value", "1"]
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock all along
    proc = subprocess.Popen(
        [sys.executable, "-m", "ledger", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        # Waiting for the lock: SQLite's busy handler sleeps between its tries.
        while not (_sleeping(proc.pid) and _sleeping(proc.pid)):
            assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        # Not after the 300 s the lock may be waited for: the wait is cut short.
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        holder.rollback()
        holder.close()
    assert proc.returncode == 130, err
    lines = err.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: interrupted"), err
    assert out == b""
    with Ledger.open(f"sqlite:///{path}") as led:
        assert led.position == before


@pytest.mark.parametrize(
    ("reads", "said"),
    [
        ((), b"standard input is closed (pipe the content in, or name a file)"),
        (
            ("propose", "--scope", "proj-a", "--claim", "c", "--kind", "fact", "--value-file"),
            b"standard input is closed (pipe the value in, or name a file)",
        ),
    ],
    ids=["capture -", "propose --value-file -"],
)
def test_standard_input_closed_where_a_command_reads_it_is_a_usage_error(
    ledger_url: tuple[str, str], reads: tuple[str, ...], said: bytes
) -> None:
    url, before, command, env = _capture_from_stdin(ledger_url)
    if reads:  # `provledger propose … --value-file -` in place of `capture -`
        command = [*command[:3], *reads, "-", "--json"]
    done = _with_stdin_closed(command, env)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr
    assert b"Traceback" not in done.stderr
    with Ledger.open(url) as led:
        assert led.position == before


def _with_stdin_closed(
    command: list[str], env: dict[str, str]
) -> subprocess.CompletedProcess[bytes]:
    """``command`` run with its standard input closed, as `<&-` in a shell."""
    return subprocess.run(
        command, preexec_fn=lambda: os.close(0), capture_output=True, env=env, check=False
    )


def _small_memory() -> None:
    """A child process's memory capped at 1 GiB: a reader that does not stop at its
    limit fails there, not the machine."""
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


@pytest.mark.parametrize("source", ["-", "/dev/zero"])
def test_capture_of_an_endless_input_reads_no_further_than_the_limit(
    ledger_url: tuple[str, str], source: str
) -> None:
    url, before, command, env = _capture_from_stdin(ledger_url)
    command[command.index("-")] = source

    with open("/dev/zero", "rb") as zero:
        done = subprocess.run(
            command, stdin=zero, preexec_fn=_small_memory, capture_output=True, env=env, check=False
        )
    assert done.returncode == 1, done.stderr
    told = "standard input" if source == "-" else "/dev/zero"
    assert done.stderr.decode() == (
        f"error: content of 'https://x.test/doc' ({told}) is more than 1048576 bytes; "
        "the limit is 1048576 (read no further)\n"
    )
    with Ledger.open(url) as led:
        assert led.position == before


def test_endless_heads_files_and_token_lines_are_refused_not_read_whole(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    Ledger.open(url).close()
    env = {**os.environ, "PROVLEDGER_URL": url}

    def run(*args: str) -> subprocess.CompletedProcess[bytes]:
        with open("/dev/zero", "rb") as zero:
            return subprocess.run(
                [sys.executable, "-m", "ledger", *args],
                stdin=zero, preexec_fn=_small_memory, capture_output=True, env=env, check=False,
            )  # fmt: skip

    key = str(tmp_path / "k")
    generate_key(key)
    heads = run("verify", "--heads", "/dev/zero", "--public-key", key + ".pub")
    assert heads.returncode == 3, heads.stderr  # could not check
    assert heads.stderr.decode().startswith(
        "error: cannot read the heads file '/dev/zero': line 1 is longer than 65,536 bytes"
    )
    # a line that is no UTF-8 is named, as before
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"{}\n{}\n\xff\n")
    named = run("verify", "--heads", str(bad), "--public-key", key + ".pub")
    assert named.returncode == 3 and "line 3 is not UTF-8" in named.stderr.decode()
    token = run("token", "revoke", "-")
    assert token.returncode == 1, token.stderr
    assert token.stderr.decode() == (
        "error: the first line of standard input is longer than 4096 characters: no token "
        "(token revoke - reads one line)\n"
    )


def test_a_graph_refused_for_its_size_suggests_what_was_not_tried(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'graph.db'}"
    with Ledger.open(url) as led:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
        admin.grant("reviewer", scope="proj-a", roles=["approve", "read", "audit"])
        agent = led.authenticate(admin.issue_token("agent-1"))
        reviewer = led.authenticate(token := admin.issue_token("reviewer"))
        reviewer.accept(
            agent.capture(scope="proj-a", uri="https://x.test/d", content=b"d", id="E1")
        )
        for i in range(3):
            agent.propose("proj-a", f"k{i}", i, "inference", parents=["E1"], id=f"M{i}")
            reviewer.accept(f"M{i}")
        reviewer.revoke("E1", reason="wrong")
        before = led.position
    one_side = run(url, "graph", "E1", "--descendants", "--max-nodes", "2", token=token)
    assert one_side.exit_code == 1 and one_side.stdout == ""
    assert "--ancestors or --descendants" not in one_side.stderr, one_side.stderr
    assert "provledger records --scope proj-a --status STALE" in one_side.stderr
    both = run(url, "graph", "E1", "--max-nodes", "2", token=token)
    assert both.exit_code == 1
    assert "draw one side (--ancestors or --descendants) or a record further" in both.stderr
    with Ledger.open(url) as led:
        assert led.position == before


def test_narrow_terminal_lines_bold_the_field_name_and_keep_words_whole(
    ledger_url: tuple[str, str],
) -> None:
    url, token = ledger_url
    env = {"PROVLEDGER_URL": url, "PROVLEDGER_TOKEN": token, "COLUMNS": "40", "FORCE_COLOR": "1"}
    for args in (("get", "F01"), ("records", "--scope", "proj-a", "--limit", "1")):
        out = CliRunner().invoke(main, list(args), env=env).stdout
        assert re.search(r"\x1b\[1mkind +\x1b\[0mfact", out), repr(out)
        plain_text = re.sub(r"\x1b\[[0-9;]*m", "", out)
        assert "NEEDS_REVALIDATION" in plain_text, plain_text  # a status word is never cut
    created = CliRunner().invoke(main, ["get", "F01"], env=env).stdout
    assert re.search(r"created +\x1b\[0m\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00\n", created)


def test_history_at_80_columns_keeps_delivery_ids_hashes_and_instants_whole(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'wide.db'}"
    with Ledger.open(url) as led:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
        admin.grant("reviewer", scope="proj-a", roles=["approve", "read", "audit", "deliver"])
        agent = led.authenticate(admin.issue_token("agent-1"))
        reviewer = led.authenticate(token := admin.issue_token("reviewer"))
        e1 = agent.capture(scope="proj-a", uri="https://x.test/d", content=b"d", id="E1")
        reviewer.accept(e1)
        r1 = agent.propose("proj-a", "report.weekly", "on", "report", parents=[e1], id="R1")
        reviewer.accept(r1)
        delivery = reviewer.deliver("R1", recipient="ops@x.test")
        snapshot = str(reviewer.get("E1").evidence["snapshot_ref"])  # type: ignore[index]
    env = {"PROVLEDGER_URL": url, "PROVLEDGER_TOKEN": token, "COLUMNS": "80"}
    for args in (("history",), ("audit", "E1"), ("audit", "R1")):
        out = CliRunner().invoke(main, list(args), env=env).stdout
        lines = out.splitlines()
        assert max(len(line) for line in lines) <= 80, out
        ids = [snapshot] if args[-1] == "E1" else [delivery] if args[-1] == "R1" else []
        for whole in ids:
            assert any(whole in line for line in lines), out
        assert all(
            re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00", line)
            for line in lines
            if re.search(r"\b20\d\d-\d\d-\d\dT", line)
        ), out


def test_capturing_nothing_is_stored_but_said_on_stderr(ledger_url: tuple[str, str]) -> None:
    url, _ = ledger_url
    with Ledger.open(url) as led:
        token = led.admin().issue_token("agent-1")
    env = {"PROVLEDGER_URL": url, "PROVLEDGER_TOKEN": token}
    args = ["capture", "-", "--scope", "proj-a", "--uri", "https://x.test/e", "--id", "E0"]
    result = CliRunner().invoke(main, args, env=env, input=b"")
    assert result.exit_code == 0, result.output
    assert result.stdout == "E0\n"
    assert result.stderr == "warning: E0 holds 0 bytes: standard input was empty\n"
    full = CliRunner().invoke(main, [*args[:-1], "E9"], env=env, input=b"x")
    assert full.exit_code == 0 and full.stderr == "", full.output


@pytest.mark.skipif(sys.platform != "linux", reason="a pseudo-terminal as stdin")
def test_capture_from_a_terminal_says_how_to_end_the_content(ledger_url: tuple[str, str]) -> None:
    import pty

    url, auditor = ledger_url
    with Ledger.open(url) as led:
        token = led.admin().issue_token("agent-1")
    env = {**os.environ, "PROVLEDGER_URL": url, "PROVLEDGER_TOKEN": token}
    args = ("capture", "-", "--scope", "proj-a", "--uri", "https://x.test/t", "--id", "T1")
    main_fd, child_fd = pty.openpty()
    try:
        os.write(main_fd, b"typed by hand\n\x04")  # a line, then Ctrl-D
        done = subprocess.run(
            [sys.executable, "-m", "ledger", *args],
            stdin=child_fd,
            capture_output=True,
            env=env,
            check=False,
        )
    finally:
        os.close(child_fd)
        os.close(main_fd)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"T1\n"
    assert b"end it with Ctrl-D" in done.stderr
    with Ledger.open(url) as led:
        assert led.authenticate(auditor).get("T1").evidence["size"] == len(b"typed by hand\n")  # type: ignore[index]


def test_history_of_a_record_whose_view_rows_were_removed_closes_its_json_and_says_so(
    ledger_url: tuple[str, str],
) -> None:
    url, token = ledger_url
    # Given F05's rows removed from the views behind the ledger's back
    con = sqlite3.connect(url.removeprefix("sqlite:///"))
    with con:
        con.execute("DELETE FROM pl_records WHERE record_id = 'F05'")
    con.close()

    # When an auditor lists the events around its proposal
    result = run(url, "history", "--json", "--limit", "20", token=token)

    # Then the events before it are listed, and the JSON closes with what is wrong
    answer = json.loads(result.stdout)
    assert result.exit_code == 1
    assert [e["details"]["record_id"] for e in answer["events"]][-1] == "F04"
    assert answer["error"]["type"] == "CorruptEventError"
    assert (
        "record 'F05' has no row in the views, though the log names it"
        in (answer["error"]["message"])
    )
