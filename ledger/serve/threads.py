"""A request's work in a worker thread, waited for to its end.

A worker thread cannot be stopped: a write it has begun commits whatever becomes
of the request that started it. ``run_in_threadpool`` stops waiting when the
request's task is cancelled (the event loop ending with the request still under
way, say), and the server then answers a plain-text 500 to a write that commits
after all, which a client told 500 sends again. :func:`finish_in_thread` waits on,
so the request is answered with what its work did.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

import anyio
from starlette.concurrency import run_in_threadpool

T = TypeVar("T")


async def finish_in_thread(work: Callable[[], T]) -> T:
    """``work()`` run in a worker thread (Starlette's pool); its result, or what it raised.

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
        await run_in_threadpool(job)
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


__all__ = ["finish_in_thread"]
