"""``provledger serve``: the HTTP JSON API, the MCP endpoint and the review console.

Needs the ``serve`` extra (``pip install -e '.[serve]'`` in provledger's source
directory)::

    from ledger import Ledger
    from ledger.serve import create_app

    app = create_app(Ledger.open("sqlite:///provledger.db"))  # any ASGI server runs it

:func:`run` is what the command line calls: it opens the ledger and serves it
with uvicorn until stopped by SIGINT (Ctrl-C) or SIGTERM (what ``kill``, service
managers and container runtimes send), and closes the ledger before it returns.
A client must send each request whole (headers and body) within 30 s
(``request_timeout``) or is answered 408 and disconnected; an idle kept-alive
connection is closed after 5 s; connections beyond what the process's open-file
limit allows (``ulimit -n``, less what the ledger itself needs) are answered 503
(:mod:`ledger.connections`).
"""

from __future__ import annotations

from ledger.errors import require_extra

require_extra("serve", "ledger.serve", "starlette", "uvicorn", "jinja2", "python_multipart")

import copy
import logging
import re
import signal
import unicodedata
from typing import Any
from urllib.parse import unquote

from ledger.access import TOKEN_PREFIX
from ledger.application import Ledger
from ledger.serve.app import ACCESS_LOGGER, create_app
from ledger.serve.health import HEALTH_LOGGER
from ledger.sockets import Stopped, listen, stop_signals_raise

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8321


def run(
    url: str | None,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    create: bool = True,
    secure_cookies: bool = False,
    request_timeout: float | None = None,
    max_connections: int | None = None,
) -> signal.Signals | None:
    """Open the ledger at ``url`` and serve it on ``host:port`` until stopped.

    ``request_timeout``: seconds a client may take to send a whole request (a
    connection still sending one then is answered 408 and closed; None:
    :data:`~ledger.connections.REQUEST_TIMEOUT`, 30);
    ``max_connections``: connections held at once, more answered 503 (None: as
    many as the open-file limit allows, :func:`~ledger.connections.limits`).

    Returns the signal that stopped it (SIGINT or SIGTERM), once the server has
    shut down and the ledger is closed; None if it stopped otherwise. (Stop
    signals are handled so only when called from the main thread.)

    Raises:
        StorageError, InvalidURLError: the ledger cannot be opened.
        LedgerNotFoundError: ``create=False`` and there is no ledger at ``url``.
        InvalidInputError: nothing can listen on ``host:port`` (taken, or not an
            address of this machine).
    """
    import uvicorn  # imported here: only serving needs it

    from ledger.connections import Server, config_options, stop_wait, stopping_lines

    limits = config_options(request_timeout, max_connections)
    listening = listen(host, port)
    try:
        with stop_signals_raise(), Ledger.open(url, create=create) as ledger:
            config = uvicorn.Config(
                create_app(ledger, host=host, secure_cookies=secure_cookies),
                log_level="info",
                log_config=log_config(),
                access_log=False,  # the application's own (ACCESS_LOGGER) names principals
                proxy_headers=False,
                server_header=False,
                timeout_graceful_shutdown=stop_wait(ledger.engine.recorder.lock_wait),
                **limits,
            )
            logging.getLogger(ACCESS_LOGGER).addFilter(mask_tokens)
            said = logging.getLogger("uvicorn.error")
            said.addFilter(stopping_lines)
            said.info("Serving ledger %s", ledger.url)
            http = limits["http"]
            said.info(
                "At most %d connections at once; a request must arrive whole within %g s",
                http.max_connections,
                http.request_timeout,
            )
            # What uvicorn says when it binds the address itself.
            shown = f"[{host}]" if ":" in host else host
            said.info("Uvicorn running on http://%s:%d (Press CTRL+C to quit)", shown, port)
            # A second stop signal does not cut the requests under way short.
            Server(config).run(sockets=[listening])
    except Stopped as stop:
        stopped = logging.getLogger("uvicorn.error")
        stopped.info("Stopped by %s; the ledger is closed", stop.signal.name)
        return stop.signal
    finally:
        listening.close()
    return None


def log_config() -> dict[str, Any]:
    """uvicorn's logging configuration with each line stamped with its local time
    (RFC 3339 to the second, with the offset: ``2026-12-05T17:31:55+00:00``), so
    an operator can line requests up with the ledger's history."""
    import uvicorn.config

    from ledger.serve.stamps import STAMPED

    config: dict[str, Any] = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    for formatter in config["formatters"].values():
        formatter["fmt"] = "%(asctime)s " + formatter["fmt"]
        formatter["()"] = STAMPED[formatter["()"]]
    # The application's access log (one line per request, naming its principal),
    # on standard output as uvicorn's own would be.
    config["handlers"]["requests"] = {**config["handlers"]["access"], "formatter": "default"}
    config["loggers"][ACCESS_LOGGER] = {
        "handlers": ["requests"],
        "level": "INFO",
        "propagate": False,
    }
    # Any other library's warnings (the MCP SDK's, a run the MCP endpoint could not
    # end), stamped too: a root logger without a handler lets the MCP SDK give it
    # one of its own, whose lines say no date.
    config["root"] = {"handlers": ["default"], "level": "WARNING"}
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
    # each character as it is, or %-encoded once or more (%70, %2570, …)
    + "".join(f"(?:{re.escape(ch)}|%(?:25)*{ord(ch):02x})" for ch in TOKEN_PREFIX)
    + r"[A-Za-z0-9_\-%]+)|(?<=token=)[^&#\s\"]+",
    re.IGNORECASE,
)


def _masked(found: re.Match[str]) -> str:
    return TOKEN_PREFIX + "…" if found["token"] else "…"


def _without_tokens(text: str) -> str:
    """``text`` with its tokens masked; percent-decoded (up to four times) where a
    token is found only so, its encoding being any mix of characters (``%25%37%30``
    is ``%70``, which is ``p``)."""
    decoded = text
    for _ in range(4):
        again = unquote(decoded)
        if again == decoded:
            break
        decoded = again
    if decoded != text and _TOKEN_IN_TEXT.search(decoded):
        return _printable(_TOKEN_IN_TEXT.sub(_masked, decoded))
    return _printable(_TOKEN_IN_TEXT.sub(_masked, text))


def _printable(text: str) -> str:
    """``text`` with every control, format and line-separator character escaped
    (``\\x0a``, ``\\u202e``): what a request's path decodes to never starts a
    line of the log of its own, erases one on a terminal or reorders one."""
    if text.isprintable():
        return text
    return "".join(
        (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
        if unicodedata.category(ch) in _UNPRINTED
        else ch
        for ch in text
    )


#: Unicode categories escaped in the log: controls (C0, DEL, C1), format characters
#: (bidirectional overrides among them), line and paragraph separators.
_UNPRINTED = frozenset(("Cc", "Cf", "Zl", "Zp"))


def mask_tokens(record: logging.LogRecord) -> bool:
    """A log filter that hides tokens in a record's text arguments: the access log
    shows each request's path with its query string, and a client that puts its
    token in the URL (the API reads it only from the ``Authorization`` header)
    would otherwise have it written to the log. Keeps every record."""
    if isinstance(record.args, tuple):
        record.args = tuple(
            _without_tokens(arg) if isinstance(arg, str) else arg for arg in record.args
        )
    return True


__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "create_app", "mask_tokens", "run"]
