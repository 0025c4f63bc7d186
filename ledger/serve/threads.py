"""A request's work in a worker thread, waited for to its end.

A worker thread cannot be stopped: a write it has begun commits whatever becomes
of the request that started it. ``run_in_threadpool`` stops waiting when the
request's task is cancelled (the event loop ending with the request still under
way, say), and the server then answers a plain-text 500 to a write that commits
after all, which a client told 500 sends again. :func:`finish_in_thread` waits on,
so the request is answered with what its work did.

Writes run under a limit of their own (:data:`WRITE_THREADS` at once), apart from
the pool reads and pages use: a writer waits for the ledger's write lock in its
thread (up to the lock timeout, 30 s by default), and writes piling up behind a
lock held elsewhere (a backup, a rebuild, another host's writer) would otherwise
take every thread, and every team's reads and console pages would wait with them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar
from weakref import WeakKeyDictionary

import anyio
import anyio.to_thread

T = TypeVar("T")

#: Writes under way at once; more wait for a turn without holding a thread. The
#: ledger takes one writer at a time (SQLite's lock, PostgreSQL's table lock), so
#: more would only wait for the lock in threads that reads need.
WRITE_THREADS = 8

#: The write limit of each event loop (a limiter belongs to the loop it is used in).
_write_limits: WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = (
    WeakKeyDictionary()
)


def write_limit() -> anyio.CapacityLimiter:
    """The running event loop's limit on writes under way (``async with`` it to
    hold a turn: the MCP endpoint does, for each call)."""
    loop = asyncio.get_running_loop()
    limit = _write_limits.get(loop)
    if limit is None:
        limit = _write_limits[loop] = anyio.CapacityLimiter(WRITE_THREADS)
    return limit


async def finish_in_thread(work: Callable[[], T], *, write: bool = False) -> T:
    """``work()`` run in a worker thread; its result, or what it raised. A
    ``write`` runs under the write limit (:data:`WRITE_THREADS`), anything else in
    the pool reads share (Starlette's, anyio's default limit).

    If the awaiting task is cancelled before the work began, the work never runs
    and the cancellation goes on; once it has begun, the task waits for its
    outcome and returns it (the cancellation is dropped: nothing can stop the work).
    """
    outcome: Future[T] = Future()

    def job() -> None:
        if not outcome.set_running_or_notify_cancel():
            return  # given up before it began: nothing done
        try:
            outcome.set_result(work())
        except BaseException as exc:  # raised again in the awaiting task
            outcome.set_exception(exc)

    try:
        await anyio.to_thread.run_sync(job, limiter=write_limit() if write else None)
    except asyncio.CancelledError:
        if outcome.cancel():  # not begun, and now never will
            raise
        waited = asyncio.wrap_future(outcome)
        # Shielded from anyio's cancellation too, which it delivers again at every
        # await of a cancelled scope (a busy loop here otherwise).
        with anyio.CancelScope(shield=True):
            while not waited.done():
                try:
                    await asyncio.shield(waited)
                except asyncio.CancelledError:
                    continue  # cancelled again: the work still runs, its answer still due
    return outcome.result()


__all__ = ["WRITE_THREADS", "finish_in_thread", "write_limit"]
