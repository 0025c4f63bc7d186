"""Long-running servers for agents and reviewers: the MCP server and the HTTP API
with the review console. Their frameworks are imported only when they start."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import sqlite3
import sys

import click

from ledger.cli.failures import errors_exit_1
from ledger.cli.options import open_ledger, principal_session, token_option, url_option
from ledger.errors import install_hint
from ledger.persistence import resolve_url

# -- mcp: the ledger as an agent's memory over the Model Context Protocol -------------------


@click.command("mcp")
@click.option(
    "--transport",
    type=click.Choice(["stdio", "streamable-http"]),
    default="stdio",
    show_default=True,
    help="stdio: the MCP client starts this command and talks over stdin/stdout; "
    "streamable-http: serve http://HOST:PORT/mcp.",
)
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="streamable-http: address to bind."
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=8000,
    show_default=True,
    help="streamable-http: port to listen on.",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="HOST[:PORT]",
    help="streamable-http: a host clients reach the endpoint by (any port unless one "
    "is given); repeatable. A request whose Host header names none of these, "
    "127.0.0.1, localhost, [::1] or --host is refused (against DNS rebinding).",
)
@token_option
@url_option
@errors_exit_1
def mcp_command(
    transport: str,
    host: str,
    port: int,
    allowed_hosts: tuple[str, ...],
    token: str,
    url: str | None,
) -> None:
    """Serve the ledger to an agent over MCP, as the token's principal.

    Tools to capture evidence, propose, read, explain, get, list and audit records
    and read captured evidence, plus accept/reject/revoke/revalidate when the token
    holds `approve`. One
    connection is one run: what it reads is observed on what it proposes. Give the
    token in $PROVLEDGER_TOKEN rather than --token (other users can read a command
    line). Over streamable-http every client acts with this token, asked for no
    credentials: keep it on 127.0.0.1. Bound elsewhere it warns, and serves only
    requests whose Host header names a loopback address, --host, or a host given
    with --allowed-host. Stop it with Ctrl-C or SIGTERM: it finishes the requests
    under way and closes the ledger. Needs the mcp extra: pip install -e
    '.[mcp]' in provledger's source directory.

    \b
    Example:
      PROVLEDGER_TOKEN="$AGENT" provledger mcp --url sqlite:///provledger.db
    """
    try:
        from ledger.integrations.mcp import serve
    except ModuleNotFoundError as exc:
        click.echo(
            f"error: provledger mcp needs the MCP SDK ({(exc.name or 'mcp').split('.')[0]} "
            f"is not installed); {install_hint('mcp')}",
            err=True,
        )
        sys.exit(1)
    with principal_session(url, token) as (led, _session):
        stopped = serve(
            led,
            token,
            transport="streamable-http" if transport != "stdio" else "stdio",
            host=host,
            port=port,
            allowed_hosts=allowed_hosts,
        )
        if stopped is not None:  # another stop signal must not cut closing the ledger short
            for stop in (signal.SIGINT, signal.SIGTERM):
                signal.signal(stop, signal.SIG_IGN)
    if stopped is not None:
        if transport == "stdio":  # standard output is the client's; nothing set up logging
            click.echo(f"Stopped by {stopped.name}; the ledger is closed", err=True)
        else:  # uvicorn's logger, as provledger serve says it (ledger.serve.run)
            said = logging.getLogger("uvicorn.error")
            said.info("Stopped by %s; the ledger is closed", stopped.name)
        _end_by(stopped, url)


# -- serve --------------------------------------------------------------------------------


@click.command()
@url_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=8321, show_default=True, help="TCP port."
)
@click.option(
    "--secure-cookies",
    is_flag=True,
    help="Mark the console's session cookie Secure (set it when users reach the "
    "server over HTTPS through a reverse proxy).",
)
@click.option(
    "--request-timeout",
    type=click.FloatRange(0, min_open=True),
    default=30,
    show_default=True,
    help="Seconds a client may take to send a whole request (headers and body); a "
    "connection still sending one then is answered 408 and closed.",
)
@errors_exit_1
def serve(
    url: str | None, host: str, port: int, secure_cookies: bool, request_timeout: float
) -> None:
    """Serve the HTTP JSON API (/api/v1), the MCP endpoint (/mcp) and the review console (/).

    Agents authenticate with `Authorization: Bearer TOKEN`; people sign in to
    the console with their token. Needs the serve extra: pip install -e
    '.[serve]' in provledger's source directory. Stop it with Ctrl-C or
    SIGTERM: it finishes the requests under way and closes the ledger.

    Idle kept-alive connections close after 5 s; at most as many connections
    as the open-file limit (ulimit -n) allows are held, more are answered 503.

    \b
    Example:
      provledger serve --url sqlite:///provledger.db --port 8321
    """
    from ledger.serve import run  # without the serve extra: named (errors_exit_1)

    # Refuses a ledger that does not exist, creating nothing, or that it cannot write.
    open_ledger(url, writable=True).close()
    stopped = run(
        url,
        host=host,
        port=port,
        create=False,
        secure_cookies=secure_cookies,
        request_timeout=request_timeout,
    )
    if stopped is not None:
        _end_by(stopped, url)


def _end_by(stopped: signal.Signals, url: str | None) -> None:
    """Stopped as asked, the ledger closed: end by that signal, as a server does
    (the shell sees 128+N; a service manager, a clean stop), not with
    "interrupted", which tells of a command cut short.

    First what a process ended by a signal never does: objects left unreachable
    are collected (a thread's reading connection kept in a reference cycle is
    closed only then), and an SQLite ledger's ``-wal`` still there is
    checkpointed away by one last connection opened and closed. (Two connections
    closing at once each left it to the other until the recorder closed them one
    at a time; this stays for a connection closed by anything else.)"""
    gc.collect()
    backend = resolve_url(url)
    path = backend.path
    sqlite = backend.kind == "sqlite" and not backend.read_only and path is not None
    if sqlite and path is not None and os.path.exists(f"{path}-wal"):
        with contextlib.suppress(sqlite3.Error):
            sqlite3.connect(path, timeout=1).close()
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(stopped, signal.SIG_DFL)
    signal.raise_signal(stopped)
