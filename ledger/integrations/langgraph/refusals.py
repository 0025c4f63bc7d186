"""How the LangGraph store words a refusal: as the store's own operation."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from langgraph.store.base import GetOp, ListNamespacesOp, Op, PutOp, SearchOp

from ledger.errors import AccessDeniedError

__all__ = ["appeared", "conflict", "named_as", "renamed"]


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


def conflict(prefix: tuple[str, ...] | None, namespace: tuple[str, ...], key: str, ids: str) -> str:
    """The ``MemoryConflictError`` of a ``get`` (``prefix`` None) or a ``search`` of
    ``prefix`` meeting usable records ``ids`` of one key that disagree, with the
    ways out: an approver's, and the store's own (a delete revokes them all)."""
    asked = (
        f"get of {namespace!r} key {key!r}"
        if prefix is None
        else f"search of {prefix!r}: key {key!r} in {namespace!r}"
    )
    return (
        f"{asked}: usable records disagree ({ids}); the ledger keeps both and picks "
        "neither: an approver must revoke or supersede all but one, or delete the key "
        f"through the store (store.delete({namespace!r}, {key!r}) revokes every version "
        "of it) and put it again"
    )


def appeared(put: str, thread: str, run_id: str) -> str:
    """The refusal of a put of ``put`` (a key as a LangGraph user names it) in
    ``thread`` (its ledger run ``run_id``), which read the key as missing, once a
    version of it was accepted since: in the words of a refusal for a version
    withdrawn since."""
    return (
        f"put refused: {put} was missing when LangGraph thread {thread!r} read it (or "
        f"deleted it) earlier in ledger run {run_id!r}, and a version of it was accepted since: "
        "this put would replace that version unseen (what the thread puts rests on "
        f"everything it read: get {put} again in this thread, or continue in a new thread)"
    )
