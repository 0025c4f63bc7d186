"""Full verification of a ledger: heads, log, authorization, views, evidence bytes.

:func:`verify` (what ``Ledger.verify`` and ``provledger verify`` run) reads the
log once, in one read transaction, and checks, in this order, naming the first
problem it finds:

1. **heads** — every kept signed head (``heads=``) verifies with ``public_key=``,
   and heads later in the file are not smaller than earlier ones;
2. **log** — every stored event's bytes are what was appended (its Merkle leaf,
   written in the same transaction; the 0.1 check, same messages);
3. **consistency** — the log is consistent with every kept head (an RFC 9162
   consistency proof from the head's tree to the current one, and the head's
   last position): truncation and rewriting before the newest head are caught;
   with ``against=`` the same for one unsigned digest;
4. **authorization** — every event's actor held the role it needed by the log's
   own grant and token events at that position, separation of duties held, the
   status machine was obeyed, each aggregate's events are numbered in sequence,
   none is of a type no command writes, and at the end nothing CANDIDATE or
   ACCEPTED rests on a withdrawn record (:mod:`ledger.authorization`);
5. **views** — the views equal a replay of the log into a scratch SQLite database
   in a temporary directory (the live views are only read, never repaired);
6. **evidence bytes** — every stored snapshot matches its hash, every captured one
   is present unless the log records its erasure, and no erased one is still stored.

Checks 2 and 4 are one streaming pass, :class:`ledger.log_check.LogWalk`, which
signing a head (``provledger head``, a compliance bundle) runs too, without the
views and evidence-bytes checks. A stored value of a type the ledger never writes
(an event's bytes kept as text, say) is found and named by
:mod:`ledger.stored_types`, not left to crash a check.

What no check can see: an event appended *after* the newest kept head by
someone holding a valid token with the role it needs looks exactly like a
legitimate command (see docs/evidence.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sqlite3
import tempfile
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger import gc_pause, merkle
from ledger.authorization import AuthorizationReplay
from ledger.consistency import against_problem, check_extends, consistency_problem, describe
from ledger.errors import CorruptEventError, InvalidInputError, LedgerError
from ledger.heads import SignedHead, as_heads, key_id, load_public_key, verify_head
from ledger.log_check import Batch, LogWalk
from ledger.merkle import LogDigest, MerkleTree, Verification
from ledger.rules import CLOCK_SKEW
from ledger.serialization import unpack
from ledger.stored_types import (
    READ_ERRORS,
    UnreadableViewError,
    first_mistyped_leaf,
    mistyped_snapshot,
    readable,
    snapshot_row,
    snapshots_statement,
)
from ledger.validation import quoted
from projections.base import SQLITE, Cursor, fetch_in_chunks, rows_digest
from projections.projector import LAYOUT_KEY, RETIRED, Projector, later_layout

if TYPE_CHECKING:
    from ledger.engine import Engine
    from ledger.heads import PublicKeyLike

#: How many problems a report lists (the first one is the report's ``problem``).
MAX_PROBLEMS = 20
_CHECKS = ("heads", "log", "consistency", "authorization", "views", "evidence bytes")


@dataclass
class _Findings:
    """Problems per check, in the order the checks are reported."""

    by_check: dict[str, list[tuple[int | None, str]]] = field(
        default_factory=lambda: {name: [] for name in _CHECKS}
    )

    def add(self, check: str, problem: str, position: int | None = None) -> None:
        found = self.by_check[check]
        if len(found) < MAX_PROBLEMS:
            found.append((position, problem))

    def ordered(self) -> list[tuple[int | None, str]]:
        return [item for name in _CHECKS for item in self.by_check[name]]

    def failed(self) -> tuple[str, ...]:
        """The checks that found a problem, in report order."""
        return tuple(name for name in _CHECKS if self.by_check[name])


def verify(
    engine: Engine,
    against: LogDigest | str | None = None,
    *,
    heads: str | os.PathLike[str] | Iterable[SignedHead] | None = None,
    public_key: PublicKeyLike | None = None,
    older_copy: bool = False,
) -> Verification:
    """Check the ledger completely (see the module docstring); never writes.

    Args:
        against: a digest kept elsewhere (``size:position:root``); the log must
            extend it.
        heads: signed heads kept elsewhere: a heads file path, or heads.
        public_key: the key the heads were signed with (a ``KEY.pub`` path or key);
            needed with ``heads``.
        older_copy: the ledger is a copy made before some of the kept heads were
            signed: a head of a longer log than this one is not checked for
            consistency (its signature and order are) but counted (``beyond``),
            where it is otherwise a problem (events removed). A log cut back
            looks the same, unless an event of it was written more than
            ``CLOCK_SKEW`` after such a head was signed (a problem then).

    Raises:
        InvalidInputError: ``against`` is not a digest; ``heads`` without
            ``public_key``.
        InvalidHeadError: the heads file is malformed.
        InvalidKeyError: the public key cannot be loaded.
    """
    engine.check_open()
    target = _as_digest(against)
    kept = as_heads(heads)
    key = None if public_key is None else load_public_key(public_key)
    if kept and key is None:
        raise InvalidInputError(
            "verifying kept heads needs the public key that signed them "
            "(public_key=; --public-key on the command line)"
        )
    if key is not None and heads is None:
        raise InvalidInputError(
            "a public key checks kept heads: give the heads it signed too "
            "(heads=; --heads on the command line)"
        )
    findings = _Findings()
    if key is not None:
        _check_signatures(kept, key, findings)
    replay = AuthorizationReplay()
    with gc_pause.paused(), engine.reading() as c, _Scratch(engine, c) as scratch:
        if engine.dialect.name == "postgresql":
            # Its comparisons run in Python between statements, for longer on a
            # larger ledger than the server's idle_timeout allows a transaction to
            # idle: this read-only one may (it is ended when verify ends).
            c.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
        tracking = engine.projector.tracking_map(c)
        views_upto = min(tracking.values()) if tracking else 0
        differences: list[str] = []

        def at_views() -> None:
            # The replay has reached the views' position: compare them now (the
            # events after it are replayed next, so one no view can take is named).
            if not _views_of_0_1_0(engine, c):
                differences.extend(_compare_views(engine, c, scratch))

        tree, positions, log_ok, latest = _walk_log(
            engine, c, replay, scratch, (views_upto, at_views), findings
        )
        if log_ok:
            for unmarked in replay.unmarked():
                findings.add("authorization", unmarked)
        digest = LogDigest(
            size=tree.size,
            position=positions[-1] if positions else 0,
            root=tree.root().hex(),
        )
        beyond = 0  # kept heads of a longer log, counted (older_copy)
        for number, head in enumerate(kept, start=1):
            if older_copy and head.tree_size > tree.size:
                beyond += 1
                forked = _written_after(head, number, tree.size, latest)
                if forked is not None:  # no copy made before it
                    findings.add("consistency", forked, latest[0] if latest else None)
                continue
            problem = consistency_problem(tree, positions, head.digest, f"head {number}", head)
            if problem is not None:
                findings.add("consistency", problem)
        proof: tuple[str, ...] = ()
        if target is not None:
            problem = against_problem(tree, positions, target)
            if problem is not None:
                findings.add("consistency", problem)
            elif target.size < tree.size:
                proof = tuple(p.hex() for p in tree.consistency_path(target.size))
        # Views 0.1.0 built (rebuilt when the ledger is next opened normally)
        # cannot be compared: the check is left out, and said so.
        compared = log_ok and not _views_of_0_1_0(engine, c)
        if compared:
            newest = positions[-1] if positions else 0
            if views_upto < newest:
                findings.add("views", _lag_problem(views_upto, newest), views_upto + 1)
            for problem in differences:
                findings.add("views", problem)
        if log_ok:
            for problem in _evidence_problems(engine, c, replay):
                findings.add("evidence bytes", problem)
    ordered = findings.ordered()
    ran = {
        "heads": bool(kept),
        "consistency": len(kept) > beyond or target is not None,
        "authorization": log_ok,
        "views": compared,
        "evidence bytes": log_ok,
    }
    checks = tuple(name for name in _CHECKS if ran.get(name, True))
    if not ordered:
        return Verification(
            ok=True,
            digest=digest,
            consistency_proof=proof,
            problems=(),
            checks=checks,
            heads=len(kept) - beyond,
            unchecked=tuple(sorted(replay.unchecked)),
            beyond=beyond,
        )
    located = [pos for pos, _ in ordered if pos is not None]
    return Verification(
        ok=False,
        digest=digest,
        first_bad_position=located[0] if located else None,
        problem=ordered[0][1],
        failed_checks=findings.failed(),
        problems=tuple(problem for _, problem in ordered),
        checks=checks,
        heads=len(kept) - beyond,
        unchecked=tuple(sorted(replay.unchecked)),
        beyond=beyond,
    )


def _written_after(
    head: SignedHead, number: int, size: int, latest: tuple[int, datetime] | None
) -> str | None:
    """Why a log shorter than ``head`` is no copy made before it (an event of it,
    ``latest``, was written more than :data:`~ledger.rules.CLOCK_SKEW` after the
    head was signed: its writer's clock and the signer's may differ by that much),
    or None. Events stamped earlier than they were written are not caught."""
    if latest is None or latest[1] <= head.time + CLOCK_SKEW:
        return None
    minutes = int(CLOCK_SKEW.total_seconds() // 60)
    return (
        f"head {number} ({describe(head)}) describes {head.tree_size} events, more than "
        f"the log's {size}, yet its event at position {latest[0]} was written at "
        f"{latest[1].isoformat()}, more than {minutes} minutes after that head was "
        "signed: it is no copy made before the head (events were removed after it, and "
        "others written since)"
    )


def _lag_problem(views_upto: int, newest: int) -> str:
    """What views behind the log mean: a command writes its events and their view
    rows in one transaction, so the views of this version never lag the log."""
    return (
        f"the views stop at position {views_upto} while the log goes on to {newest}: "
        "a command writes its events and their view rows in one transaction, so view "
        f"rows from position {views_upto + 1} on were removed, or the events from there "
        "were appended behind the ledger's back (opening the ledger for writing would "
        "apply them and hide this)"
    )


def _as_digest(against: LogDigest | str | None) -> LogDigest | None:
    if against is None:
        return None
    try:
        if isinstance(against, LogDigest | str):
            return LogDigest.parse(str(against))
    except ValueError:
        pass
    raise InvalidInputError(
        f"cannot verify against {quoted(against)}: expected a LogDigest or its text, "
        "size:position:<64 hex characters>, or a signed head's JSON line"
    )


def heads_problems(kept: Sequence[SignedHead], key: Any) -> list[str]:
    """What ``verify``'s heads check finds wrong with the heads of a file (``kept``,
    in file order) under the public ``key``: a head signed by another key or whose
    signature fails, heads out of order, a head smaller than the one before."""
    findings = _Findings()
    _check_signatures(kept, key, findings)
    return [problem for _, problem in findings.ordered()]


def _check_signatures(kept: Sequence[SignedHead], key: Any, findings: _Findings) -> None:
    expected = key_id(key)
    for number, head in enumerate(kept, start=1):
        if head.key_id != expected:
            # Its key_id is not signed for: a head the given key signed, the field
            # alone edited, is named as altered, not as another key's.
            altered = verify_head(dataclasses.replace(head, key_id=expected), key)
            findings.add(
                "heads",
                f"head {number} ({describe(head)}): its key_id was altered to "
                f"{head.key_id[:16]}…; its signature is the given public key's "
                f"{expected[:16]}…"
                if altered
                else f"head {number} ({describe(head)}) was signed by key "
                f"{head.key_id[:16]}…, not by the given public key {expected[:16]}…",
            )
        elif not verify_head(head, key):
            findings.add(
                "heads", f"head {number} ({describe(head)}): the signature does not verify"
            )
        before = kept[number - 2] if number > 1 else None
        if before is None or head.tree_size >= before.tree_size:
            continue  # (a later head may carry an earlier time: clocks step back)
        if head.time < before.time:
            findings.add(
                "heads",
                f"head {number} ({describe(head)}) is smaller than head {number - 1} "
                f"({describe(before)}) and was signed before it: the file's heads are out "
                "of order (each head is appended after the ones signed before it)",
            )
        else:
            findings.add(
                "consistency",
                f"head {number} ({describe(head)}) is smaller than head {number - 1} "
                f"(tree size {before.tree_size}): the log was cut back between them",
            )


def _walk_log(
    engine: Engine,
    c: Cursor,
    replay: AuthorizationReplay,
    scratch: _Scratch,
    views: tuple[int, Callable[[], None]],
    findings: _Findings,
) -> tuple[MerkleTree, array[int], bool, tuple[int, datetime] | None]:
    """The log and authorization checks (:class:`~ledger.log_check.LogWalk`, the
    one pass signing runs too), with the views part: the recomputed tree, the
    position of each leaf, whether the log is intact (then every event was
    replayed into ``scratch``), and the position and time of its latest event
    (by time). ``views``: the live views' position, and what to call once the
    replay has applied every event up to it and none after (while the log is
    intact so far)."""
    tree, positions = MerkleTree(), array("q")  # 8 bytes a leaf
    views_upto, at_views = views
    reached = False
    latest: tuple[int, datetime] | None = None

    def replayed(batch: Batch) -> bool:
        # Views that lag the log (named by ``verify``: no command leaves them so)
        # are compared as far as they go, and the rest of the log replayed after them.
        nonlocal reached, latest
        for position, event in batch:
            if latest is None or event.timestamp > latest[1]:
                latest = (position, event.timestamp)
        upto = sum(1 for position, _ in batch if position <= views_upto)
        problem = scratch.apply(batch[:upto]) if upto else None
        if problem is None and upto < len(batch):
            if not reached:
                reached = True
                at_views()
            problem = scratch.apply(batch[upto:])
        if problem is not None:
            findings.add("views", problem)
        return problem is None

    walk = LogWalk(engine, c, replay, findings.add, replayed)
    for position, leaf in walk:
        tree.append(leaf)
        positions.append(position)
    if walk.intact and not reached:
        at_views()
    return tree, positions, walk.intact, latest


# -- views: a replay in a scratch database ------------------------------------------------


class _Scratch:
    """A throwaway SQLite database in a temporary directory, replaying the log into
    fresh views with the ledger's own projections. The record a later event belongs
    to is found by its proposal in the ledger's log, read with ``live``."""

    def __init__(self, engine: Engine, live: Cursor) -> None:
        self._record_ids = lambda _c, ids: engine.recorder.record_ids(live, ids)

    def __enter__(self) -> _Scratch:
        self._dir = tempfile.TemporaryDirectory(prefix="provledger-verify-")
        self.connection = sqlite3.connect(Path(self._dir.name) / "replay.db", isolation_level=None)
        self.connection.row_factory = sqlite3.Row
        self.connection.execute("PRAGMA journal_mode=OFF")
        self.connection.execute("PRAGMA synchronous=OFF")
        self.cursor = self.connection.cursor()
        self.projector = Projector(
            dialect=SQLITE, reader=lambda c, after, limit: [], record_ids=self._record_ids
        )
        self.cursor.execute("BEGIN")
        self.projector.reset(self.cursor)  # empty views in the current layout
        return self

    def __exit__(self, *exc: object) -> None:
        self.connection.close()
        self._dir.cleanup()

    def apply(self, batch: list[tuple[int, Any]]) -> str | None:
        """Apply decoded events; a problem if the projections refuse them."""
        try:
            self.projector.apply(self.cursor, batch)
        except LedgerError as exc:
            return f"replaying the log into fresh views fails: {exc}"
        except sqlite3.IntegrityError as exc:  # fresh views: an event repeats a key
            return (
                "replaying the log into fresh views fails: an event at positions "
                f"{batch[0][0]} to {batch[-1][0]} writes a row an earlier event wrote ({exc})"
            )
        return None


def _rows(c: Cursor, sql: str) -> tuple[list[str], Iterator[tuple[Any, ...]]]:
    c.execute(sql)
    raw: Any = getattr(c, "sqlite_cursor", c)
    names = [str(col[0]) for col in raw.description]

    def rows() -> Iterator[tuple[Any, ...]]:
        for row in fetch_in_chunks(c):
            values = row.values() if isinstance(row, dict) else row
            yield tuple(_plain(v) for v in values)

    return names, rows()


def _plain(value: Any) -> Any:
    if isinstance(value, (memoryview, bytearray)):
        return bytes(value)
    return value


#: Columns of the record view that every layout after 0.1.0's has and 0.1.0's
#: lacks (an open creates the tables a later layout adds, empty, but changes no
#: table's columns).
_COLUMNS_AFTER_0_1_0 = frozenset({"agg_id", "supersedes", "superseded_by", "stale_via"})


#: How a problem begins that says the views are a later version's (not shown as
#: tampering by the command line, though not passed either).
LATER_VIEWS = "the views say a later version of provledger built them"


def _views_of_0_1_0(engine: Engine, c: Cursor) -> bool:
    """Whether the views are 0.1.0's: no layout recorded, its id map kept, and its
    record view without the columns every later layout added (every later
    layout also records itself and drops the id map). Views of this version
    dressed up as 0.1.0's (the layout row removed, an id map added) are not:
    their rows are compared."""
    if engine.projector.layout(c) is not None or not engine.recorder.has_table(c, RETIRED[0]):
        return False
    names, _ = _rows(c, engine.dialect.q("SELECT * FROM {t}pl_records WHERE 1 = 0"))
    return _COLUMNS_AFTER_0_1_0.isdisjoint(names)


def _compare_views(engine: Engine, c: Cursor, scratch: _Scratch) -> Iterator[str]:
    """A changed layout row, then the first difference between the live views and
    the replay (the rows are compared whatever the layout row says)."""
    layout, current = engine.projector.layout(c), engine.projector.current_layout
    if layout is None:
        yield (
            "the views record no layout, yet they are not 0.1.0's (which kept "
            f"{RETIRED[0]} and had fewer columns): the layout row was removed"
        )
    elif later_layout(layout, current):  # not passed: this version cannot vouch for them
        yield (
            f"{LATER_VIEWS} (layout {layout}; this version builds {current}): verify "
            "with that version (if none built them, the layout row was changed)"
        )
    elif layout != current:
        yield (
            f"the views say they were built with layout {layout}, which no released "
            f"version of provledger wrote (0.1.0 recorded none; this version writes "
            f"{current}): the layout row was changed"
        )
    try:
        yield from _differences(engine, c, scratch)
    except UnreadableViewError as exc:
        yield str(exc)


def _differences(engine: Engine, c: Cursor, scratch: _Scratch) -> Iterator[str]:
    """The first difference between each live view table and the replay's. The
    layout row is left out: :func:`_compare_views` checks it against the layout
    of the live backend (the replay's, SQLite's, may differ: ``layout_of``)."""
    d = engine.dialect
    for table in (*engine.projector.tables, "pl_tracking"):
        if not engine.projector.has_table(c, table):
            yield f"view table {table} is missing (`provledger rebuild` makes it from the log)"
            continue
        where = f" WHERE view <> '{LAYOUT_KEY}'" if table == "pl_tracking" else ""
        names, replayed = _rows(scratch.cursor, f"SELECT * FROM {table}{where}")
        replay_digest = rows_digest(replayed)
        live_names, live = _rows(c, d.q(f"SELECT * FROM {{t}}{table}{where}"))
        live = readable(table, live)
        missing = [n for n in names if n not in live_names]
        if missing:
            yield f"view {table} lacks the column {missing[0]!r} a replay of the log fills"
            continue
        order = [live_names.index(n) for n in names]
        if rows_digest(tuple(row[i] for i in order) for row in live) == replay_digest:
            continue
        # They differ: read both sides whole (only now) to name the first difference.
        replay_all = Counter(_rows(scratch.cursor, f"SELECT * FROM {table}{where}")[1])
        live_all = Counter(
            tuple(row[i] for i in order)
            for row in readable(table, _rows(c, d.q(f"SELECT * FROM {{t}}{table}{where}"))[1])
        )
        yield _difference(table, names, live_all - replay_all, replay_all - live_all)


def _show(value: Any) -> str:
    """A view cell as a problem names it: packed bytes (a value, a list of
    parents) as what they hold, other bytes by their length; cut at 60 characters."""
    if isinstance(value, bytes):
        try:
            text = f"<packed {unpack(value)!r}>"
        except Exception:  # not msgpack: a hash, a reference
            return f"<{len(value)} bytes>"
    else:
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "…"


def _difference(
    table: str,
    names: Sequence[str],
    live_only: Counter[tuple[Any, ...]],
    replay_only: Counter[tuple[Any, ...]],
) -> str:
    def key(row: tuple[Any, ...]) -> tuple[str, ...]:
        return tuple(repr(v) for v in row)

    def ident(row: tuple[Any, ...], width: int) -> str:
        pairs = zip(names[:width], row[:width], strict=False)
        return ", ".join(f"{n}={_show(v)}" for n, v in pairs)

    extra = sorted(live_only, key=key)
    lacking = sorted(replay_only, key=key)
    for row in extra:
        twins = [r for r in lacking if r[0] == row[0]]
        if not twins:
            continue
        twin = max(twins, key=lambda r: sum(a == b for a, b in zip(r, row, strict=True)))
        diffs = [i for i, (a, b) in enumerate(zip(row, twin, strict=True)) if a != b]
        first = diffs[0]
        more = f" (and {len(diffs) - 1} more columns)" if len(diffs) > 1 else ""
        return (
            f"view {table} differs from a replay of the log: the row "
            f"{ident(row, min(2, first))} has "
            f"{names[first]}={_show(row[first])} where the replay has {_show(twin[first])}{more}"
        )
    if extra:
        return f"view {table} has a row no event produced: {ident(extra[0], 4)}"
    return f"view {table} lacks a row the log produces: {ident(lacking[0], 4)}"


# -- evidence bytes -------------------------------------------------------------------------


def _evidence_problems(engine: Engine, c: Cursor, replay: AuthorizationReplay) -> Iterator[str]:
    """Stored snapshot bytes against what the log says should (not) be there."""
    c.execute(snapshots_statement(engine.dialect))
    present: set[str] = set()
    for row in fetch_in_chunks(c, 64):
        ref, ref_found, found, content = snapshot_row(row)
        present.add(ref)
        state = replay.snapshots.get(ref)
        mistyped = mistyped_snapshot(ref, ref_found, found)
        if mistyped is not None:
            yield mistyped
        elif "sha256:" + hashlib.sha256(content).hexdigest() != ref:
            yield f"snapshot {ref}: the stored bytes do not match their hash"
        elif state is None:
            yield f"snapshot {ref} is stored but no evidence in the log captured it"
        elif state[1] == "erased":
            yield (
                f"snapshot {ref} was erased at position {state[0]} (evidence {state[2]!r}) "
                "but its bytes are still stored"
            )
    for ref, (position, what, record, _by, _reason) in sorted(replay.snapshots.items()):
        if what == "captured" and ref not in present:
            yield (
                f"the bytes of snapshot {ref} (evidence {record!r}, captured at position "
                f"{position}) are missing, and the log records no erasure of them"
            )


__all__ = ["MAX_PROBLEMS", "check_extends", "verify"]


def digest(engine: Engine) -> LogDigest:
    """The Merkle root over the stored leaves (every event as it was appended).

    It reads the leaves alone and checks nothing: over a log whose stored bytes
    no longer match their leaves, or hold an event no one was authorized to
    append, it is the root of the leaves as they are stored. Signing checks
    first (:func:`ledger.log_check.checked_digest`); ``verify`` checks everything.

    Raises:
        CorruptEventError: a Merkle leaf is stored as another type than bytes.
    """
    last = 0

    def leaves() -> Iterator[bytes]:
        nonlocal last
        for position, leaf in engine.recorder.leaves(c):
            last = position
            yield leaf

    with engine.reading() as c:
        try:
            size, root = merkle.root_of(leaves())
        except READ_ERRORS:
            mistyped = first_mistyped_leaf(engine, c)
            if mistyped is None:
                raise
            raise CorruptEventError(f"{mistyped}; run `provledger verify`") from None
    return LogDigest(size=size, position=last, root=root.hex())
