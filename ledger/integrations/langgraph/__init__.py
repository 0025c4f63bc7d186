"""A LangGraph long-term memory store whose memories are ledger records.

``LedgerStore`` implements LangGraph's ``BaseStore`` (``batch`` and ``abatch``),
so a graph compiled with ``store=LedgerStore(...)`` keeps its memories in the
ledger without changing the agent's code: every ``put`` is a proposal, every
``get`` and ``search`` passes the eligibility chain, a second ``put`` of a key is
a new version that supersedes the old one, and ``delete`` revokes, which marks
every memory derived from the deleted one STALE. A delete revokes the key's
ACCEPTED and STALE versions and the store's own puts still awaiting review;
candidates other principals proposed under the key are left to their reviewers.

Where an item lives
    ``namespace[:scope_depth]`` names the ledger scope; the remaining labels and
    the key make the claim key. With ``scope_depth=1`` the first label *is* the
    scope (it must be a ledger name: ``^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$``);
    with a greater depth the scope labels are joined with ``:``, so they may not
    contain ``:`` themselves. A label the ledger cannot hold is refused with
    :class:`NamespaceLabelError` (a LangGraph ``InvalidNamespaceError``) naming
    it, never rewritten. So is a ``put`` whose key makes no claim key the ledger
    can hold (empty directly under the scope, longer than 512 characters once
    escaped); no item can be there, so ``get`` of it answers None and ``delete``
    does nothing, as in LangGraph's own stores. A namespace is a tuple (or list)
    of labels: a bare string is refused, not read as one label per character.
    As in LangGraph, a put may not use an empty namespace or the root label
    ``langgraph`` (in a batch too, where LangGraph's own stores take it); a
    get or delete there is checked as anywhere else (it names no scope, or needs
    roles in the scope ``langgraph``).

    The claim key is the remaining labels and the key, each escaped, joined with
    ``/``: ``("proj-a", "users", "u1")`` + ``"theme"`` is scope ``proj-a``, claim
    key ``users/u1/theme``. Escaping writes a character as ``%`` and the
    upper-case hex of its UTF-8 bytes; it applies to ``%`` and ``/`` always, to
    characters that are not printable (controls, format characters, separators
    other than the plain space), and to whitespace at either end of a label or
    key. If the result is still not in Unicode NFC form, every non-ASCII
    character of it is escaped too, so the ledger never normalises a key into
    another one. Unescaping is plain percent-decoding, so the mapping is
    injective: no two ``(namespace, key)`` pairs share a claim key, and a claim
    key is read back as an item only if escaping its decoded parts gives it
    again.

What is visible
    Only records of the store's ``kind`` (``fact`` unless configured) are its
    items. ``get`` and ``search`` return usable records only (accepted, every
    ancestor accepted and unexpired, no unmet condition); when usable records of
    one key disagree the store raises :class:`MemoryConflictError` instead of
    picking one. ``Item.created_at`` and ``Item.updated_at`` are both the time
    the current version was proposed (the earlier versions and their times are
    in the ledger's history). ``search`` lists the current versions scope by
    scope in name order and by record id within a scope (a ledger lists one
    scope at a time): newest first for the store's own puts, whose ids sort that
    way, and by their ids for records proposed otherwise. A scope whose name holds
    a ``.`` is never listed (LangGraph refuses such a label). ``search`` filters on
    value fields: exact match, or ``$eq $ne $gt $gte $lt $lte``; a dotted field
    name reaches into nested mappings; a field missing from a value passes an
    equality with None, as in LangGraph's stores, and fails every other
    condition on it. ``list_namespaces`` lists the namespaces holding an item
    (not one only read, or emptied by deletes), sorted; ``max_depth=0`` cuts each
    to ``()``, as ``InMemoryStore`` does. There is no semantic index:
    ``search(query=...)`` and ``put(index=[...])`` naming fields are refused
    (``index=[]``, like ``index=False``, asks for none), and so is ``ttl`` (a
    ledger expiry is fixed when a record is proposed and is not refreshed by
    reads).

Approval policy
    Without ``approver_token`` a ``put`` is a CANDIDATE and ``get`` returns None
    until someone with ``approve`` accepts it (the review queue is
    ``Session.records(scope, status="CANDIDATE")``). With ``approver_token`` the
    store accepts each of its puts at once as that principal, in the proposal's
    own transaction (``Session.propose(..., accepted_by=...)``): a put is stored
    accepted, or not at all (a refused acceptance leaves nothing). This is an
    explicit trade: it gives up separation of duties (the agent's writes are
    approved by a principal the agent's host controls) for the convenience of
    LangGraph's usual put-then-get. The approver must be another principal than
    the proposer. Deletes revoke as the approver if there is one, else as the
    store's own principal (which then needs ``approve``).

Provenance
    Inside a graph node the store reads ``thread_id`` from the runnable config
    and does its work in one ledger run per thread (``Session.run``; a thread
    resumed by a later store over the same ledger goes on in run ``….1``,
    ``….2``, as an ended run cannot be reopened): what the thread read through
    ``get`` and ``search`` becomes the ``observed`` dependencies of what it
    puts, so revoking a memory makes the memories derived from it STALE, and
    ``get`` no longer returns them. The ledger refuses a proposal that rests on
    a record withdrawn since the thread read it. When the version the thread
    read was superseded by one the thread read or wrote later (the usual
    read-modify-write), the store shows the run the old version and observes the
    newer one in its place, and the put goes through. A thread that read a
    memory since revoked, or superseded by a version it never saw, gets the
    ledger's ``InvalidParentError`` on its next put, naming the namespace and
    key, until it reads the key again (``get``): the run is then shown what
    became of the version it read, and no longer rests on it. A key the thread
    read as missing (``get`` answered None) or deleted is guarded the same way:
    its put is refused if a version of the key was accepted since, decided in the
    put's own transaction, so threads that all found a key missing and put it
    make one version, the others refused until they read it again. Outside a graph,
    or in one invoked with no ``thread_id``, nothing is recorded as observed (a
    graph that puts so is told once, with :class:`NoThreadWarning`). A store
    closed after its ledger cannot end its threads' runs: they stay open, and
    :class:`RunsLeftOpenWarning` names them.

    ``LedgerStore(..., observe_search=False)`` makes a ``search`` context, not a
    basis: what it shows a thread is not observed on what the thread puts, and
    it changes nothing the thread's later puts are checked against (a key the
    thread read as missing stays guarded, and a record it rests on stays a
    dependency, until it ``get``\\ s the key); ``get`` is observed as always.
    It is meant for the usual memory loop, which searches every memory into the
    prompt at each turn and puts one: by default each put rests on every memory
    shown, so correcting one memory (a second put, which supersedes it) makes
    every memory put after it STALE.

Batches
    As LangGraph's own stores do, a batch answers its reads (``GetOp``,
    ``SearchOp``, ``ListNamespacesOp``) from the state before the batch and then
    applies its ``PutOp``\\ s, the last one for a key winning. Every value is
    checked before any put is written (a value the ledger cannot hold fails the
    whole batch), and so are the ``propose`` role in each put's scope and the
    approver's ``approve`` role there; each put is
    then a ledger transaction of its own. ``abatch``
    runs the batch in a worker thread, so the event loop is never blocked. Puts and
    deletes of one key run one at a time in a process, whatever the thread or
    the store: a put reads the version it replaces before it proposes, so two at
    once would both replace it and leave two accepted values. A put from another
    process that replaced the version meanwhile makes the ledger refuse the stale
    replacement (writing nothing), and the store tries again on the newer
    version: the last put wins. The version a put replaces is found under the
    ledger's writers' lock, so puts of a new key from two processes at once make
    one version and its successor. Only another surface writing under the key
    (a proposal with no ``supersedes``) can leave two that disagree; ``get`` then
    raises :class:`MemoryConflictError`, and deleting the key clears it.

Modules: :mod:`~ledger.integrations.langgraph.keys` (namespace and key ↔ scope
and claim key), :mod:`~ledger.integrations.langgraph.checks` (what an operation
must be before a batch runs), :mod:`~ledger.integrations.langgraph.filters`
(search filters), :mod:`~ledger.integrations.langgraph.threads` (one run per
thread, and the keys each read as missing),
:mod:`~ledger.integrations.langgraph.refusals` (what a refused put or read says)
and :mod:`~ledger.integrations.langgraph.store` (``LedgerStore``).
"""

from __future__ import annotations

from ledger.errors import require_extra

require_extra("langgraph", "ledger.integrations.langgraph", "langgraph.store.base")

from ledger.errors import MemoryConflictError, UnsupportedStoreOperationError
from ledger.integrations.langgraph.keys import (
    NamespaceLabelError,
    claim_key_of,
    labels_of,
    parse_claim_key,
    scope_of,
)
from ledger.integrations.langgraph.store import LedgerStore
from ledger.integrations.langgraph.threads import (
    NoThreadWarning,
    RunsLeftOpenWarning,
    run_id_of,
)

__all__ = [
    "LedgerStore",
    "MemoryConflictError",
    "NamespaceLabelError",
    "NoThreadWarning",
    "RunsLeftOpenWarning",
    "UnsupportedStoreOperationError",
    "claim_key_of",
    "labels_of",
    "parse_claim_key",
    "run_id_of",
    "scope_of",
]
