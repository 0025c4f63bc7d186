"""``provledger serve``: the HTTP JSON API, the MCP endpoint and the review console.

Needs the ``serve`` extra (``pip install -e '.[serve]'`` in provledger's source
directory)::

    from ledger import Ledger
    from ledger.serve import create_app

    app = create_app(Ledger.open("sqlite:///provledger.db"))  # any ASGI server runs it

:func:`run` is what the command line calls: it opens the ledger and serves it
with uvicorn until interrupted.
"""

from __future__ import annotations

import copy
import logging
import re
from typing import Any

from ledger.access import TOKEN_PREFIX
from ledger.application import Ledger
from ledger.serve.app import ACCESS_LOGGER, create_app
from ledger.serve.health import HEALTH_LOGGER
from ledger.sockets import listen

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8321


def run(
    url: str | None,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    create: bool = True,
    secure_cookies: bool = False,
) -> None:
    """Open the ledger at ``url`` and serve it on ``host:port`` until interrupted.

    Raises:
        StorageError, InvalidURLError: the ledger cannot be opened.
        LedgerNotFoundError: ``create=False`` and there is no ledger at ``url``.
        InvalidInputError: nothing can listen on ``host:port`` (taken, or not an
            address of this machine).
    """
    import uvicorn  # imported here: only serving needs it

    listening = listen(host, port)
    try:
        with Ledger.open(url, create=create) as ledger:
            config = uvicorn.Config(
                create_app(ledger, host=host, secure_cookies=secure_cookies),
                log_level="info",
                log_config=log_config(),
                access_log=False,  # the application's own (ACCESS_LOGGER) names principals
                proxy_headers=False,
                server_header=False,
            )
            logging.getLogger(ACCESS_LOGGER).addFilter(mask_tokens)
            logging.getLogger("uvicorn.error").info("Serving ledger %s", ledger.url)
            # What uvicorn says when it binds the address itself.
            shown = f"[{host}]" if ":" in host else host
            logging.getLogger("uvicorn.error").info(
                "Uvicorn running on http://%s:%d (Press CTRL+C to quit)", shown, port
            )
            uvicorn.Server(config).run(sockets=[listening])
    finally:
        listening.close()


def log_config() -> dict[str, Any]:
    """uvicorn's logging configuration with each line stamped with its local time
    (ISO 8601, with the offset), so an operator can line requests up with the
    ledger's history."""
    import uvicorn.config

    config: dict[str, Any] = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    for formatter in config["formatters"].values():
        formatter["fmt"] = "%(asctime)s " + formatter["fmt"]
        formatter["datefmt"] = "%Y-%m-%dT%H:%M:%S%z"
    # The application's access log (one line per request, naming its principal),
    # on standard output as uvicorn's own would be.
    config["handlers"]["requests"] = {**config["handlers"]["access"], "formatter": "default"}
    config["loggers"][ACCESS_LOGGER] = {
        "handlers": ["requests"],
        "level": "INFO",
        "propagate": False,
    }
    # Why /healthz stopped answering 200, and when it answers again: on standard
    # error, as uvicorn's own messages are.
    config["loggers"][HEALTH_LOGGER] = {
        "handlers": ["default"],
        "level": "INFO",
        "propagate": False,
    }
    return config


#: A token, or the value of a query parameter whose name says it holds one.
_TOKEN_IN_TEXT = re.compile(
    "(?P<token>"
    + "".join(f"(?:{re.escape(ch)}|%{ord(ch):02x})" for ch in TOKEN_PREFIX)  # or %-encoded
    + r"[A-Za-z0-9_\-%]+)|(?<=token=)[^&#\s\"]+",
    re.IGNORECASE,
)


def _masked(found: re.Match[str]) -> str:
    return TOKEN_PREFIX + "…" if found["token"] else "…"


def mask_tokens(record: logging.LogRecord) -> bool:
    """A log filter that hides tokens in a record's text arguments: the access log
    shows each request's path with its query string, and a client that puts its
    token in the URL (the API reads it only from the ``Authorization`` header)
    would otherwise have it written to the log. Keeps every record."""
    if isinstance(record.args, tuple):
        record.args = tuple(
            _TOKEN_IN_TEXT.sub(_masked, arg) if isinstance(arg, str) else arg for arg in record.args
        )
    return True


__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "create_app", "mask_tokens", "run"]
