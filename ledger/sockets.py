"""The listening socket of the HTTP surfaces (``provledger serve``, and
``provledger mcp`` over streamable HTTP), bound before their server starts."""

from __future__ import annotations

import socket

from ledger.errors import InvalidInputError


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (uvicorn's own failure to bind is log lines
    and an exit status of its own, not an error naming the address).

    Raises:
        InvalidInputError: the port is taken, or ``host`` is no address of this machine.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise InvalidInputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock
