"""Answers that stay usable at 20,000 records: ``revoke`` summarises, ``graph``
refuses above ``--max-nodes`` and never reports success for a picture it could
not draw, tables never cut an id at 80 columns, and positions are the ones
``as-of`` needs."""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ledger import Ledger
from ledger.cli import main

ROOT = Path(__file__).resolve().parent.parent
DESCENDANTS = 20_000


def build(path: Path, children: int) -> tuple[str, str]:
    """E1 (accepted evidence) with ``children`` candidates resting on it, R delivered;
    returns the URL and the reviewer's token."""
    url = f"sqlite:///{path}"
    with Ledger.open(url) as led:
        admin = led.admin()
        admin.grant("agent-1", scope="proj-a", roles=["propose", "read"])
        admin.grant("reviewer", scope="proj-a", roles=["approve", "read", "audit", "deliver"])
        agent = led.authenticate(admin.issue_token("agent-1"))
        token = admin.issue_token("reviewer")
        reviewer = led.authenticate(token)
        agent.capture(scope="proj-a", uri="https://x.test/doc", content=b"x", id="E1")
        reviewer.accept("E1")
        agent.propose(
            scope="proj-a", claim_key="report.r", value=1, kind="report", parents=["E1"], id="R"
        )
        reviewer.accept("R")
        reviewer.deliver("R", recipient="ops@x.test")
        agent.propose_many(
            {
                "scope": "proj-a",
                "claim_key": f"gen.k{i}",
                "value": i,
                "kind": "inference",
                "parents": ["E1"],
                "id": f"M{i:05d}",
            }
            for i in range(children)
        )
    return url, token


@pytest.fixture(scope="module")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    path = tmp_path_factory.mktemp("big") / "big.db"
    _url, token = build(path, DESCENDANTS)
    return path, token


@pytest.fixture
def big(big_file: tuple[Path, str], tmp_path: Path) -> tuple[str, str]:
    """A fresh copy of the 20,000-descendant ledger: its URL and the reviewer's token."""
    path, token = big_file
    copy = tmp_path / "big.db"
    shutil.copyfile(path, copy)
    return f"sqlite:///{copy}", token


def cli(url: str, token: str, *args: str, **env: str) -> Result:
    environment = {"PROVLEDGER_URL": url, "PROVLEDGER_TOKEN": token, **env}
    return CliRunner().invoke(main, list(args), env=environment)


def test_revoking_20000_descendants_prints_a_bounded_summary(big: tuple[str, str]) -> None:
    url, token = big
    result = cli(url, token, "revoke", "E1", "--reason", "doc changed")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert len(out.splitlines()) < 40  # not a 20,001-row table
    assert f"STALE {DESCENDANTS + 1:,}" in out  # R and the 20,000
    assert "deliveries now owing a correction: 1" in out
    assert f"… and {DESCENDANTS + 1 - 20:,} more STALE, not listed: a revocation given --all" in out
    assert f"--limit {DESCENDANTS + 1}, with the audit role)" in out  # as --limit takes it
    with Ledger.open(url) as led:
        assert led.authenticate(token).get("M19999").status == "STALE"


def test_revoke_all_and_json_give_every_record(big: tuple[str, str]) -> None:
    url, token = big
    data = json.loads(cli(url, token, "revoke", "E1", "--reason", "x", "--json").stdout)
    assert len(data["affected"]) == DESCENDANTS + 2
    assert data["counts"] == {"REVOKED": 1, "STALE": DESCENDANTS + 1}
    assert [d["delivery"]["record_id"] for d in data["deliveries_owing_correction"]] == ["R"]
    assert data["before_position"] == data["position"] - 1


def test_revoke_all_lists_every_record(tmp_path: Path) -> None:
    url, token = build(tmp_path / "small.db", 30)
    out = cli(url, token, "revoke", "E1", "--reason", "x", "--all").stdout
    assert all(f"M{i:05d}" in out for i in range(30)) and "more STALE" not in out


def test_revoke_prints_the_positions_as_of_needs(tmp_path: Path) -> None:
    url, token = build(tmp_path / "small.db", 3)
    out = cli(url, token, "revoke", "E1", "--reason", "doc changed").stdout
    revoked_at = int(re.search(r"revoked E1 at log position (\d+)", out)[1])  # type: ignore[index]
    before = int(re.search(r"state before: provledger as-of --position (\d+)", out)[1])  # type: ignore[index]
    assert before == revoked_at - 1

    def status_at(position: int) -> str:
        got = cli(url, token, "as-of", "--position", str(position), "get", "E1", "--json")
        return str(json.loads(got.stdout)["status"])

    assert status_at(before) == "ACCEPTED"  # the state before, as printed
    assert status_at(revoked_at) == "REVOKED"
    history = cli(url, token, "history", "--type", "Revoked", "--json")
    assert [e["position"] for e in json.loads(history.stdout)["events"]] == [revoked_at]


def test_a_graph_of_20000_records_is_refused_with_a_summary_and_no_file(
    big: tuple[str, str], tmp_path: Path
) -> None:
    url, token = big
    cli(url, token, "revoke", "E1", "--reason", "x")
    target = tmp_path / "huge.png"
    result = cli(url, token, "graph", "E1", "--format", "png", "-o", str(target))
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert f"has {DESCENDANTS + 2:,} records, more than --max-nodes 500" in result.stderr
    assert f"STALE {DESCENDANTS + 1:,}, REVOKED 1" in result.stderr
    assert f"gen.* {DESCENDANTS:,}" in result.stderr
    assert not target.exists()


@pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz's dot")
def test_a_png_dot_cannot_draw_at_full_size_is_an_error_not_a_success(tmp_path: Path) -> None:
    url, token = build(tmp_path / "wide.db", 450)  # one row of 450 boxes: too wide for cairo
    target = tmp_path / "wide.png"
    result = cli(url, token, "graph", "E1", "--format", "png", "-o", str(target))
    assert result.exit_code == 1, result.output
    assert "too large for a PNG" in result.stderr and "--format svg" in result.stderr
    assert "wrote" not in result.stdout and not target.exists()


def test_png_is_not_written_to_a_terminal(tmp_path: Path) -> None:
    url, token = build(tmp_path / "small.db", 2)
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ledger", "graph", "E1", "--format", "png"],
            stdout=follower,
            stderr=subprocess.PIPE,
            env={
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "PROVLEDGER_URL": url,
                "PROVLEDGER_TOKEN": token,
            },
            timeout=120,
        )
    finally:
        os.close(follower)
        os.close(leader)
    assert done.returncode == 2
    assert b"png is binary and stdout is a terminal: give -o FILE.png" in done.stderr


def test_pictures_have_a_legend_and_the_revocation_on_revoked_records(tmp_path: Path) -> None:
    url, token = build(tmp_path / "small.db", 2)
    cli(url, token, "revoke", "E1", "--reason", "doc changed")
    dot = cli(url, token, "graph", "E1", "--format", "dot").stdout
    assert "cluster_legend" in dot and ">REVOKED<" in dot and ">STALE<" in dot
    assert "double border: delivered" in dot
    label = re.search(r'"E1" \[label="([^"]*)"', dot)[1]  # type: ignore[index]
    assert "reason: doc changed" in label and "by reviewer at 20" in label
    mermaid = cli(url, token, "graph", "E1", "--format", "mermaid").stdout
    assert "subgraph legend" in mermaid and "reason: doc changed" in mermaid


def test_ids_are_never_cut_in_an_80_column_terminal(tmp_path: Path) -> None:
    url, token = build(tmp_path / "small.db", 1)
    long_id = "M-" + "x" * 60
    with Ledger.open(url) as led:
        reviewer = led.authenticate(token)
        agent = led.authenticate(led.admin().issue_token("agent-1"))
        agent.propose(
            scope="proj-a",
            claim_key="report.long",
            value="a rather long value " * 3,
            kind="report",
            parents=["E1"],
            id=long_id,
        )
        reviewer.accept(long_id)
        delivery = reviewer.deliver(long_id, recipient="ops@x.test")
    cli(url, token, "revoke", "E1", "--reason", "a reason long enough to need folding " * 2)
    for args in (
        ("corrections",),
        ("records", "--scope", "proj-a"),
        ("history", "--record", long_id),
        ("explain", "--scope", "proj-a", "--claim", "report.long"),
    ):
        result = cli(url, token, *args, COLUMNS="80")
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        assert max(len(line) for line in lines) <= 80, args
        assert any(long_id in line for line in lines), args
    corrections = cli(url, token, "corrections", COLUMNS="80").stdout
    assert any(delivery in line for line in corrections.splitlines())


def test_stale_and_revoked_have_the_pictures_colours() -> None:
    from ledger.cli.options import STATUS_STYLE
    from ledger.diagram import STATUS_COLOURS
    from ledger.domain import Status

    assert STATUS_STYLE["STALE"] != STATUS_STYLE["REVOKED"]
    assert STATUS_COLOURS[Status.STALE][1] in STATUS_STYLE["STALE"]  # orange
    assert "red" in STATUS_STYLE["REVOKED"] or "#d32f2f" in STATUS_STYLE["REVOKED"]
