"""The listening socket the HTTP surfaces share (``ledger.sockets.listen``)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from ledger.errors import InvalidInputError
from ledger.sockets import listen


def test_connections_accepted_on_the_socket_send_without_waiting_for_acks() -> None:
    # uvicorn serves on this socket through asyncio, which turns Nagle's algorithm
    # off on each accepted connection only when the socket says it is TCP: with it
    # on, every answer on a kept-alive connection waited ~40 ms (a delayed ack).
    sock = listen("127.0.0.1", 0)
    port = sock.getsockname()[1]
    nodelay: list[int] = []

    async def main() -> None:
        def accepted(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            conn = writer.get_extra_info("socket")
            nodelay.append(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(accepted, sock=sock)
        async with server:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            for _ in range(100):
                if nodelay:
                    break
                await asyncio.sleep(0.01)
            writer.close()

    asyncio.run(main())
    assert nodelay and nodelay[0] != 0


def test_a_taken_port_is_refused_naming_the_address() -> None:
    taken = listen("127.0.0.1", 0)
    taken.listen()
    port = taken.getsockname()[1]
    try:
        with pytest.raises(InvalidInputError, match=f"cannot listen on 127.0.0.1:{port}"):
            listen("127.0.0.1", port)
    finally:
        taken.close()
