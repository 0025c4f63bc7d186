"""The public API is exactly what ``ledger/__init__.py`` re-exports (STYLE: sorted
``__all__`` asserted by a test), and every public name is documented."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import ledger

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
    "SnapshotErasedError",
    "SnapshotIntegrityError",
    "StaleCause",
    "Status",
    "StorageError",
    "UnknownDeliveryError",
    "UnknownRecordError",
    "UnknownSnapshotError",
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
