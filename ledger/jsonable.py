"""JSON forms of the values the API returns, shared by every surface that speaks
JSON (the command line's ``--json``, the HTTP API, the MCP server)."""

from __future__ import annotations

import base64
import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from datetime import datetime
from typing import Any

from ledger.values import Explanation, RecordView, Revocation

#: How many records that are not usable an explanation served over the network
#: (HTTP API, MCP) shows unless asked for another number (every usable one is
#: shown): a claim can hold any number of candidates, from any proposer.
EXPLAINED = 100


def plain(value: Any) -> Any:
    """``value`` as JSON-ready data: dataclasses become objects, datetimes ISO 8601,
    bytes ``{"base64": …}`` (an infinite float stays one: see :func:`json_safe`)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"base64": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def json_safe(data: Any) -> Any:
    """``data`` (what :func:`plain` made) with each float JSON cannot carry (an
    infinity; a NaN never enters the ledger) as the string ``"inf"`` or ``"-inf"``:
    what every JSON output applies last (``--json``, the HTTP API, MCP). Outputs for
    people keep the number (``inf``), so it is not mistaken for the string."""
    if isinstance(data, float) and not math.isfinite(data):
        return "inf" if data > 0 else "-inf"
    if isinstance(data, dict):
        return {k: json_safe(v) for k, v in data.items()}
    if isinstance(data, list):
        return [json_safe(v) for v in data]
    return data


def record_json(record: RecordView, deliveries_listed: int | None = None) -> dict[str, Any]:
    """A record as JSON: every field, plus ``undeclared`` and each delivery's ``state``.

    With ``deliveries_listed``, only that many of its deliveries, the most recent
    (the oldest of them first), and ``deliveries_count`` counting them all: a report
    sent to every customer is delivered thousands of times, and each answer naming
    it would otherwise carry every delivery."""
    count = len(record.deliveries)
    if deliveries_listed is not None and count > deliveries_listed:
        record = dataclasses.replace(
            record, deliveries=record.deliveries[count - deliveries_listed :]
        )
    out: dict[str, Any] = plain(record)
    out["undeclared"] = list(record.undeclared)
    for delivery, data in zip(record.deliveries, out["deliveries"], strict=True):
        data["state"] = delivery.state
    if deliveries_listed is not None:
        out["deliveries_count"] = count
    return out


def capped_revocation(rev: Revocation, listed: int, rest: str) -> dict[str, Any]:
    """What a revocation changed, as a network answer: the first ``listed`` ids of
    ``affected`` and of ``stale`` (any number of records can rest on one), how many
    each holds, and when some are left out a ``note`` ending with ``rest`` (where
    to find them)."""
    note = None
    if len(rev.affected) > listed:
        note = f"{len(rev.affected)} records affected; the first {listed} are listed. {rest}"
    return {
        "root": rev.root,
        "affected": list(rev.affected[:listed]),
        "stale": list(rev.stale[:listed]),
        "position": rev.position,
        "affected_count": len(rev.affected),
        "stale_count": len(rev.stale),
        "note": note,
    }


def capped_explanation(
    result: Explanation, rest: str, deliveries_listed: int | None = None
) -> dict[str, Any]:
    """An explanation asked with a ``limit``, as a network answer: its entries
    (every usable record and the others shown, each with at most
    ``deliveries_listed`` deliveries: see :func:`record_json`), how many records
    it left out (``omitted``), and when some were a ``note`` ending with ``rest``
    (how to see them)."""
    note = None
    if result.omitted:
        note = (
            f"{result.omitted} more records of this claim, none of them usable, "
            f"are not listed. {rest}"
        )
    return {
        "outcome": str(result.outcome),
        "scope": result.scope,
        "claim_key": result.claim_key,
        "at": result.at.isoformat(),
        "entries": [
            {
                "record": record_json(e.record, deliveries_listed),
                "usable": e.usable,
                "reasons": list(e.reasons),
            }
            for e in result.entries
        ],
        "omitted": result.omitted,
        "note": note,
    }


def value_text(value: Any) -> str:
    """A stored value as one JSON text, keys sorted, bytes as ``{"base64": …}``,
    times in ISO 8601: how a PROV export states a record's value and conditions
    (``pl:value``, ``pl:conditions``), and so what ``verify-bundle`` compares them
    with (it needs no PROV package to)."""

    def default(v: Any) -> Any:
        if isinstance(v, bytes):
            return {"base64": base64.b64encode(v).decode()}
        if isinstance(v, datetime):
            return v.isoformat()
        raise TypeError(type(v).__name__)

    return json.dumps(value, default=default, sort_keys=True, ensure_ascii=False)
