"""How the LangGraph store words a refusal: as the store's own operation."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from langgraph.store.base import GetOp, ListNamespacesOp, Op, PutOp, SearchOp

from ledger.errors import AccessDeniedError

__all__ = ["named_as", "renamed"]


@contextmanager
def named_as(op: Op) -> Iterator[None]:
    """A refusal for a missing role named as the store's operation (``get``,
    ``search``, ``put``, ``delete``, ``list_namespaces``), not as the ledger
    call it made (``read``, ``records``, ``propose``, ``explain``)."""
    try:
        yield
    except AccessDeniedError as exc:
        name = {GetOp: "get", SearchOp: "search", ListNamespacesOp: "list_namespaces"}.get(
            type(op), "delete" if isinstance(op, PutOp) and op.value is None else "put"
        )
        raise renamed(exc, name) from None


def renamed(exc: AccessDeniedError, name: str) -> AccessDeniedError:
    """``exc`` (``"<ledger call> refused: …"``) as a refusal of the store's ``name``."""
    ledger_call, refused, why = str(exc).partition(" refused: ")
    if not refused or " " in ledger_call:
        return exc
    return AccessDeniedError(f"{name} refused: {why}")
