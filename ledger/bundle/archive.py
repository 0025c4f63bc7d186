"""The bundle's container: a zip archive whose comment signs every byte before it.

The format constants, the fixed order and metadata of the archive's members (so
the same files always make the same bytes), and the checks of the container's
and the manifest's Ed25519 signatures.
"""

from __future__ import annotations

import base64
import io
import os
import zipfile
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ledger.heads import ed25519

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


#: The manifest's ``format``.
FORMAT = "provledger-bundle/1"
#: What the archive comment starts with; the base64 signature follows.
SIGNATURE_PREFIX = b"provledger-bundle-signature:ed25519:"
_SIGNATURE_LENGTH = len(SIGNATURE_PREFIX) + 88  # base64 of 64 bytes
_CONTAINER_CONTEXT = b"provledger bundle archive v1\n"
_MANIFEST_CONTEXT = b"provledger bundle manifest v1\n"
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def _signed_archive(files: dict[str, bytes], key: Any) -> bytes:
    """The zip archive of ``files`` whose comment signs every byte before it."""
    body = _unsigned_archive(files)
    signature = base64.b64encode(key.sign(_CONTAINER_CONTEXT + body))
    return body + SIGNATURE_PREFIX + signature


def _unsigned_archive(files: dict[str, bytes]) -> bytes:
    """The bytes of the zip archive of ``files`` before its signature (the end
    record already counts the signature's length)."""
    buffer = io.BytesIO()
    placeholder = SIGNATURE_PREFIX + b"=" * (_SIGNATURE_LENGTH - len(SIGNATURE_PREFIX))
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in _member_order(files):
            info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, files[name])
        archive.comment = placeholder
    data = buffer.getvalue()
    assert data.endswith(placeholder)
    return data[: -len(placeholder)]


def _member_order(names: Iterable[str]) -> list[str]:
    first = ["manifest.json", "manifest.sig", "summary.txt", "head.json", "public_key.pem"]
    rest = sorted(n for n in names if n not in first)
    return [n for n in first if n in names] + rest


def _check_signature(
    key: Ed25519PublicKey, message: bytes, signature: bytes | None, problems: list[str], what: str
) -> None:
    text = (signature or b"").strip()
    try:
        raw = base64.b64decode(text, validate=True)
        if base64.b64encode(raw) != text:  # one spelling only: no byte may change
            raise ValueError("not the canonical base64 of the signature")
        key.verify(raw, message)
    except (ed25519().InvalidSignature, ValueError):
        problems.append(what)


def _check_container(
    archive: zipfile.ZipFile,
    data: bytes,
    key: Ed25519PublicKey,
    problems: list[str],
    members: dict[str, bytes],
) -> None:
    """Check the archive's signature (its comment) over every byte before it;
    ``problems``: what the checks of its files found, which decides how a failed
    signature is told."""
    comment = archive.comment
    if (
        not comment.startswith(SIGNATURE_PREFIX)
        or len(comment) != _SIGNATURE_LENGTH
        or not data.endswith(comment)
    ):
        problems.append("the archive's signature (its zip comment) is missing or altered")
        return
    failed: list[str] = []
    body = data[: -len(comment)]
    _check_signature(
        key, _CONTAINER_CONTEXT + body, comment[len(SIGNATURE_PREFIX) :], failed, "failed"
    )
    if not failed:
        return
    if _unsigned_archive(members) != body:
        problems.append(
            "the archive's signature (its zip comment) does not verify: the archive "
            "(its zip structure, names or metadata) or the signature was altered after signing"
        )
    elif problems:
        # Files found altered, zipped again as the writer zips them: the archive's
        # bytes are not those signed, though in the writer's layout.
        problems.append(
            "the archive's signature (its zip comment) does not verify: the archive was "
            "zipped again, in the writer's layout, around the altered files named above, "
            "keeping a signature made over other bytes"
        )
    else:
        # The archive is exactly what the writer makes of files nothing else found
        # altered: it is the signature that was altered.
        problems.append(
            "the archive's signature (its zip comment) does not verify: the archive's "
            "bytes are exactly as written, so the signature itself was altered"
        )


#: How much of a member is unpacked at a time.
_CHUNK = 64 * 1024


def open_nonblocking(path: str, flags: int) -> int:
    # Nor may a terminal swapped in become the process's controlling terminal.
    return os.open(path, flags | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))


def read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """The member's bytes, unpacked a chunk at a time: never more than the size it
    declares (``zipfile`` stops there, and a member that holds more fails its
    CRC), where reading it whole would inflate all its compressed bytes at once."""
    chunks = []
    with archive.open(info) as member:
        while chunk := member.read(_CHUNK):
            chunks.append(chunk)
    return b"".join(chunks)
