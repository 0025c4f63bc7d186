"""Signed tree heads: Ed25519-signed statements of the log's state, kept elsewhere.

In the manner of Certificate Transparency's signed tree head (RFC 6962 section
3.5, RFC 9162 section 4.10), a :class:`SignedHead` says "the first
``tree_size`` events of this log, up to log ``position``, have the Merkle root
``root``; signed at ``time`` by the key ``key_id``". The signature covers

    b"provledger tree head v1\\n" || uint64 tree_size || uint64 position
        || int64 time (microseconds since the Unix epoch, UTC) || root (32 bytes)

all big-endian, so a head can be checked by anyone with the public key and no
other code. ``key_id`` is the SHA-256 of the public key's DER
SubjectPublicKeyInfo (as RFC 6962's LogID). No head is signed over a log that
fails ``verify``'s log or authorization check (:func:`signed_head`).

A heads file is JSON Lines, one head per line, appended to and kept where the
ledger's operator cannot rewrite it (see docs/evidence.md). A verifier holding
it detects any truncation or rewriting of the log before the newest head
(:func:`ledger.verification.verify`).

Keys: :func:`generate_key` writes ``KEY`` (PKCS#8 PEM, mode 0600) and ``KEY.pub``
(SubjectPublicKeyInfo PEM).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import os
import struct
import types
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from ledger.errors import InvalidHeadError, InvalidKeyError, install_hint, naming_file
from ledger.merkle import EMPTY_ROOT, LogDigest
from ledger.serialization import datetime_to_micros, micros_to_datetime
from ledger.validation import quoted

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

    from ledger.application import Ledger

    PrivateKeyLike = Ed25519PrivateKey | str | os.PathLike[str]
    PublicKeyLike = Ed25519PublicKey | Ed25519PrivateKey | bytes | str | os.PathLike[str]

#: What the signature of a head starts with (domain separation).
HEAD_CONTEXT = b"provledger tree head v1\n"
#: The ``version`` field of a head's JSON.
HEAD_VERSION = 1
#: What the refusal of a head over a log that fails verify's checks starts with.
_NOT_SIGNED = "no head signed"

_FIELDS = ("version", "tree_size", "root", "position", "time", "key_id", "signature")


# -- keys ------------------------------------------------------------------------------


@functools.cache
def ed25519() -> Any:
    """The ``cryptography`` pieces used here (imported on first use, so the ledger
    itself runs without the package; it is the ``evidence`` extra's).

    Raises:
        InvalidKeyError: ``cryptography`` is not installed.
    """
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519 as keys
    except ImportError:
        raise InvalidKeyError(
            "signed heads and bundles need the 'cryptography' package; " + install_hint("evidence")
        ) from None
    return types.SimpleNamespace(
        Private=keys.Ed25519PrivateKey,
        Public=keys.Ed25519PublicKey,
        serialization=serialization,
        InvalidSignature=InvalidSignature,
    )


def generate_key(path: str | os.PathLike[str]) -> str:
    """Write a new Ed25519 key pair: ``path`` (private, mode 0600) and ``path.pub``.

    Returns the key id. Refuses to overwrite an existing file.

    Raises:
        InvalidKeyError: either file exists already.
        OSError: the directory cannot be written.
    """
    private_path = Path(path)
    public_path = Path(f"{private_path}.pub")
    for existing in (private_path, public_path):
        if existing.exists():
            raise InvalidKeyError(f"{existing} already exists; refusing to overwrite a key")
    crypto = ed25519()
    key = crypto.Private.generate()
    private_pem = key.private_bytes(
        crypto.serialization.Encoding.PEM,
        crypto.serialization.PrivateFormat.PKCS8,
        crypto.serialization.NoEncryption(),
    )
    with naming_file(private_path):
        fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.fchmod(fd, 0o600)  # whatever the umask: readable by its owner only
            os.write(fd, private_pem)
        finally:
            os.close(fd)
    with naming_file(public_path):
        public_path.write_bytes(public_key_pem(key.public_key()))
    return key_id(key.public_key())


def load_private_key(key: PrivateKeyLike) -> Ed25519PrivateKey:
    """An Ed25519 private key, given as one or as the path of its PEM file.

    Raises:
        InvalidKeyError: the file is missing, unreadable or not an Ed25519 private key.
    """
    crypto = ed25519()
    if isinstance(key, crypto.Private):
        return cast("Ed25519PrivateKey", key)
    data = _read_key_file(key)
    try:
        loaded = crypto.serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise InvalidKeyError(f"{key}: not an unencrypted PEM private key ({exc})") from None
    if not isinstance(loaded, crypto.Private):
        raise InvalidKeyError(f"{key}: not an Ed25519 private key")
    private: Ed25519PrivateKey = loaded
    return private


def load_public_key(key: PublicKeyLike) -> Ed25519PublicKey:
    """An Ed25519 public key: given as one, derived from a private key, as PEM
    bytes, or as the path of a PEM file.

    Raises:
        InvalidKeyError: the file is missing, unreadable or not an Ed25519 public key.
    """
    crypto = ed25519()
    if isinstance(key, crypto.Public):
        return cast("Ed25519PublicKey", key)
    if isinstance(key, crypto.Private):
        derived: Ed25519PublicKey = key.public_key()
        return derived
    data = key if isinstance(key, bytes) else _read_key_file(key)
    where = "public key" if isinstance(key, bytes) else str(key)
    try:
        loaded = crypto.serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise InvalidKeyError(f"{where}: not a PEM public key ({exc})") from None
    if not isinstance(loaded, crypto.Public):
        raise InvalidKeyError(f"{where}: not an Ed25519 public key")
    public: Ed25519PublicKey = loaded
    return public


def _read_key_file(path: object) -> bytes:
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidKeyError(f"a key must be a key object or a file path, got {quoted(path)}")
    shown = quoted(os.fspath(path))
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidKeyError(f"{shown}: cannot read the key file ({exc.strerror})") from None
    except ValueError as exc:  # a NUL or a lone surrogate in the path
        raise InvalidKeyError(f"{shown} is not a usable key file path ({exc})") from None


def public_key_pem(key: Ed25519PublicKey) -> bytes:
    """The public key as SubjectPublicKeyInfo PEM (what ``KEY.pub`` holds)."""
    crypto = ed25519()
    pem: bytes = key.public_bytes(
        crypto.serialization.Encoding.PEM, crypto.serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return pem


def key_id(key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """SHA-256 (hex) of the public key's DER SubjectPublicKeyInfo."""
    crypto = ed25519()
    public = cast("Ed25519PublicKey", key.public_key() if isinstance(key, crypto.Private) else key)
    der = public.public_bytes(
        crypto.serialization.Encoding.DER, crypto.serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(der).hexdigest()


# -- heads -----------------------------------------------------------------------------


def head_message(tree_size: int, position: int, time: datetime, root: bytes) -> bytes:
    """The bytes a head's signature covers (see the module docstring)."""
    return (
        HEAD_CONTEXT
        + struct.pack(">QQq", tree_size, position, datetime_to_micros(time))
        + bytes(root)
    )


@dataclass(frozen=True)
class SignedHead:
    """A signed statement: the first ``tree_size`` events (up to log ``position``)
    have the Merkle root ``root`` (hex), as of ``time``, signed by ``key_id``."""

    tree_size: int
    root: str
    position: int
    time: datetime
    key_id: str
    signature: str  # base64 of the 64-byte Ed25519 signature

    @property
    def digest(self) -> LogDigest:
        """The digest this head signs (what ``verify(against=…)`` takes)."""
        return LogDigest(size=self.tree_size, position=self.position, root=self.root)

    def message(self) -> bytes:
        """The bytes the signature covers."""
        return head_message(self.tree_size, self.position, self.time, bytes.fromhex(self.root))

    def to_json(self) -> dict[str, Any]:
        """The head as a JSON object (``time`` in ISO 8601, UTC, microseconds)."""
        return {
            "version": HEAD_VERSION,
            "tree_size": self.tree_size,
            "root": self.root,
            "position": self.position,
            "time": self.time.astimezone(UTC).isoformat(timespec="microseconds"),
            "key_id": self.key_id,
            "signature": self.signature,
        }

    def dumps(self) -> str:
        """The head as one line of JSON (a heads file line, without the newline)."""
        return json.dumps(self.to_json(), separators=(",", ":"))

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str) -> SignedHead:
        """Read a head from its JSON (object or text), checking every field's shape.

        Raises:
            InvalidHeadError: not a head, or a field is missing, extra or malformed.
        """
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except ValueError as exc:
                raise InvalidHeadError(f"not JSON ({exc})") from None
        if not isinstance(data, Mapping):
            raise InvalidHeadError(f"a signed head is a JSON object, got {type(data).__name__}")
        missing = [f for f in _FIELDS if f not in data]
        extra = sorted(set(data) - set(_FIELDS))
        if missing or extra:
            what = f"lacks {missing[0]!r}" if missing else f"has an unknown field {extra[0]!r}"
            raise InvalidHeadError(f"the signed head {what}")
        if data["version"] != HEAD_VERSION:
            raise InvalidHeadError(f"signed head version {data['version']!r} is not {HEAD_VERSION}")
        for name in ("tree_size", "position"):
            value = data[name]
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
                raise InvalidHeadError(f"signed head {name} {value!r} is not a count")
        for name, length in (("root", 64), ("key_id", 64)):
            value = data[name]
            if not isinstance(value, str) or len(value) != length or not _is_hex(value):
                raise InvalidHeadError(f"signed head {name} {value!r} is not {length} hex digits")
        _check_possible(data["tree_size"], data["position"], data["root"].lower())
        try:
            time = datetime.fromisoformat(str(data["time"]))
        except ValueError:
            raise InvalidHeadError(f"signed head time {data['time']!r} is not ISO 8601") from None
        if time.tzinfo is None:
            raise InvalidHeadError(f"signed head time {data['time']!r} has no timezone")
        signature = data["signature"]
        try:
            raw = base64.b64decode(str(signature), validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != 64:
            raise InvalidHeadError(f"signed head signature {signature!r} is not 64 bytes of base64")
        return cls(
            tree_size=data["tree_size"],
            root=data["root"].lower(),
            position=data["position"],
            time=time.astimezone(UTC),
            key_id=data["key_id"].lower(),
            signature=str(signature),
        )


def _check_possible(size: int, position: int, root: str) -> None:
    """Refuse a head no log can have: its ``size``-th event at a position below
    ``size`` (the n-th event of a log is at position n or later), or an empty tree
    at a position past 0 or with another root than the empty tree's.

    Raises:
        InvalidHeadError: naming the fields that cannot go together.
    """
    if position < size:
        raise InvalidHeadError(
            f"signed head position {position} is below its tree_size {size}: event "
            f"number {size} of a log is at position {size} or later"
        )
    if size == 0 and (position != 0 or root != EMPTY_ROOT.hex()):
        raise InvalidHeadError(
            f"signed head of tree_size 0 is at position {position} with root {root[:16]}…: "
            f"an empty log is at position 0 with root {EMPTY_ROOT.hex()[:16]}…"
        )


def _is_hex(text: str) -> bool:
    try:
        bytes.fromhex(text)
    except ValueError:
        return False
    return True


def sign_head(private_key: PrivateKeyLike, digest: LogDigest, time: datetime) -> SignedHead:
    """Sign ``digest`` (tree size, log position, root) as of ``time``.

    Raises:
        InvalidKeyError: the key cannot be loaded.
    """
    key = load_private_key(private_key)
    when = micros_to_datetime(datetime_to_micros(time))  # what the signature covers
    message = head_message(digest.size, digest.position, when, bytes.fromhex(digest.root))
    return SignedHead(
        tree_size=digest.size,
        root=digest.root,
        position=digest.position,
        time=when.astimezone(UTC),
        key_id=key_id(key),
        signature=base64.b64encode(key.sign(message)).decode("ascii"),
    )


def verify_head(head: SignedHead, public_key: PublicKeyLike) -> bool:
    """True when ``head`` was signed by ``public_key`` (its key id and signature)."""
    key = load_public_key(public_key)
    if head.key_id != key_id(key):
        return False
    try:
        raw = base64.b64decode(head.signature, validate=True)
        if base64.b64encode(raw).decode("ascii") != head.signature:
            return False  # one spelling only: a head's every character is signed for
        key.verify(raw, head.message())
    except (ed25519().InvalidSignature, ValueError):
        return False
    return True


def signed_head(ledger: Ledger, private_key: PrivateKeyLike) -> SignedHead:
    """A head over the ledger's log as it is now, signed with ``private_key``
    (what ``Ledger.signed_head`` returns), once the log passes the log and
    authorization checks of ``verify`` (every event's bytes against its leaf, no
    stray or missing position; every event's actor authorized by the log before
    it), read in the same transaction as the digest signed
    (:func:`ledger.log_check.checked_digest`: one pass over the log, without
    ``verify``'s views and evidence-bytes checks).

    Raises:
        InvalidKeyError: the key cannot be loaded.
        CorruptEventError: the log fails one of those checks (the message names
            the first problem, as ``verify`` does); nothing is signed.
    """
    from ledger.log_check import checked_digest

    key = load_private_key(private_key)
    return sign_head(key, checked_digest(ledger.engine, _NOT_SIGNED), ledger.now())


# -- heads files -----------------------------------------------------------------------


def append_head(path: str | os.PathLike[str], head: SignedHead) -> None:
    """Append ``head`` as one line to the heads file at ``path`` (created if absent),
    flushed to disk before returning. A file whose last line lacks its newline
    (written by hand, or cut short) gets one first: the new head is never glued
    onto the last one, which would make both unreadable."""
    with naming_file(path), open(path, "a+b") as out:
        line = (head.dumps() + "\n").encode("utf-8")
        if out.seek(0, os.SEEK_END) > 0:
            out.seek(-1, os.SEEK_END)
            if out.read(1) != b"\n":
                line = b"\n" + line
        out.write(line)  # append mode: at the end, whatever was read
        out.flush()
        os.fsync(out.fileno())


#: The longest line of a heads file read (a signed head's is about 400 bytes).
HEAD_LINE_MOST = 64 * 1024


def load_heads(path: str | os.PathLike[str]) -> tuple[SignedHead, ...]:
    """Every head in the heads file at ``path``, in file order (blank lines skipped).

    Raises:
        InvalidHeadError: a line is not a signed head (the message names the line),
            or the file cannot be read.
    """
    try:
        with Path(path).open("rb") as stream:
            lines = list(_lines(stream))
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise InvalidHeadError(f"cannot read the heads file {quoted(path)}: {why}") from None
    except ValueError as exc:  # undecodable, or a NUL in the path
        raise InvalidHeadError(f"cannot read the heads file {quoted(path)}: {exc}") from None
    heads = []
    for number, line in lines:
        try:
            heads.append(SignedHead.from_json(line))
        except InvalidHeadError as exc:
            raise InvalidHeadError(f"{path} line {number}: {exc}") from None
    return tuple(heads)


def _lines(stream: BinaryIO) -> Iterator[tuple[int, str]]:
    """The heads file's lines that are not blank, numbered, each read no longer
    than :data:`HEAD_LINE_MOST` (an endless file, such as /dev/zero, is refused at
    its first line, not read into memory whole)."""
    number = 0
    for raw in iter(lambda: stream.readline(HEAD_LINE_MOST + 1), b""):
        if len(raw) > HEAD_LINE_MOST:
            raise ValueError(
                f"line {number + 1} is longer than {HEAD_LINE_MOST:,} bytes, so no signed head"
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"line {number + 1} is not UTF-8 ({exc.reason} at byte {exc.start})"
            ) from None
        for part in text.splitlines():  # every line break str knows
            number += 1
            if part.strip():
                yield number, part


def as_heads(
    heads: str | os.PathLike[str] | Iterable[SignedHead] | None,
) -> tuple[SignedHead, ...]:
    """Heads given as a heads file path, or as heads (None: none). A heads file
    that holds none (emptied, or the wrong file) is refused: checking the log
    against it would check nothing."""
    if heads is None:
        return ()
    if isinstance(heads, (str, os.PathLike)):
        loaded = load_heads(heads)
        if not loaded:
            raise InvalidHeadError(
                f"the heads file {os.fspath(heads)!r} holds no signed head: there is "
                "nothing to check the log against"
            )
        return loaded
    if isinstance(heads, (bytes, bytearray, memoryview, Mapping)) or not isinstance(
        heads, Iterable
    ):
        raise InvalidHeadError(
            f"heads must be a heads file path or signed heads, got {type(heads).__name__}"
        )
    out = tuple(heads)
    for head in out:
        if not isinstance(head, SignedHead):
            raise InvalidHeadError(f"expected SignedHead objects, got {type(head).__name__}")
    return out


def publish_head(
    ledger: Ledger,
    private_key: PrivateKeyLike,
    path: str | os.PathLike[str] | None = None,
) -> SignedHead:
    """Sign a head of the log now; with ``path``, append it to that heads file.

    The head is signed only over a log that passes ``verify``'s log and
    authorization checks (:func:`signed_head`). Before appending, every head
    already in the file must be signed by this key, its signature verifying, and
    in order, as ``verify`` checks them
    (a heads file is verified with one public key: after a key rotation the new
    key's heads start a new file), and the log must still extend the newest of
    them (an RFC 9162 consistency proof over the stored leaves), so a routine
    head-signing job never signs over a truncated or rewritten log. The file is
    locked (``flock``) from signing to appending: jobs publishing at once take
    turns, and the file keeps its heads in the order they were signed.

    Raises:
        InvalidKeyError: the key cannot be loaded.
        InvalidHeadError: the heads file is malformed, holds a head signed by
            another key or whose signature fails, holds heads out of order, or the
            log no longer extends its newest head (nothing is appended then).
        CorruptEventError: the log fails ``verify``'s log or authorization check
            (nothing is signed or appended; a heads file that did not exist is
            left empty).
    """
    from ledger.verification import check_extends, heads_problems

    key = load_private_key(private_key)
    if path is None:
        return signed_head(ledger, key)
    with _holding(path):
        # Signed with the file locked: heads published at once (a schedule and a
        # revocation, say) are appended in the order they were signed.
        head = signed_head(ledger, key)
        kept = load_heads(path)
        foreign = next((h for h in kept if h.key_id != head.key_id), None)
        if foreign is not None:
            raise InvalidHeadError(
                f"not appended to {path}: its heads are signed by key {foreign.key_id[:16]}…, "
                f"this one by key {head.key_id[:16]}…, and a heads file is verified with one "
                "public key; start a new heads file for this key (keep the old one, with its "
                "public key, for the heads it holds)"
            )
        wrong = heads_problems(kept, key.public_key())
        if wrong:  # a file verify refuses is no record to add to
            more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
            raise InvalidHeadError(
                f"not appended to {path}: {wrong[0]}{more}; `provledger verify --heads` "
                "with this key's public key names every problem of the file"
            )
        if kept:
            problem = check_extends(ledger.engine, kept[-1])
            if problem is not None:
                raise InvalidHeadError(
                    f"not appended to {path}: {problem}; if that was a restore you made, "
                    "append to a new heads file from now on and keep this one as the "
                    "record of what the restore lost"
                )
        append_head(path, head)
    return head


@contextmanager
def _holding(path: str | os.PathLike[str]) -> Iterator[None]:
    """The heads file at ``path`` (created empty if absent: never removed again,
    since another publisher may be waiting for it), locked for this process alone
    (``flock``: other publishers, in any process of this machine, wait)."""
    import fcntl  # POSIX

    with naming_file(path):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # and the lock with it


__all__ = [
    "HEAD_CONTEXT",
    "SignedHead",
    "append_head",
    "as_heads",
    "ed25519",
    "generate_key",
    "head_message",
    "key_id",
    "load_heads",
    "load_private_key",
    "load_public_key",
    "public_key_pem",
    "publish_head",
    "sign_head",
    "signed_head",
    "verify_head",
]
