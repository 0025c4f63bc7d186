"""What ``provledger`` writes to a terminal: stored text is shown, never obeyed
(``ledger.cli.terminal``). Run as a real process on a pseudo-terminal."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ledger import Ledger
from ledger.cli.terminal import guarded, inert

#: An 8-bit CSI that would turn what follows red, and a right-to-left override
#: that would make "DETEPECCA" read "ACCEPTED" on the screen.
VALUE = "retry \x9b31mnever\x9b0m \u202eDETPECCA\u202c"
CLAIM = "api.retry\x9d0;title\x9c"  # an 8-bit OSC that would retitle the window


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A ledger holding one accepted record with active characters in its value and claim."""
    url = f"sqlite:///{tmp_path / 'term.db'}"
    with Ledger.open(url) as led:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose", "read", "audit"])
        admin.grant("reviewer", scope="proj-a", roles=["approve", "read"])
        agent = led.authenticate(admin.issue_token("agent-1"))
        agent.propose("proj-a", CLAIM, VALUE, "fact", id="M1")
        led.authenticate(admin.issue_token("reviewer")).accept("M1")
        token = admin.issue_token("agent-1")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PROVLEDGER_")}
    return {**clean, "PROVLEDGER_URL": url, "PROVLEDGER_TOKEN": token, "COLUMNS": "200"}


def on_terminal(env: dict[str, str], *args: str) -> tuple[int, str]:
    """Run ``provledger ARGS`` with stdout and stderr on a pseudo-terminal."""
    master, slave = pty.openpty()
    done = subprocess.Popen(
        [sys.executable, "-m", "ledger", *args], stdout=slave, stderr=slave, env=env
    )
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the terminal closed: the process has exited
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return done.wait(timeout=60), out.decode("utf-8")


@pytest.mark.parametrize(
    "args",
    [
        ("get", "M1"),
        ("get", "M1", "--json"),
        ("records", "--scope", "proj-a"),
        ("read", "--scope", "proj-a", "--claim", CLAIM),
        ("read", "--scope", "proj-a", "--claim", CLAIM, "--json"),
    ],
    ids=["get", "get-json", "records", "read", "read-json"],
)
def test_active_characters_reach_a_terminal_as_escapes(
    env: dict[str, str], args: tuple[str, ...]
) -> None:
    code, shown = on_terminal(env, *args)

    assert code == 0, shown
    for active in ("\x9b", "\x9d", "\x9c", "\u202e", "\u202c"):
        assert active not in shown
    assert "\\u202eDETPECCA\\u202c" in shown
    assert "\\u009b31mnever" in shown


@pytest.mark.parametrize(
    "args",
    [
        ("graph", "M1", "--format", "mermaid"),
        ("graph", "M1", "--format", "dot"),
        ("export", "--format", "prov-n", "--record", "M1"),
    ],
    ids=["mermaid", "dot", "prov-n"],
)
def test_pictures_and_exports_written_to_a_terminal_are_guarded_too(
    env: dict[str, str], args: tuple[str, ...]
) -> None:
    # Written as bytes (they may go to a file), they once passed the guard.
    with Ledger.open(env["PROVLEDGER_URL"]) as led:
        admin = led.admin()
        admin.grant("reviewer", scope="proj-a", roles=["approve", "read"])
        led.authenticate(admin.issue_token("reviewer")).revoke("M1", reason=VALUE)
    code, shown = on_terminal(env, *args)

    assert code == 0, shown
    for active in ("\x9b", "\x9d", "\x9c", "\u202e", "\u202c"):
        assert active not in shown
    assert "\\u009b31mnever" in shown and "\\u202eDETPECCA" in shown


@pytest.mark.parametrize(
    "args", [("get", "M1"), ("records", "--scope", "proj-a")], ids=["get", "records"]
)
def test_escapes_in_a_table_keep_its_borders_in_line(
    env: dict[str, str], args: tuple[str, ...]
) -> None:
    # Written out after the table's layout, an escape pushed its row's border out.
    with Ledger.open(env["PROVLEDGER_URL"]) as led:
        agent = led.authenticate(env["PROVLEDGER_TOKEN"])
        agent.propose("proj-a", "plain.key", 3, "fact", id="M2")
    code, shown = on_terminal({**env, "COLUMNS": "120"}, *args)

    assert code == 0, shown
    rows = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in shown.splitlines()]
    rows = [row for row in rows if row[:1] in ("│", "┃", "┌", "└", "┏", "┡")]
    assert any("\\u202eDETPECCA" in row for row in rows) and len(rows) > 3
    assert {len(row) for row in rows} == {len(rows[0])}, "\n".join(rows)


def test_a_word_made_longer_by_its_escapes_is_laid_out_as_written_out(
    env: dict[str, str],
) -> None:
    # Measured before it was escaped, such a word was cut inside an escape
    word = "\u200b".join(("ab", "cd", "ef", "gh", "ij", "kl", "mn"))
    with Ledger.open(env["PROVLEDGER_URL"]) as led:
        admin = led.admin()
        admin.grant("reviewer", scope="proj-a", roles=["approve", "read", "audit"])
        agent = led.authenticate(env["PROVLEDGER_TOKEN"])
        agent.propose("proj-a", "k", 1, "fact", id="M2")
        reviewer = led.authenticate(admin.issue_token("reviewer"))
        reviewer.reject("M2", reason=f"see {word} and the rest of a reasonably long reason text")
        token = admin.issue_token("reviewer")
    code, shown = on_terminal({**env, "COLUMNS": "100", "PROVLEDGER_TOKEN": token}, "audit", "M2")

    assert code == 0, shown
    plain = re.sub(r"\x1b\[[0-9;]*m", "", shown)
    assert "\\u200b" in plain
    assert not re.search(r"\\(?!u[0-9a-f]{4})", plain), plain  # no escape cut


def test_both_streams_are_guarded_on_a_terminal_and_put_back_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    master, slave = pty.openpty()
    with os.fdopen(slave, "w", encoding="utf-8") as terminal:
        monkeypatch.setattr(sys, "stdout", terminal)
        monkeypatch.setattr(sys, "stderr", terminal)
        with guarded():
            assert sys.stdout is not terminal and sys.stderr is not terminal
            sys.stderr.write(f"error: {VALUE}\n")
            sys.stderr.flush()
        assert sys.stdout is terminal and sys.stderr is terminal
        shown = os.read(master, 4096).decode("utf-8")
    os.close(master)

    assert shown.startswith("error: retry \\u009b31mnever")
    assert "\x9b" not in shown and "\u202e" not in shown


def test_output_to_a_pipe_is_the_stored_text_byte_for_byte(env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ledger", "get", "M1", "--json"],
        env=env,
        capture_output=True,
        check=True,
    )

    record = json.loads(done.stdout.decode("utf-8"))
    assert record["value"] == VALUE and record["claim_key"] == CLAIM


def test_inert_escapes_only_what_a_terminal_would_act_on() -> None:
    assert inert("caf\u00e9 \u65e5\u672c \x9b31m \u2067x\u2069") == (
        "caf\u00e9 \u65e5\u672c \\u009b31m \\u2067x\\u2069"
    )
    assert inert("plain \\u009b stays") == "plain \\u009b stays"
    assert inert("\u200fmark") == "\\u200fmark"
    # Invisible format characters: two claim keys must not look alike
    assert inert("api.retry\u200b_safe \u00adx \ufeffy") == (
        "api.retry\\u200b_safe \\u00adx \\ufeffy"
    )
    assert inert("a\u200db \U000e0041") == "a\\u200db \\udb40\\udc41"
    # but not a joiner where it belongs (an emoji sequence, Persian), nor a flag's tags
    kept = "\U0001f468\u200d\U0001f469 \u0645\u06cc\u200c\u062e"
    flag = "\U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f"
    assert inert(kept + flag) == kept + flag
    # A joiner between Cyrillic or Latin letters, or beside another, makes a look-alike
    assert (
        inert("\u043a\u200d\u044e \u00e9\u200c\u00e9") == "\u043a\\u200d\u044e \u00e9\\u200c\u00e9"
    )
    assert inert("\U0001f468\u200d\u200d\U0001f469").count("\\u200d") == 2
    # Tag characters that are no flag are hidden text: written out
    hidden = "ok \U0001f3f4" + "".join(chr(0xE0000 + ord(c)) for c in "obey me") + "\U000e007f"
    tags = "".join(f"\\udb40\\u{0xDC00 + ord(c):04x}" for c in "obey me\x7f")
    assert inert(hidden) == "ok \U0001f3f4" + tags
    # A format character that shows a mark is no hidden one
    assert inert("\u06dd\u0661") == "\u06dd\u0661"
