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
    from ledger.access import Admin, GrantChange, Role
    from ledger.application import AcceptanceCheck, Ledger
    from ledger.domain import Kind, Outcome, RetentionRule, Status, Validity
    from ledger.errors import ConnectionLostError, DiskFullError, LedgerError, StorageError
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
        Explanation,
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
    "Admin": "ledger.access",
    "AuditEvent": "ledger.values",
    "AuditTrail": "ledger.values",
    "ConnectionLostError": "ledger.errors",
    "Correction": "ledger.values",
    "CorrectionDue": "ledger.values",
    "Delivery": "ledger.values",
    "DiskFullError": "ledger.errors",
    "Explanation": "ledger.values",
    "HIDDEN": "ledger.values",
    "GrantChange": "ledger.access",
    "Kind": "ledger.domain",
    "Ledger": "ledger.application",
    "LedgerError": "ledger.errors",
    "Outcome": "ledger.domain",
    "ReadResult": "ledger.values",
    "Reason": "ledger.values",
    "RebuildReport": "ledger.values",
    "RecordView": "ledger.values",
    "RetentionRule": "ledger.domain",
    "Revocation": "ledger.values",
    "RevocationPreview": "ledger.values",
    "Role": "ledger.access",
    "RunContext": "ledger.runs",
    "Session": "ledger.session",
    "StaleCause": "ledger.values",
    "Status": "ledger.domain",
    "StorageError": "ledger.errors",
    "Validity": "ledger.domain",
    "WITHHELD": "ledger.values",
}

__all__ = [
    "HIDDEN",
    "WITHHELD",
    "AcceptanceCheck",
    "Admin",
    "AuditEvent",
    "AuditTrail",
    "ConnectionLostError",
    "Correction",
    "CorrectionDue",
    "Delivery",
    "DiskFullError",
    "Explanation",
    "GrantChange",
    "Kind",
    "Ledger",
    "LedgerError",
    "Outcome",
    "ReadResult",
    "Reason",
    "RebuildReport",
    "RecordView",
    "RetentionRule",
    "Revocation",
    "RevocationPreview",
    "Role",
    "RunContext",
    "Session",
    "StaleCause",
    "Status",
    "StorageError",
    "Validity",
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
