"""``provledger serve``: the HTTP JSON API, the MCP endpoint and the review console.

Needs the ``serve`` extra (``pip install 'provledger[serve]'``)::

    from ledger import Ledger
    from ledger.serve import create_app

    app = create_app(Ledger.open("sqlite:///provledger.db"))  # any ASGI server runs it

:func:`run` is what the command line calls: it opens the ledger and serves it
with uvicorn until interrupted.
"""

from __future__ import annotations

from ledger.application import Ledger
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
    """
    import uvicorn  # imported here: only serving needs it

    with Ledger.open(url, create=create) as ledger:
        uvicorn.run(
            create_app(ledger, host=host),
            host=host,
            port=port,
            log_level="info",
            proxy_headers=False,
            server_header=False,
        )


__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "create_app", "run"]
