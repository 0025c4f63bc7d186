"""Agent-framework integrations; each module imports its framework only when imported.

``ledger.integrations.mcp``: a Model Context Protocol server (``provledger[mcp]``).
"""
