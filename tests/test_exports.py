"""The public API is exactly what ``ledger/__init__.py`` re-exports (STYLE: sorted
``__all__`` asserted by a test), and every public name is documented."""

from __future__ import annotations

import importlib

import pytest

import ledger

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
