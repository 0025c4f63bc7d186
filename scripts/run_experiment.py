#!/usr/bin/env python3
"""Rebuild the experiment on a fresh ledger, check every row, write the JSON.

Usage: python scripts/run_experiment.py --output results/experiment.json [--url URL]
Exits non-zero if any row deviates.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from rich.console import Console

from ledger import Ledger
from ledger.cli.render import print_experiment
from ledger.experiment import run_experiment


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=Path("results/experiment.json"))
    parser.add_argument(
        "--url", default=None, help="an empty ledger; default a fresh SQLite file in a temp dir"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="provledger-experiment-") as tmp:
        url = args.url or f"sqlite:///{Path(tmp) / 'experiment.db'}"
        with Ledger.open(url) as led:
            result = run_experiment(led)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result.to_json(), indent=2) + "\n")
    print_experiment(result, Console())
    print(f"wrote {args.output}")
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
