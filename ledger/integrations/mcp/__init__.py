"""provledger as an agent's memory over the Model Context Protocol (the ``mcp`` extra).

:func:`build_server` gives an MCP server (the official ``mcp`` SDK's ``MCPServer``)
acting with one principal's token; ``provledger mcp`` runs it over stdio or
streamable HTTP (:func:`serve`). Over streamable HTTP it asks for no credentials:
a request whose ``Host`` names no loopback address, not the address bound and no
host it was told of (``allowed_hosts``) is refused, against DNS rebinding.

- Tools: ``capture_evidence``, ``propose_memory``, ``read_memory``,
  ``explain_memory``, ``get_record``, ``list_records``, ``read_evidence``,
  ``audit_record``; and only when the token holds ``approve`` in some scope,
  ``accept_memory``, ``reject_memory``, ``revoke_memory``, ``revalidate_memory``.
  Arguments carry the library's names; results are structured JSON (datetimes
  ISO 8601, bytes ``{"base64": …}``), their text content that JSON, compact. A
  refusal is a tool error whose text names the ``LedgerError`` class and carries
  its message, then what to do next where a model could not guess it
  (:mod:`~ledger.integrations.mcp.hints`).
- Resources: ``provledger://record/{record_id}``, the JSON ``get_record`` returns.
  After ``revoke_memory`` every affected record the token can see is announced as
  updated (and after accept, reject and revalidate the record itself), to clients
  listening with ``subscriptions/listen`` (over stdio and in process: HTTP serves
  no protocol without sessions).
- One connection is one ledger run (:meth:`ledger.Session.run`), started at its
  first read or proposal: what it is shown by ``read_memory``, ``explain_memory``,
  ``get_record``, ``list_records`` and the record resource is recorded, and what it
  proposes carries as ``observed`` dependencies the records it was shown usable
  (VALID). A record it was last shown not usable (a candidate; stale, revoked,
  superseded or expired, even if it was usable when first read) is no dependency:
  a proposal is refused while something the connection read has been withdrawn
  unseen, and goes through once the connection has been shown it. ``audit_record``
  is not recorded. Over stdio the connection is the process; in process
  (``mcp.Client(server)``) each client; over streamable HTTP each client session
  (``Mcp-Session-Id``, ended by the client's ``DELETE`` or the server's stop); a
  request of the 2026 protocol, which has no sessions, is refused over HTTP
  (:func:`~ledger.integrations.mcp.connection.sessions_only`).

Modules: :mod:`~ledger.integrations.mcp.schemas` (argument types),
:mod:`~ledger.integrations.mcp.results` (result types),
:mod:`~ledger.integrations.mcp.connection` (one connection, one run),
:mod:`~ledger.integrations.mcp.hints` (what a refusal says to do next),
:mod:`~ledger.integrations.mcp.tools` (the tool functions),
:mod:`~ledger.integrations.mcp.stdio` (answering over stdio what the SDK cannot
read), :mod:`~ledger.integrations.mcp.http` (streamable HTTP: its Host checks and its
stop) and :mod:`~ledger.integrations.mcp.server` (descriptions, :func:`build_server`).
"""

from __future__ import annotations

from ledger.errors import require_extra

require_extra("mcp", "ledger.integrations.mcp", "mcp")

from ledger.integrations.mcp.results import RECORD_URI, record_out, record_uri
from ledger.integrations.mcp.server import APPROVAL_TOOLS, TOOLS, build_server, serve

__all__ = [
    "APPROVAL_TOOLS",
    "RECORD_URI",
    "TOOLS",
    "build_server",
    "record_out",
    "record_uri",
    "serve",
]
