"""The log and authorization checks in one streaming pass over the log.

:class:`LogWalk` reads the stored events and their Merkle leaves once, in log
order, within the read transaction it is given: it recomputes each event's leaf
from its stored bytes and compares it with the stored one (no stray or missing
position, no value of a type the ledger never writes), and replays each decoded
event through an :class:`~ledger.authorization.AuthorizationReplay`. It yields
each event's recomputed leaf as it goes, so its caller builds whatever tree it
needs from the very bytes that were checked.

Two callers:

- :func:`ledger.verification.verify` (checks 2 and 4 of its list), which also
  replays the decoded events into scratch views (the ``replayed`` hook) and
  keeps every complete subtree of the tree for its consistency proofs;
- signing: :func:`checked_digest` (what :func:`ledger.heads.signed_head` and so
  ``provledger head`` sign) and :func:`checked_inclusion_paths` (the head and
  inclusion proofs of a compliance bundle). A head is signed only over a log
  that passes ``verify``'s log and authorization checks, read in the same
  transaction as the digest it signs: the first problem refuses it with
  :class:`~ledger.errors.CorruptEventError`, naming the problem as ``verify``
  would. These leave out ``verify``'s views replay and evidence-bytes check (the
  expensive ones, and not about what a head signs), so a head over a log whose
  views were edited is still signed; a bundle checks the views it states
  separately (:func:`ledger.bundle.write._check_view`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterator
from typing import TYPE_CHECKING, Any

from ledger import gc_pause, merkle
from ledger.authorization import AuthorizationReplay
from ledger.errors import CorruptEventError, LedgerError
from ledger.merkle import LogDigest
from ledger.stored_types import mistyped_event, read_events, read_leaves

if TYPE_CHECKING:
    from ledger.engine import Engine
    from projections.base import Cursor

#: Where a problem is reported: (check, problem, position or None); the check is
#: ``"log"`` or ``"authorization"``.
Report = Callable[[str, str, int | None], None]
#: Decoded events of one batch, as (position, event), in log order.
Batch = list[tuple[int, Any]]

_BATCH = 1000


class LogWalk:
    """One pass over the stored events and leaves, in position order (iterate it).

    Yields (position, leaf) for each stored event, the leaf recomputed from the
    event's stored bytes. Problems go to ``report``: ``"log"`` ones (the first
    only: after it the log is no longer intact, and nothing more is checked or
    replayed) and ``"authorization"`` ones (each event's). ``replayed``, if
    given, is called with each batch of decoded events while the log is intact;
    it returns False to stop the replay there (the log then counts as not
    intact). :attr:`intact` says, once the walk is done, whether every event
    was checked and replayed.
    """

    def __init__(
        self,
        engine: Engine,
        c: Cursor,
        replay: AuthorizationReplay,
        report: Report,
        replayed: Callable[[Batch], bool] | None = None,
    ) -> None:
        self._engine = engine
        self._c = c
        self._replay = replay
        self._report = report
        self._replayed = replayed
        #: No problem in the log so far (then every event so far was replayed).
        self.intact = True

    def _broken(self, problem: str, position: int) -> None:
        self.intact = False
        self._report("log", problem, position)

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        engine, c = self._engine, self._c
        stray = engine.recorder.stray_position(c)
        if stray is not None:
            position, what = stray
            self._broken(
                f"the {what} at position {position} was not appended by the ledger (log "
                "positions start at 1)",
                position,
            )
        after = 0
        while True:
            notes, unreadable = read_events(engine, c, after, _BATCH)
            upper = unreadable[0] if unreadable else notes[-1].id if notes else None
            stored, odd_leaves = read_leaves(engine, c, after, upper)
            by_position = {n.id: n for n in notes}
            odd_events = dict([unreadable] if unreadable else [])
            for note in notes:
                mistyped = mistyped_event(note)
                if mistyped is not None:
                    odd_events[note.id] = mistyped
                    del by_position[note.id]  # its leaf cannot be recomputed
            batch: Batch = []
            every = set(stored) | set(by_position) | set(odd_events) | set(odd_leaves)
            for position in sorted(every):
                note = by_position.get(position)
                leaf = (
                    None
                    if note is None
                    else merkle.leaf_hash(
                        merkle.leaf_data(
                            note.id,
                            note.originator_id,
                            note.originator_version,
                            note.topic,
                            note.state,
                        )
                    )
                )
                if self.intact:
                    problem = (
                        odd_events.get(position)
                        or odd_leaves.get(position)
                        or _leaf_problem(position, leaf, stored.get(position))
                    )
                    if problem is not None:
                        self._broken(problem, position)
                if leaf is not None:
                    yield position, leaf
                if not self.intact or note is None:
                    continue
                try:
                    event = engine.projector.decode(note)
                except LedgerError as exc:
                    self._broken(str(exc), position)
                    continue
                problem = self._replay.apply(position, event)
                if problem is not None:
                    self._report("authorization", problem, position)
                batch.append((position, event))
            if batch and self.intact and self._replayed is not None:
                self.intact = self._replayed(batch)
            if upper is None:
                return
            after = upper


def _leaf_problem(position: int, leaf: bytes | None, stored: bytes | None) -> str | None:
    if leaf is None:
        return f"the event at position {position} is missing"
    if stored is None:
        return f"the event at position {position} was not appended by the ledger"
    if leaf != stored:
        return f"the stored bytes at position {position} differ from what was appended"
    return None


# -- before signing ---------------------------------------------------------------------


def signable_leaves(engine: Engine, c: Cursor, refused: str) -> Iterator[tuple[int, bytes]]:
    """(position, leaf) of each stored event, the leaf recomputed from its bytes,
    in log order, read with ``c`` (so within its transaction): the leaves of a log
    a head may be signed over. The log and authorization checks of ``verify`` run
    as they are read.

    Raises (as the leaves are read, or once the last one was):
        CorruptEventError: the log fails one of those checks; the message starts
            with ``refused`` and names the problem ``verify`` names first.
    """
    replay = AuthorizationReplay()
    first: list[str] = []

    def report(check: str, problem: str, position: int | None = None) -> None:
        if check == "log":  # nothing after it is checked: refuse now
            raise _refusal(refused, check, problem)
        if not first:
            first.append(problem)  # (a log problem later in the log still comes first)

    yield from LogWalk(engine, c, replay, report)
    first.extend(itertools.islice(replay.unmarked(), 1 - len(first)))
    if first:
        raise _refusal(refused, "authorization", first[0])


def _refusal(refused: str, check: str, problem: str) -> CorruptEventError:
    return CorruptEventError(
        f"{refused}: the log fails verify's {check} check: {problem} (run `provledger verify`)"
    )


def checked_digest(engine: Engine, refused: str) -> LogDigest:
    """The digest of the log as it is now, read in one read transaction with one
    pass over the log that checks it (:func:`signable_leaves`): the digest a head
    may be signed over. Memory grows with the authorization replay's state (one
    small state per record), not with the tree.

    Raises:
        CorruptEventError: the log fails ``verify``'s log or authorization
            check (the message starts with ``refused``).
    """
    last = 0

    def leaves() -> Iterator[bytes]:
        nonlocal last
        for position, leaf in signable_leaves(engine, c, refused):
            last = position
            yield leaf

    with gc_pause.paused(), engine.reading() as c:
        size, root = merkle.root_of(leaves())
    return LogDigest(size=size, position=last, root=root.hex())


def checked_inclusion_paths(
    engine: Engine, c: Cursor, size: int, indexes: Collection[int], refused: str
) -> tuple[bytes, dict[int, list[bytes]]]:
    """The root of the log read with ``c`` (``size`` leaves: the stored leaves'
    count in the same transaction) and the audit path of each leaf in
    ``indexes``, as :func:`ledger.merkle.inclusion_paths` gives them, over leaves
    recomputed from the events' bytes while the whole log is checked
    (:func:`signable_leaves`), in one pass.

    Raises:
        CorruptEventError: the log fails ``verify``'s log or authorization
            check (the message starts with ``refused``).
    """
    walk = signable_leaves(engine, c, refused)
    with gc_pause.paused():
        found = merkle.inclusion_paths((leaf for _, leaf in walk), size, indexes)
        for _ in walk:  # the rest of the log (nothing, once ``size`` leaves were read)
            pass  # and the checks made at its end
    return found


__all__ = ["LogWalk", "checked_digest", "checked_inclusion_paths", "signable_leaves"]
