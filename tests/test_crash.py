"""Crash injection: a writer SIGKILLed at a random moment leaves every command
wholly present or wholly absent, views that catch up to equal a rebuild, and a
log that passes the Merkle tamper check.

A few kills per scenario here (the harness is ``tests/crash.py``; the soak
script runs 100 per scenario). SQLite for every scenario; PostgreSQL (required
when CI=true) for the batch import and the revocation.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import new_pg_schema_url
from .crash import (
    SCENARIOS,
    check,
    prepare_batch_import,
    run_campaign,
    run_child,
    sqlite_files,
)

KILLS = 3
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
SEED = 20260101


def url_factory(backend: str, tmp_path: Path) -> Callable[[], Any]:
    """New empty ledgers for the campaign: SQLite files, or PostgreSQL schemas."""
    if backend == "sqlite":
        return sqlite_files(tmp_path)
    return new_pg_schema_url  # skips, or fails on CI, if the server is unreachable


def assert_every_kill_passed(summary: dict[str, Any]) -> None:
    assert summary["kills"] == KILLS
    assert summary["calibration"]["failures"] == [], summary["calibration"]
    assert summary["failures"] == 0, summary["failed"]
    assert summary["checks_passed"] == KILLS


def test_the_harness_knows_every_scenario_the_issue_names() -> None:
    assert set(SCENARIOS) == {"batch_import", "revocation", "catch_up", "rebuild"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_batch_import_killed_at_random_leaves_each_batch_whole_or_absent(
    backend: str, tmp_path: Path
) -> None:
    # Step 1: a child imports batches of 2,000 with propose_many and is killed
    # at a random moment; the checker counts each batch's records by id prefix,
    # the events, and runs verify and rebuild.
    scale = 0.5 if backend == "sqlite" else 0.25  # 4 batches, or 2 on PostgreSQL
    summary = run_campaign("batch_import", KILLS, url_factory(backend, tmp_path), SEED, scale=scale)

    # Step 2: every batch was all-or-nothing, the complete ones a prefix, every
    # acknowledged one durable, and the event count setup + 2,000 per batch.
    assert_every_kill_passed(summary)
    batches = round(8 * scale)
    assert all(outcome.endswith(f"/{batches} batches") for outcome in summary["outcomes"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_revocation_killed_at_random_marks_every_descendant_or_none(
    backend: str, tmp_path: Path
) -> None:
    # Step 1: a root with 1,500 ACCEPTED descendants (750 on PostgreSQL, where
    # accepting them one by one is slow) over chains, diamonds and an observed
    # edge; the child revokes it.
    scale = 0.5 if backend == "sqlite" else 0.25
    summary = run_campaign("revocation", KILLS, url_factory(backend, tmp_path), SEED, scale=scale)

    # Step 2: either REVOKED with every descendant STALE because of it, or
    # ACCEPTED with none STALE; never a half-applied revocation.
    assert_every_kill_passed(summary)
    assert set(summary["outcomes"]) <= {"applied", "absent"}
    assert summary["calibration"]["outcome"] == "applied"


def test_a_catch_up_killed_at_random_is_finished_exactly_once_by_the_next_open(
    tmp_path: Path,
) -> None:
    # Step 1: views ~9,000 events behind the log (written with the projector
    # stopped); the child opens the ledger, which catches them up, and is killed.
    summary = run_campaign("catch_up", KILLS, sqlite_files(tmp_path), SEED, scale=0.4)

    # Step 2: the next open catches up fully; one record version per status
    # event, one timeline row per event, tracking at the log position, and the
    # views equal a rebuild.
    assert_every_kill_passed(summary)
    assert set(summary["outcomes"]) <= {"rolled back", "committed", "partial"}


def test_a_rebuild_killed_at_random_leaves_the_views_as_they_were(tmp_path: Path) -> None:
    # Step 1: ~12,000 events over every view; the child rebuilds and is killed.
    summary = run_campaign("rebuild", KILLS, sqlite_files(tmp_path), SEED, scale=0.4)

    # Step 2: the views digest is the one from before the rebuild started.
    assert_every_kill_passed(summary)
    assert set(summary["outcomes"]) <= {"interrupted", "completed"}


def test_a_kill_right_after_a_batch_committed_keeps_that_batch(tmp_path: Path) -> None:
    # Step 1: kill the importer as soon as it reports its first batch committed
    # (a deterministic mid-work kill, whatever the machine's speed).
    url, remove = sqlite_files(tmp_path)()
    state = prepare_batch_import(url, scale=0.5)
    run = run_child("batch_import", url, state, delay=0.0, after="batch-done 0")

    # Step 2: the kill landed mid-work; batch 0 is there whole, and whatever
    # the next batch reached is all or nothing.
    assert run.killed_at is not None
    assert run.phase == "mid"
    checked = check("batch_import", url, state, run)
    assert checked.failures == []
    assert checked.outcome in {"1/4 batches", "2/4 batches"}
    remove()
