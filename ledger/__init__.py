"""provledger: an event-sourced provenance ledger for AI agents' cross-task memory.

A proposed record is only a CANDIDATE until an approver (never its proposer)
accepts it; every record names what it depends on; revoking a source marks it
REVOKED and every descendant STALE in one transaction; reads pass an eligibility
chain; every action is an immutable event and the views are rebuilt from them.
"""

from ledger.access import Admin, GrantChange, Role
from ledger.application import AcceptanceCheck, Ledger, RunContext, Session
from ledger.domain import Kind, Outcome, RetentionRule, Status, Validity
from ledger.errors import LedgerError
from ledger.values import (
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
)

__version__ = "0.1.0"

__all__ = [
    "AcceptanceCheck",
    "Admin",
    "AuditEvent",
    "AuditTrail",
    "Correction",
    "CorrectionDue",
    "Delivery",
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
    "Status",
    "Validity",
]
