"""``python -m ledger`` runs the ``provledger`` command line."""

from ledger.cli import main

main()
