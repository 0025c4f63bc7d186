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
"""

from __future__ import annotations

import json
import re
import sys
from io import TextIOWrapper
from types import TracebackType
from typing import Any

import anyio
import mcp_types as types
from anyio import EndOfStream
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

__all__ = ["Answering", "error_for", "strict_stdin"]

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


def strict_stdin() -> anyio.AsyncFile[str]:
    """Standard input as the stdio transport reads it, UTF-8, but each byte that is
    no UTF-8 kept as a lone surrogate (``surrogateescape``) rather than replaced by
    U+FFFD: the SDK's parser then refuses the line (:func:`error_for`) instead of
    serving text the client never sent."""
    return anyio.wrap_file(_Unowned(sys.stdin.buffer, encoding="utf-8", errors="surrogateescape"))


def _not_utf8(line: str) -> str | None:
    """What is not UTF-8 in ``line`` as :func:`strict_stdin` read it (the first such
    byte and where it is, counted in bytes from 1), or None if it all was."""
    found = _NOT_UTF8.search(line)
    if found is None:
        return None
    at = len(line[: found.start()].encode("utf-8", "surrogateescape")) + 1
    return f"byte 0x{ord(found.group()) - 0xDC00:02x} at byte {at}"


def _request_id(line: str) -> int | str | None:
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
                id=_request_id(given),
                error=types.ErrorData(
                    code=types.PARSE_ERROR,
                    message=f"Parse error: not UTF-8: the line is not UTF-8 text ({where})",
                ),
            )
        if problem["type"] == "json_invalid" and isinstance(given, str):
            return types.JSONRPCError(
                jsonrpc="2.0",
                id=_request_id(given),
                error=types.ErrorData(
                    code=types.PARSE_ERROR, message=_parse_error(problem["msg"], given)
                ),
            )
    # JSON, but no request, notification or response: its id if it has a good one.
    request_id = next(
        (
            found.get("id")
            for found in (problem.get("input") for problem in problems)
            if isinstance(found, dict) and "jsonrpc" in found
        ),
        None,
    )
    if not isinstance(request_id, str | int) or isinstance(request_id, bool):
        request_id = None
    return types.JSONRPCError(
        jsonrpc="2.0",
        id=request_id,
        error=types.ErrorData(
            code=types.INVALID_REQUEST,
            message="Invalid Request: not a JSON-RPC 2.0 request, notification or response",
        ),
    )


class Answering:
    """The transport's read stream, less the lines the SDK could not read: each
    is answered on ``write`` (:func:`error_for`) instead of reaching the server,
    which would drop it unanswered."""

    def __init__(
        self,
        read: ReadStream[SessionMessage | Exception],
        write: WriteStream[SessionMessage],
    ) -> None:
        self._read, self._write = read, write

    @property
    def last_context(self) -> Any:
        """The sender's context of the last message (the dispatcher reads it)."""
        return getattr(self._read, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        """The next message the SDK could read, or another exception it passed on."""
        while True:
            item = await self._read.receive()
            if not isinstance(item, ValidationError):
                return item
            await self._write.send(SessionMessage(error_for(item)))

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

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None
