"""Materialised views rebuilt from the ledger's event log.

- :mod:`projections.validity` — the current-validity view (versioned, for as-of);
- :mod:`projections.delivery` — the delivery-history view;
- :mod:`projections.access` — grants, tokens and runs;
- :mod:`projections.timeline` — the position ↔ time index;
- :mod:`projections.projector` — applies events to all of them with tracking.
"""

from projections.projector import Projector

__all__ = ["Projector"]
