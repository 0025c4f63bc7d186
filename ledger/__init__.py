"""provledger: an event-sourced provenance ledger for AI agents' cross-task memory.

A proposed record is only a CANDIDATE until an approver (never its proposer)
accepts it; every record names what it depends on; revoking a source marks it
REVOKED and every descendant STALE in one transaction; reads pass an eligibility
chain; every action is an immutable event and the views are rebuilt from them.

The names below are imported on first use, so that importing one module of the
package (``ledger.domain``, say, from ``projections``) does not import them all.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ledger.access import Admin, GrantChange, Role, TokenInfo
    from ledger.application import AcceptanceCheck, Ledger
    from ledger.domain import Kind, Outcome, RetentionRule, Status, Validity
    from ledger.erasure import Erasure
    from ledger.errors import (
        AcceptanceCheckError,
        AccessDeniedError,
        AuthenticationError,
        ClosedLedgerError,
        ConcurrencyError,
        ConnectionLostError,
        CorruptEventError,
        CycleError,
        DiskFullError,
        DuplicateRecordError,
        ExpiryInPastError,
        GraphTooLargeError,
        InvalidHeadError,
        InvalidIdError,
        InvalidInputError,
        InvalidKeyError,
        InvalidKindError,
        InvalidNamespaceLabelError,
        InvalidParentError,
        InvalidRoleError,
        InvalidTransitionError,
        InvalidURLError,
        InvalidValueError,
        LedgerError,
        LedgerNotFoundError,
        MemoryConflictError,
        NaiveDatetimeError,
        NotUsableError,
        ReadOnlyError,
        RenderError,
        RetentionRuleError,
        SelfApprovalError,
        SnapshotErasedError,
        SnapshotIntegrityError,
        StorageError,
        UnknownDeliveryError,
        UnknownRecordError,
        UnknownSnapshotError,
        UnsupportedStoreOperationError,
        ValueTooLargeError,
    )
    from ledger.heads import SignedHead
    from ledger.merkle import InclusionProof, LogDigest, Verification
    from ledger.runs import RunContext
    from ledger.session import Session
    from ledger.values import (
        HIDDEN,
        WITHHELD,
        AuditEvent,
        AuditTrail,
        Correction,
        CorrectionDue,
        Delivery,
        Evidence,
        Explanation,
        LedgerStats,
        ReadResult,
        Reason,
        RebuildReport,
        RecordView,
        Revocation,
        RevocationPreview,
        StaleCause,
    )

__version__ = "0.2.0.dev0"

#: Public name → the module defining it.
_HOMES = {
    "AcceptanceCheck": "ledger.application",
    "AcceptanceCheckError": "ledger.errors",
    "AccessDeniedError": "ledger.errors",
    "Admin": "ledger.access",
    "AuditEvent": "ledger.values",
    "AuditTrail": "ledger.values",
    "AuthenticationError": "ledger.errors",
    "ClosedLedgerError": "ledger.errors",
    "ConcurrencyError": "ledger.errors",
    "ConnectionLostError": "ledger.errors",
    "Correction": "ledger.values",
    "CorrectionDue": "ledger.values",
    "CorruptEventError": "ledger.errors",
    "CycleError": "ledger.errors",
    "Delivery": "ledger.values",
    "DiskFullError": "ledger.errors",
    "DuplicateRecordError": "ledger.errors",
    "Erasure": "ledger.erasure",
    "ExpiryInPastError": "ledger.errors",
    "Evidence": "ledger.values",
    "Explanation": "ledger.values",
    "GrantChange": "ledger.access",
    "GraphTooLargeError": "ledger.errors",
    "HIDDEN": "ledger.values",
    "InclusionProof": "ledger.merkle",
    "InvalidHeadError": "ledger.errors",
    "InvalidIdError": "ledger.errors",
    "InvalidInputError": "ledger.errors",
    "InvalidKeyError": "ledger.errors",
    "InvalidKindError": "ledger.errors",
    "InvalidNamespaceLabelError": "ledger.errors",
    "InvalidParentError": "ledger.errors",
    "InvalidRoleError": "ledger.errors",
    "InvalidTransitionError": "ledger.errors",
    "InvalidURLError": "ledger.errors",
    "InvalidValueError": "ledger.errors",
    "Kind": "ledger.domain",
    "Ledger": "ledger.application",
    "LedgerError": "ledger.errors",
    "LedgerNotFoundError": "ledger.errors",
    "LedgerStats": "ledger.values",
    "LogDigest": "ledger.merkle",
    "MemoryConflictError": "ledger.errors",
    "NaiveDatetimeError": "ledger.errors",
    "NotUsableError": "ledger.errors",
    "Outcome": "ledger.domain",
    "ReadOnlyError": "ledger.errors",
    "ReadResult": "ledger.values",
    "Reason": "ledger.values",
    "RebuildReport": "ledger.values",
    "RecordView": "ledger.values",
    "RenderError": "ledger.errors",
    "RetentionRule": "ledger.domain",
    "RetentionRuleError": "ledger.errors",
    "Revocation": "ledger.values",
    "RevocationPreview": "ledger.values",
    "Role": "ledger.access",
    "RunContext": "ledger.runs",
    "SelfApprovalError": "ledger.errors",
    "Session": "ledger.session",
    "SignedHead": "ledger.heads",
    "SnapshotErasedError": "ledger.errors",
    "SnapshotIntegrityError": "ledger.errors",
    "StaleCause": "ledger.values",
    "Status": "ledger.domain",
    "StorageError": "ledger.errors",
    "TokenInfo": "ledger.access",
    "UnknownDeliveryError": "ledger.errors",
    "UnknownRecordError": "ledger.errors",
    "UnknownSnapshotError": "ledger.errors",
    "UnsupportedStoreOperationError": "ledger.errors",
    "Validity": "ledger.domain",
    "ValueTooLargeError": "ledger.errors",
    "Verification": "ledger.merkle",
    "WITHHELD": "ledger.values",
}

__all__ = [
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
    "TokenInfo",
    "UnknownDeliveryError",
    "UnknownRecordError",
    "UnknownSnapshotError",
    "UnsupportedStoreOperationError",
    "Validity",
    "ValueTooLargeError",
    "Verification",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'ledger' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
