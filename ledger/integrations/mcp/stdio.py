"""What the MCP server answers over stdio to a line the SDK cannot read.

The SDK's stdio transport hands the server an exception for a line that is no
JSON-RPC message (JSON its parser refuses: a lone surrogate escape, an integer
of thousands of digits, arrays nested hundreds deep), and the server drops it:
the client waits for an answer that never comes. :class:`Answering` wraps the
transport's read stream so each such line is answered, per JSON-RPC 2.0, with a
parse error (or an invalid request, for JSON that is no message) carrying the
request's id when it can be read from the line (else null), and the server goes
on reading.

The SDK also reads standard input with each byte that is no UTF-8 replaced by
U+FFFD, so a line that is not UTF-8 would be served, and stored, as other text
("caf\\xe9" as "caf\\ufffd"). :func:`strict_stdin` reads it keeping such bytes
apart (as lone surrogates, which no UTF-8 text decodes to): the SDK's parser
refuses the line, and it is answered with a parse error saying it is not UTF-8,
as the streamable HTTP transport answers such a body.

A stop by SIGINT (Ctrl-C) or SIGTERM ends it as the streamable HTTP transport
ends (:class:`Stopping`): standard input is read no further, the calls under
way are answered, then the server ends as if standard input had closed (every
run still open is ended), and :func:`serve_stdio` returns the signal for its
caller to close the ledger and end by it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from io import TextIOWrapper
from types import FrameType, TracebackType
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
from anyio import EndOfStream
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from ledger.sockets import STOPS

__all__ = [
    "Answering",
    "Stopping",
    "error_for",
    "given_twice",
    "request_id",
    "serve_stdio",
    "strict_stdin",
    "twice_message",
]

#: A JSON string, from its opening quote to its closing one.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
#: Where the scan for the top-level "id" stops next: a string or a bracket.
_STRUCTURE = re.compile(r'["{}\[\]]')
#: A \u escape of a UTF-16 surrogate.
_SURROGATE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_DECODER = json.JSONDecoder()
#: A byte that was no UTF-8, as ``surrogateescape`` keeps it (U+DC80-U+DCFF).
_NOT_UTF8 = re.compile("[\udc80-\udcff]")


class _Unowned(TextIOWrapper):
    """A text layer over standard input's buffer that never closes that buffer (it
    is not the transport's to close: the SDK's own wrapper does the same)."""

    def close(self) -> None:
        if not self.closed:
            self.detach()


class Stopping:
    """The stop of a server over stdio by SIGINT or SIGTERM (:meth:`handled`): the
    first one stops it (``signal`` says which), later ones are ignored, so that
    none cuts short the answers and the closing of the ledger the first began.

    Python runs a signal's handler on the main thread, the event loop's: the
    handler only notes the signal and wakes the loop (:meth:`wait`)."""

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: anyio.Event | None = None

    @contextlib.contextmanager
    def handled(self) -> Iterator[Stopping]:
        """Within this block SIGINT and SIGTERM stop the server (when called from
        the main thread: only it may set handlers); the handlers found are put back
        after it, unless a stop came: then both stay ignored, so that a second
        signal cannot cut short the closing that follows (as ``sockets`` does)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        before = {stop: signal.signal(stop, self._take) for stop in STOPS}
        try:
            yield self
        finally:
            for stop, handler in before.items():
                signal.signal(stop, signal.SIG_IGN if self.signal is not None else handler)

    def _take(self, signum: int, _frame: FrameType | None) -> None:
        if self.signal is not None:
            return  # already stopping
        self.signal = signal.Signals(signum)
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has just closed
                loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        if self._event is not None:
            self._event.set()

    async def wait(self) -> None:
        """Return once a stop signal has come (at once if one has)."""
        if self._event is None:
            self._event = anyio.Event()
            self._loop = asyncio.get_running_loop()
        if self.signal is None:
            await self._event.wait()


class _Lines(anyio.AsyncFile[str]):
    """Standard input, read a line at a time until it ends or a stop comes: a stop
    ends it as its end would (a line read on a thread nothing can interrupt is
    left to that thread)."""

    def __init__(self, fp: TextIOWrapper, stopping: Stopping | None) -> None:
        super().__init__(fp)
        self._stopping = stopping

    async def readline(self) -> str:
        line = await self._readline()
        name = given_twice(line)
        return line if name is None else f"{_TWICE}{json.dumps(name)}\n{line}"

    async def _readline(self) -> str:
        stopping = self._stopping
        if stopping is None:
            return await super().readline()
        if stopping.signal is not None:
            return ""
        line = ""
        async with anyio.create_task_group() as group:

            async def read() -> None:
                nonlocal line
                read_line = self.wrapped.readline
                line = await anyio.to_thread.run_sync(read_line, abandon_on_cancel=True)
                group.cancel_scope.cancel()

            group.start_soon(read)
            await stopping.wait()
            group.cancel_scope.cancel()
        return line


def strict_stdin(stopping: Stopping | None = None) -> anyio.AsyncFile[str]:
    """Standard input as the stdio transport reads it, UTF-8, but each byte that is
    no UTF-8 kept as a lone surrogate (``surrogateescape``) rather than replaced by
    U+FFFD: the SDK's parser then refuses the line (:func:`error_for`) instead of
    serving text the client never sent. With ``stopping``, it ends at a stop."""
    text = _Unowned(sys.stdin.buffer, encoding="utf-8", errors="surrogateescape")
    return _Lines(text, stopping)


#: What begins a line :class:`_Lines` gives in place of one whose objects give a
#: name twice (then the name as JSON, a line end, and the line): no JSON, so the
#: SDK's parser refuses it, and :func:`error_for` says why. No line a client sends
#: begins so: a line read holds a line end only at its end.
_TWICE = "\ngiven twice:"


def given_twice(line: str) -> str | None:
    """The first name an object of ``line`` gives twice (its last value would win
    silently: a ``parents`` given twice, the second empty, would lose the first),
    or None; None too for a line that is no JSON, which the SDK's parser refuses."""
    if line.count('"') < 4:  # (no object of two names: not worth parsing twice)
        return None
    twice: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in items:
            if name in out and not twice:
                twice.append(name)
            out[name] = value
        return out

    try:
        json.loads(line, object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        return None
    return twice[0] if twice else None


def twice_message(name: str) -> str:
    """The parse error's message for a line giving ``name`` twice in one object."""
    return (
        f"Parse error: the name {name[:40]!r} is given twice in one object: give each "
        "once (which value would count is not said)"
    )


def _not_utf8(line: str) -> str | None:
    """What is not UTF-8 in ``line`` as :func:`strict_stdin` read it (the first such
    byte and where it is, counted in bytes from 1), or None if it all was."""
    found = _NOT_UTF8.search(line)
    if found is None:
        return None
    at = len(line[: found.start()].encode("utf-8", "surrogateescape")) + 1
    return f"byte 0x{ord(found.group()) - 0xDC00:02x} at byte {at}"


def request_id(line: str) -> int | str | None:
    """The value of the key ``"id"`` of the outermost object of ``line`` (what
    came after it may be unreadable), if it is a JSON-RPC id: an integer or text."""
    depth, at = 0, 0
    while (found := _STRUCTURE.search(line, at)) is not None:
        at = found.start()
        if line[at] != '"':
            depth += 1 if line[at] in "{[" else -1
            at += 1
            continue
        text = _STRING.match(line, at)
        if text is None:  # a string never closed
            return None
        at = text.end()
        if depth != 1 or text.group() != '"id"':
            continue
        rest = line[at:].lstrip()
        if not rest.startswith(":"):
            continue  # a value "id", not the key
        try:
            given, _ = _DECODER.raw_decode(rest[1:].lstrip())
        except ValueError:  # the id itself is unreadable (thousands of digits)
            return None
        if isinstance(given, str):  # echoed back: a lone surrogate could not be written
            return None if any("\ud800" <= c <= "\udfff" for c in given) else given
        return given if isinstance(given, int) and not isinstance(given, bool) else None
    return None


def _parse_error(detail: str, line: str) -> str:
    """The message of a parse error, naming what was wrong when it is known."""
    detail = detail.removeprefix("Invalid JSON: ")
    if "surrogate" in detail or ("hex escape" in detail and _SURROGATE.search(line)):
        what = "lone surrogate: a \\ud800-\\udfff escape not in a pair is no text"
    elif "number out of range" in detail:
        what = "integer too large: a number with too many digits to read"
    elif "recursion limit" in detail:
        what = "nested too deep: arrays and objects nested too many levels to read"
    else:
        return f"Parse error: {detail}"
    return f"Parse error: {what} ({detail})"


def error_for(exc: ValidationError) -> types.JSONRPCError:
    """The JSON-RPC error answering a line the SDK could not read as a message:
    a parse error (-32700) for JSON its parser refuses, an invalid request
    (-32600) for JSON that is no JSON-RPC message; its id the line's, or null."""
    problems = exc.errors(include_url=False)
    for problem in problems:
        given = problem.get("input")
        where = _not_utf8(given) if isinstance(given, str) else None
        if where is not None:
            return types.JSONRPCError(
                jsonrpc="2.0",
                id=request_id(given),
                error=types.ErrorData(
                    code=types.PARSE_ERROR,
                    message=f"Parse error: not UTF-8: the line is not UTF-8 text ({where})",
                ),
            )
        if isinstance(given, str) and given.startswith(_TWICE):
            name, _, line = given.removeprefix(_TWICE).partition("\n")
            return types.JSONRPCError(
                jsonrpc="2.0",
                id=request_id(line),
                error=types.ErrorData(
                    code=types.PARSE_ERROR,
                    message=twice_message(json.loads(name)),
                ),
            )
        if problem["type"] == "json_invalid" and isinstance(given, str):
            return types.JSONRPCError(
                jsonrpc="2.0",
                id=request_id(given),
                error=types.ErrorData(
                    code=types.PARSE_ERROR, message=_parse_error(problem["msg"], given)
                ),
            )
    # JSON, but no request, notification or response: its id if it has a good one.
    given_id = next(
        (
            found.get("id")
            for found in (problem.get("input") for problem in problems)
            if isinstance(found, dict) and "jsonrpc" in found
        ),
        None,
    )
    if not isinstance(given_id, str | int) or isinstance(given_id, bool):
        given_id = None
    return types.JSONRPCError(
        jsonrpc="2.0",
        id=given_id,
        error=types.ErrorData(
            code=types.INVALID_REQUEST,
            message="Invalid Request: not a JSON-RPC 2.0 request, notification or response",
        ),
    )


#: Requests the server answers only once their stream of notifications ends (a
#: client listening for resource updates): a stop does not wait for them.
_STREAMS = frozenset({"subscriptions/listen"})


class _ClosedOnExit:
    """A stream closed (``aclose``) when its ``async with`` block ends."""

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None


class Answering(_ClosedOnExit):
    """The transport's read stream, less the lines the SDK could not read: each
    is answered on ``write`` (:func:`error_for`) instead of reaching the server,
    which would drop it unanswered.

    Once standard input has ended (its end, or a stop), it ends only when every
    request passed on has been answered on :attr:`answers` (the server cancels
    the calls still under way when its input ends) or cancelled by the client."""

    def __init__(
        self,
        read: ReadStream[SessionMessage | Exception],
        write: WriteStream[SessionMessage],
        stopping: Stopping | None = None,
    ) -> None:
        self._read, self._write = read, write
        self._stopping = stopping
        #: The requests passed on and not answered yet, by id.
        self._open: Counter[int | str] = Counter()
        self._answered: anyio.Event | None = None
        #: The write stream the server answers on.
        self.answers = _Answers(write, self._settled)

    @property
    def last_context(self) -> Any:
        """The sender's context of the last message (the dispatcher reads it)."""
        return getattr(self._read, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        """The next message the SDK could read, or another exception it passed on."""
        while True:
            try:
                item = await self._read.receive()
            except EndOfStream:  # a stop, or the client closing its end
                await self._all_answered()  # (`provledger mcp < calls.jsonl` is answered)
                raise
            if isinstance(item, ValidationError):
                await self._write.send(SessionMessage(error_for(item)))
                continue
            if isinstance(item, SessionMessage):
                self._note(item.message)
            return item

    def _note(self, message: types.JSONRPCMessage) -> None:
        """Count a request passed on (not a stream of notifications, answered only
        when it ends, which a stop does); a request the client cancels is never
        answered."""
        if isinstance(message, types.JSONRPCRequest) and message.method not in _STREAMS:
            self._open[message.id] += 1
        elif (
            isinstance(message, types.JSONRPCNotification)
            and message.method == "notifications/cancelled"
            and isinstance(message.params, dict)
        ):
            self._settled(message.params.get("requestId"))

    def _settled(self, request_id: object) -> None:
        """A request's answer went out (or the client cancelled it)."""
        if isinstance(request_id, str | int) and self._open[request_id] > 0:
            self._open[request_id] -= 1
            if self._answered is not None:
                self._answered.set()

    async def _all_answered(self) -> None:
        while +self._open:  # the counts above zero
            self._answered = anyio.Event()
            await self._answered.wait()

    async def aclose(self) -> None:
        await self._read.aclose()

    def __aiter__(self) -> Answering:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Answering:
        return self


class _Answers(_ClosedOnExit):
    """The transport's write stream, telling :class:`Answering` of each answer sent."""

    def __init__(self, write: WriteStream[SessionMessage], settled: Callable[[object], None]):
        self._write, self._settled = write, settled

    async def send(self, item: SessionMessage, /) -> None:
        try:
            await self._write.send(item)
        finally:  # sent, or never to be (stdout gone): not waited for at the end
            if isinstance(item.message, types.JSONRPCResponse | types.JSONRPCError):
                self._settled(item.message.id)

    async def aclose(self) -> None:
        await self._write.aclose()

    async def __aenter__(self) -> _Answers:
        return self


def serve_stdio(
    run: Callable[[Stopping], Coroutine[Any, Any, None]], stopping: Stopping | None = None
) -> signal.Signals | None:
    """Run ``run`` (a server serving stdio until its input ends) with SIGINT and
    SIGTERM stopping it (``stopping``, a new :class:`Stopping` if None: its
    ``signal`` says which stopped it even when ``run`` raised).

    Returns the signal that stopped it, once it has ended (the calls under way
    answered, the runs still open ended); None if its input ended."""
    stopping = Stopping() if stopping is None else stopping
    with stopping.handled():
        anyio.run(run, stopping, backend="asyncio")
    return stopping.signal
