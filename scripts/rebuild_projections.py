#!/usr/bin/env python3
"""Drop every view and replay the whole event log, then compare digests.

Example: python scripts/rebuild_projections.py --url sqlite:///provledger.db
Shows a progress bar and the replay rate; exits 1 if the rebuilt views differ
from what was there before. Streams the log: memory does not grow with it.
"""

from __future__ import annotations

import argparse
import sys

from ledger import Ledger, LedgerError
from ledger.cli.admin import rebuild_with_progress


def main() -> int:
    summary, _, details = (__doc__ or "").partition("\n\n")  # the first line, the rest
    parser = argparse.ArgumentParser(
        description=summary,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=details.strip(),
    )
    parser.add_argument("--url", default=None, help="ledger URL; default $PROVLEDGER_URL")
    args = parser.parse_args()
    try:
        with Ledger.open(args.url, create=False) as led:  # a mistyped URL creates nothing
            report = rebuild_with_progress(led)
    except LedgerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0 if report.matched else 1


if __name__ == "__main__":
    sys.exit(main())
