"""Compliance bundles: one record's evidence, checkable offline by an auditor.

:func:`write_bundle` (``provledger bundle ID --key KEY -o FILE.zip``, audit
role) writes a zip archive holding

``summary.txt``
    who proposed the record, who approved it and when, on which evidence, and
    its status now, for people;
``prov.json``
    the record and its ancestors as W3C PROV-JSON (:mod:`ledger.prov`);
``events/<position>.bin``
    the exact bytes each Merkle leaf commits to (``leaf_data``: position,
    aggregate id, version, topic and the stored event state) for every event of
    the record and its ancestors;
``head.json``
    a signed tree head taken when the bundle was written (and, in the
    manifest's ``extends``, the earlier heads it was asked to extend, each with
    the consistency proof from it);
``public_key.pem``
    the key that signed the head, the manifest and the archive;
``manifest.json`` and ``manifest.sig``
    every file's SHA-256, each event's leaf hash and inclusion proof against the
    head, and the manifest's Ed25519 signature;

and the archive's comment carries an Ed25519 signature over every byte of the
archive before it, so no byte can change unnoticed.

What the bundle states of each record (status, validity, parents, ancestry)
comes from the views, checked against the record's stored events: the writer
refuses (``CorruptEventError`` naming the record) when the views say otherwise
than the log.

:func:`verify_bundle` (``provledger verify-bundle FILE.zip``) checks all of
that with no ledger and no token, naming the first thing that fails: the
signatures, digests and proofs, and every status and basis the bundle states
against the events it carries (decoded from their stored bytes). Given the
public key the auditor holds from elsewhere (``public_key=``), it also refuses a
bundle re-signed with another key.

Scope isolation: the bundle holds the records the caller may audit. Ancestors
outside those scopes appear as one ``<hidden>`` placeholder, whatever their
number, with no id and no bytes; an event of an included record whose bytes
name a record the caller may not audit (a parent, an observed dependency, a
revoked cause, a replacement) is listed with its leaf hash and inclusion proof
only, its bytes withheld.

Where each part lives:

- :mod:`ledger.bundle.archive`: the format constants and the signed zip
  container (member order, fixed metadata, the archive's and the manifest's
  signatures);
- :mod:`ledger.bundle.told`: what a record's events tell of it (its status after
  each event, its bases and expiry), the one definition writing and verifying
  share, and the check that the events listed are ones a ledger could have
  written (the status machine ``provledger verify`` replays);
- :mod:`ledger.bundle.events`: the events a bundle carries, read from the log
  with their leaves and inclusion proofs, withheld where they name a hidden record;
- :mod:`ledger.bundle.documents`: ``prov.json`` and ``summary.txt``;
- :mod:`ledger.bundle.write`: :func:`write_bundle` and the check of the views
  against the events;
- :mod:`ledger.bundle.verify`: :func:`verify_bundle` and its checks of the
  archive, signatures, digests, head and proofs;
- :mod:`ledger.bundle.extends`: earlier signed heads (read from a head's JSON,
  a heads file or an earlier bundle) and the consistency proofs that show a
  bundle's head extends them (``write_bundle(extends=…)``,
  ``verify_bundle(earlier=…)``);
- :mod:`ledger.bundle.verify_statements`: the check of every status, validity
  and basis the bundle states against the events it carries;
- :mod:`ledger.bundle.verify_activities`: the check of ``prov.json``'s
  activities, and of every time it states, against those events.
"""

from __future__ import annotations

from ledger.bundle.archive import FORMAT, SIGNATURE_PREFIX
from ledger.bundle.verify import BundleReport, verify_bundle
from ledger.bundle.write import BundleInfo, write_bundle
from ledger.values import HIDDEN

__all__ = [
    "FORMAT",
    "HIDDEN",
    "SIGNATURE_PREFIX",
    "BundleInfo",
    "BundleReport",
    "verify_bundle",
    "write_bundle",
]
