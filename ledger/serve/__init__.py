"""``provledger serve``: the HTTP JSON API, the MCP endpoint and the review console.

Needs the ``serve`` extra (``pip install 'provledger[serve]'``)::

    from ledger import Ledger
    from ledger.serve import create_app

    app = create_app(Ledger.open("sqlite:///provledger.db"))  # any ASGI server runs it

:func:`run` is what the command line calls: it opens the ledger and serves it
with uvicorn until interrupted.
"""

from __future__ import annotations

import logging
import socket

from ledger.application import Ledger
from ledger.errors import InvalidInputError
from ledger.serve.app import create_app

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8321


def run(
    url: str | None, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *, create: bool = True
) -> None:
    """Open the ledger at ``url`` and serve it on ``host:port`` until interrupted.

    Raises:
        StorageError, InvalidURLError: the ledger cannot be opened.
        LedgerNotFoundError: ``create=False`` and there is no ledger at ``url``.
        InvalidInputError: nothing can listen on ``host:port`` (taken, or not an
            address of this machine).
    """
    import uvicorn  # imported here: only serving needs it

    listening = _listen(host, port)
    try:
        with Ledger.open(url, create=create) as ledger:
            config = uvicorn.Config(
                create_app(ledger, host=host),
                log_level="info",
                proxy_headers=False,
                server_header=False,
            )
            # What uvicorn says when it binds the address itself.
            shown = f"[{host}]" if ":" in host else host
            logging.getLogger("uvicorn.error").info(
                "Uvicorn running on http://%s:%d (Press CTRL+C to quit)", shown, port
            )
            uvicorn.Server(config).run(sockets=[listening])
    finally:
        listening.close()


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (uvicorn's own failure to bind is log lines
    and an exit status of its own, not an error naming the address)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise InvalidInputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "create_app", "run"]
