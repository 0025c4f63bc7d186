"""Adapters that let agent frameworks keep their memory in the ledger."""
