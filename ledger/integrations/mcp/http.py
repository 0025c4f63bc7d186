"""The MCP server over streamable HTTP: its checks against DNS rebinding, and its
stop.

The endpoint asks for no credentials, and every client acts with the server's
token. A web page the user visits could reach it through a name of its own that
it points at this machine (DNS rebinding), so the SDK refuses a request whose
``Host`` (421) or ``Origin`` (403) header names no host it allows; but it makes
that check only when bound to 127.0.0.1, localhost or ::1, and turns it off
without a word on any other address. Here it stays on whatever the address
(:func:`transport_security`): the loopback names, the address bound (unless it
is every address, 0.0.0.0 or ::) and the hosts the operator names
(``--allowed-host``) are allowed; a bind to an address that is not loopback is
warned about on standard error. A stop by SIGINT (Ctrl-C) or SIGTERM ends it as
``provledger serve`` ends: uvicorn finishes the requests under way, then
:func:`serve_http` returns the signal (:mod:`ledger.serve` does the same, but
needs the ``serve`` extra).
"""

from __future__ import annotations

import ipaddress
import logging
import math
import re
import signal
from collections.abc import Iterable
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from ledger.errors import InvalidInputError
from ledger.integrations.mcp.connection import ending_sessions, sessions_only
from ledger.sockets import Stopped, listen, stop_signals_raise
from ledger.validation import quoted

__all__ = ["allowed_host", "loopback", "serve_http", "transport_security"]

_log = logging.getLogger("uvicorn.error")

#: The names of this machine a local client uses (any port).
_LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
#: A host name or IPv4 address (letters, digits, "-" and "_" between dots).
_NAME = re.compile(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*\.?")
#: An allowed host: a name or address, an IPv6 address in brackets or bare, a port.
_HOST_PORT = re.compile(r"(?:\[(?P<v6>[^\]]*)\]|(?P<name>[^:\[\]]*))(?::(?P<port>\d{1,5}))?")


def loopback(host: str) -> bool:
    """Whether ``host`` (an address to bind) is this machine's loopback only."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _every_address(host: str) -> bool:
    """Whether ``host`` binds every address of this machine (0.0.0.0, ::)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return host == ""


def allowed_host(text: str) -> str:
    """``HOST[:PORT]`` as the ``Host`` header of a request to it reads, lower case:
    ``mcp.example.com``, ``10.0.0.5:8000``, ``[fe80::1]:8000`` (an IPv6 address
    may also come bare, ``fe80::1``).

    Raises:
        InvalidInputError: it is none of these (a wildcard ``*`` included: each
            host allowed is named).
    """
    given = text.strip().lower()
    if given.count(":") > 1 and not given.startswith("["):
        given = f"[{given}]"  # a bare IPv6 address, no port
    found = _HOST_PORT.fullmatch(given)
    port = None if found is None else found["port"]
    if found is not None and found["v6"] is not None:
        try:
            good = ipaddress.ip_address(found["v6"]).version == 6
        except ValueError:
            good = False
    else:
        good = found is not None and _NAME.fullmatch(found["name"]) is not None
    if not good or (port is not None and not 0 < int(port) < 65536):
        raise InvalidInputError(
            f"allowed host {quoted(text)} is not HOST or HOST:PORT (a name or address, "
            "e.g. mcp.example.com, 10.0.0.5:8000 or [fe80::1]:8000)"
        )
    return given


def _ported(name: str) -> bool:
    """Whether an allowed host names its port (``[::1]`` names none)."""
    return ":" in name.rsplit("]", 1)[-1]


def _host_names(host: str, port: int, allowed_hosts: Iterable[str]) -> list[str]:
    """What a request's ``Host`` may name (:func:`transport_security`), each once."""
    named = [*_LOOPBACK, *(allowed_host(text) for text in allowed_hosts)]
    bound = (f"[{host}]" if ":" in host else host).lower()
    if bound not in _LOOPBACK and not _every_address(host):
        named.append(f"{bound}:{port}")
    return list(dict.fromkeys(named))


def transport_security(
    host: str, port: int, allowed_hosts: Iterable[str] = ()
) -> TransportSecuritySettings:
    """The SDK's checks against DNS rebinding, on for any address bound: a
    request's ``Host`` must be a loopback name (any port), ``host:port`` when
    ``host`` is an address other than every one (0.0.0.0, ::), or one of
    ``allowed_hosts`` (:func:`allowed_host`; any port when it names none); its
    ``Origin``, if it has one, ``http://`` or ``https://`` and one of those.

    Raises:
        InvalidInputError: an allowed host is no ``HOST[:PORT]``.
    """
    hosts: list[str] = []
    for name in _host_names(host, port, allowed_hosts):
        hosts += [name] if _ported(name) else [name, f"{name}:*"]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"{scheme}://{name}" for name in hosts for scheme in ("http", "https")],
    )


def _served_hosts(host: str, port: int, allowed_hosts: Iterable[str]) -> str:
    """The hosts a request may name, for people: ``127.0.0.1, localhost, [::1]
    (on any port), 10.0.0.5:8000``."""
    names = _host_names(host, port, allowed_hosts)
    any_port = ", ".join(name for name in names if not _ported(name)) + " (on any port)"
    return ", ".join([any_port, *(name for name in names if _ported(name))])


def serve_http(
    server: MCPServer[Any],
    host: str,
    port: int,
    allowed_hosts: Iterable[str] = (),
    stop_wait: float | None = None,
) -> signal.Signals | None:
    """Serve ``server`` at ``http://HOST:PORT/mcp`` until stopped, saying where on
    standard error once it listens (and warning there when ``host`` is not
    loopback); ``allowed_hosts``: what else a request's ``Host`` may name
    (:func:`transport_security`); ``stop_wait``: seconds a stop waits for what
    is under way before cancelling it (None: for as long as it takes).

    Returns the signal that stopped it (SIGINT or SIGTERM) once the server has
    shut down, the requests under way answered; None if it stopped otherwise.
    (Stop signals are handled so only when called from the main thread.)

    Raises:
        InvalidInputError: an allowed host is no ``HOST[:PORT]``, or nothing can
            listen on ``host:port``.
    """
    import uvicorn  # a dependency of the SDK; imported only to serve over HTTP

    from ledger.connections import Server, config_options, stopping_lines

    security = transport_security(host, port, allowed_hosts)
    # Bound here, not by uvicorn: its failure to bind is log lines and an exit
    # status of its own (3), not an error naming the address.
    listening = listen(host, port)
    try:
        with stop_signals_raise():
            # A call's answer as one JSON body, not a stream: a stream is closed
            # at a stop, unanswered, while the call goes on (as serve's /mcp).
            app = sessions_only(
                ending_sessions(
                    server.streamable_http_app(
                        host=host, transport_security=security, json_response=True
                    ),
                    server,
                ),
                security,
            )
            # Info: the address it listens on, and when it stops; no line per request.
            # A request must arrive whole in time, and connections are held only as
            # the open-file limit allows, as in provledger serve (ledger.connections).
            # A stop waits at most ``stop_wait`` s for what is under way, then
            # cancels it: a client listening for updates never ends its stream.
            config = uvicorn.Config(
                app,
                log_level="info",
                access_log=False,
                server_header=False,
                timeout_graceful_shutdown=None if stop_wait is None else math.ceil(stop_wait),
                **config_options(),
            )
            # Listening before it says so: a client told the endpoint is there may
            # connect at once (its connection waits to be accepted, not refused).
            listening.listen(config.backlog)
            shown = f"[{host}]" if ":" in host else host
            if not loopback(host):
                _log.warning(
                    "MCP endpoint bound to %s, not loopback only: it asks for no credentials, "
                    "and every client that reaches it acts with this server's token. Only "
                    "requests whose Host header names %s are served (others get 421); name "
                    "the hosts clients reach it by with --allowed-host HOST[:PORT]",
                    shown,
                    _served_hosts(host, port, allowed_hosts),
                )
            _log.info("MCP endpoint at http://%s:%d/mcp (Press CTRL+C to quit)", shown, port)
            # A stop as provledger serve's: a second signal cuts nothing short, and a
            # request cancelled at the end of its wait is told in one line.
            _log.addFilter(stopping_lines)
            try:
                Server(config).run(sockets=[listening])
            finally:
                _log.removeFilter(stopping_lines)
    except Stopped as stop:
        return stop.signal
    finally:
        listening.close()
    return None
