"""A ledger belongs to the process that opened it.

Its connections (an SQLite file's, a PostgreSQL pool's) are that process's: a
child made by ``fork`` after the ledger was opened (``multiprocessing``'s default
on Linux, a pre-forking server) inherits them, and using them from both sides
mixes the two processes' conversations with the database. Every open engine is
tracked here; in a forked child each is marked ``inherited`` (its
``check_open`` then refuses it by name) and what it holds is kept, never freed:
freeing a PostgreSQL connection ends its session, which is the parent's too.

What the ledger's own code holds across a fork is reset in the child (the
collector pauses of :mod:`ledger.gc_pause`, the LangGraph store's key locks), so a
child can open a ledger of its own. SQLite's own locks are not the ledger's: fork
while another thread is inside SQLite and the child's SQLite may wait for good
(SQLite's rule: no fork while a connection is in use). A process with threads
that use a ledger should start its children with ``spawn`` or ``forkserver``.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

#: Every open engine of this process.
_OPENED: weakref.WeakSet[Any] = weakref.WeakSet()
#: In a forked child, what inherited engines held (kept for the child's life).
_KEPT: list[Any] = []


def track(engine: Any) -> None:
    """Mark ``engine`` inherited in any child this process forks from now on."""
    _OPENED.add(engine)


def _after_fork_in_child() -> None:
    for engine in list(_OPENED):
        engine.inherited = True
        _KEPT.append(engine.app)


os.register_at_fork(after_in_child=_after_fork_in_child)
