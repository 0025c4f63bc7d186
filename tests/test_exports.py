"""The public API is exactly what ``ledger/__init__.py`` re-exports (STYLE: sorted
``__all__`` asserted by a test), and every public name is documented."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

import ledger

from .conftest import World
from .test_run_signatures import strict_mypy

EXPECTED = [
    "HIDDEN",
    "WITHHELD",
    "AcceptanceCheck",
    "AcceptanceCheckError",
    "AccessDeniedError",
    "Admin",
    "AuditEvent",
    "AuditTrail",
    "AuthenticationError",
    "ClosedLedgerError",
    "ConcurrencyError",
    "ConnectionLostError",
    "Correction",
    "CorrectionDue",
    "CorruptEventError",
    "CycleError",
    "Delivery",
    "DiskFullError",
    "DuplicateRecordError",
    "Erasure",
    "Evidence",
    "ExpiryInPastError",
    "Explanation",
    "GrantChange",
    "GraphTooLargeError",
    "InclusionProof",
    "InvalidHeadError",
    "InvalidIdError",
    "InvalidInputError",
    "InvalidKeyError",
    "InvalidKindError",
    "InvalidNamespaceLabelError",
    "InvalidParentError",
    "InvalidRoleError",
    "InvalidTransitionError",
    "InvalidURLError",
    "InvalidValueError",
    "Kind",
    "Ledger",
    "LedgerError",
    "LedgerNotFoundError",
    "LedgerStats",
    "LogDigest",
    "MemoryConflictError",
    "NaiveDatetimeError",
    "NotUsableError",
    "Outcome",
    "ReadOnlyError",
    "ReadResult",
    "Reason",
    "RebuildReport",
    "RecordView",
    "RenderBusyError",
    "RenderError",
    "RetentionRule",
    "RetentionRuleError",
    "Revocation",
    "RevocationPreview",
    "Role",
    "RunContext",
    "SelfApprovalError",
    "Session",
    "SignedHead",
    "SlowCheckError",
    "SnapshotErasedError",
    "SnapshotIntegrityError",
    "StaleCause",
    "Status",
    "StorageError",
    "TokenInfo",
    "UnknownDeliveryError",
    "UnknownRecordError",
    "UnknownSnapshotError",
    "UnknownTokenError",
    "UnsupportedStoreOperationError",
    "Validity",
    "ValueTooLargeError",
    "Verification",
]


def test_all_is_sorted() -> None:
    # constants first, then the rest (the order ruff keeps)
    assert ledger.__all__ == sorted(ledger.__all__, key=lambda name: (not name.isupper(), name))


def test_all_is_exactly_the_public_api() -> None:
    assert ledger.__all__ == EXPECTED


def test_spec_names_are_public() -> None:
    # SPEC 10: `from ledger import Ledger, Kind, Status, Outcome, Validity`
    assert {"Ledger", "Kind", "Status", "Outcome", "Validity"} <= set(ledger.__all__)


@pytest.mark.parametrize("name", EXPECTED)
def test_public_name_is_importable(name: str) -> None:
    module = importlib.import_module("ledger")
    assert hasattr(module, name)
    namespace: dict[str, object] = {}
    exec(f"from ledger import {name}", namespace)
    assert namespace[name] is getattr(ledger, name)


@pytest.mark.parametrize("name", EXPECTED)
def test_public_name_has_its_own_docstring(name: str) -> None:
    obj = getattr(ledger, name)
    # The object's own docstring, not one inherited from a base or a generic origin.
    doc = vars(obj).get("__doc__") if hasattr(obj, "__dict__") else obj.__doc__
    assert isinstance(doc, str)
    assert doc.strip(), f"ledger.{name} has no docstring"


def test_strict_mypy_sees_concrete_types_in_what_the_api_returns(tmp_path: Path) -> None:
    # Given a program that uses evidence, stats and grant history as their types say
    program = tmp_path / "typed.py"
    program.write_text(
        "from ledger import Evidence, Ledger, LedgerStats, Role\n"
        "\n"
        "led = Ledger.open('memory:')\n"
        "view = led.authenticate('token').get('E1')\n"
        "assert view.evidence is not None\n"
        "reveal_type(view.evidence['size'])\n"
        "reveal_type(led.stats()['statuses'])\n"
        "reveal_type(led.admin().access_history()[0].role)\n"
        "reveal_type(view.deliveries[0].state)\n"
        "pinned: Evidence = view.evidence\n"
        "counts: LedgerStats = led.stats()\n"
        "role: Role = Role.READ\n"
    )

    # When mypy checks it strictly, with the repository's configuration
    done = strict_mypy(program, tmp_path / "cache")

    # Then each is what it is, not Any
    out = done.stdout
    assert f'{program}:6: note: Revealed type is "int"' in out, out + done.stderr
    assert f'{program}:7: note: Revealed type is "dict[str, int]"' in out
    assert f'{program}:8: note: Revealed type is "ledger.access.Role"' in out
    assert f"{program}:9: note: Revealed type is \"Literal['DELIVERED']\"" in out
    assert "error" not in out, out


def test_strict_mypy_takes_retention_rules_keyed_by_kind_or_by_name(tmp_path: Path) -> None:
    # Given retention rules in a dict typed by Kind, and in one typed by kind name
    program = tmp_path / "rules.py"
    program.write_text(
        "from datetime import timedelta\n"
        "\n"
        "from ledger import Kind, Ledger, RetentionRule\n"
        "\n"
        "by_kind: dict[Kind, RetentionRule] = {Kind.FACT: RetentionRule(expiry_required=True)}\n"
        "by_name: dict[str, RetentionRule] = {'fact': RetentionRule(timedelta(days=1))}\n"
        "Ledger.open('memory:', retention=by_kind).close()\n"
        "Ledger.open('memory:', retention=by_name).close()\n"
    )
    # Then strict mypy takes both, with no cast
    done = strict_mypy(program, tmp_path / "cache")
    assert "error" not in done.stdout, done.stdout + done.stderr


def test_answers_are_json_through_the_documented_helpers_and_keyed_by_id(
    world: World,
) -> None:
    # Given a record read, explained and audited
    from ledger.jsonable import json_safe, plain, record_json

    world.agent.propose("proj-a", "k", {"when": "2026-01-01", "raw": b"\x00"}, "fact", id="F1")
    world.reviewer.accept("F1")
    view = world.reviewer.get("F1")
    answers = [
        world.reviewer.read("proj-a", "k"),
        world.reviewer.explain("proj-a", "k"),
        world.reviewer.audit("F1"),
    ]
    # Then the README's helpers make JSON of each (bytes as base64, times ISO 8601)
    as_json = json.loads(json.dumps(record_json(view)))
    assert as_json["id"] == "F1" and as_json["value"]["raw"] == {"base64": "AA=="}
    assert as_json["created_at"] == view.created_at.isoformat()
    for answer in answers:
        json.dumps(json_safe(plain(answer)))
    # and answers holding values are keyed by id, not hashed; a digest hashes
    for unhashable in (view, *answers):
        with pytest.raises(TypeError, match="unhashable"):
            hash(unhashable)
    assert {world.ledger.digest(): "now"}
