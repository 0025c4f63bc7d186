"""Adapters that let agent frameworks keep their memory in the ledger; each package
imports its framework only when it is imported itself.

- ``ledger.integrations.mcp``: a Model Context Protocol server (the ``mcp`` extra);
- ``ledger.integrations.langgraph``: a LangGraph ``BaseStore`` (the ``langgraph`` extra).
"""
