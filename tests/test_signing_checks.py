"""Nothing is signed over a log ``verify`` rejects: a head (``publish_head``,
``Ledger.signed_head``, ``provledger head``) and a compliance bundle's head are
refused when the log fails ``verify``'s log or authorization check, read in the
transaction the signed digest is read in (:mod:`ledger.log_check`); a bundle
carrying another public key than the trusted one is told truly; and the leaf
bytes docs/evidence.md specifies are the ledger's, byte for byte."""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgpack
import pytest
from click.testing import CliRunner

from ledger import Kind, Ledger, merkle
from ledger.bundle import verify_bundle, write_bundle
from ledger.cli import main
from ledger.domain import Record
from ledger.errors import CorruptEventError
from ledger.heads import generate_key, load_heads, publish_head, verify_head
from ledger.serialization import EXT_DATETIME, EXT_TUPLE, EXT_UUID, MsgpackTranscoder, pack

from .attacks import ATTACKS, Raw, Scene, build_scene, forge
from .conftest import Clock

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "evidence.md"


@pytest.fixture
def scene(open_ledger: Callable[..., Ledger], tmp_path: Path, clock: Clock) -> Scene:
    """tests/attacks.py's scene: E1 revoked (M1 STALE), candidates F1 and G1, F2."""
    return build_scene(open_ledger(), tmp_path, clock)


def _revoked_without_approve(scene: Scene) -> str:
    """A ``Revoked`` of the candidate F1 (recomputed leaf) by agent-2, who never
    held ``approve``."""
    position = forge(scene, "F1", Record.Revoked, actor="agent-2", reason="forged")
    return f"appended Revoked of F1 by agent-2 at position {position}"


def _leaf_zeroed(scene: Scene) -> str:
    """``UPDATE pl_merkle_leaves SET leaf=<32 zero bytes> WHERE position=5``."""
    scene.raw.one("UPDATE pl_merkle_leaves SET leaf=? WHERE position=5", (b"\x00" * 32,))
    return "zeroed the leaf at position 5"


#: Attacks beyond tests/attacks.py's, as the auditor made them.
MORE: dict[str, Callable[[Scene], str]] = {
    "revoked-without-approve": _revoked_without_approve,
    "leaf-zeroed": _leaf_zeroed,
}


def _attack(name: str) -> Callable[[Scene], str]:
    return MORE[name] if name in MORE else ATTACKS[name][1]


# -- heads and bundles over a log verify rejects --------------------------------------------


@pytest.mark.parametrize("ledger_url", ["sqlite", "postgres"], indirect=True)
@pytest.mark.parametrize("attack", sorted(ATTACKS) + sorted(MORE))
def test_nothing_is_signed_over_a_log_that_fails_verify_s_log_or_authorization_check(
    scene: Scene, tmp_path: Path, attack: str
) -> None:
    # Given a ledger someone with write access to its database attacked
    _attack(attack)(scene)
    led = scene.ledger
    report = led.verify()
    failing = [check for check in report.failed_checks if check in ("log", "authorization")]
    position, views = led.position, led.views_digest()
    fresh, out = tmp_path / "fresh-heads.jsonl", tmp_path / "m1.zip"

    if not failing:
        # When the attack is beyond those checks (a truncation, an authorized
        # forgery, views or evidence bytes edited), a head is signed, over the very
        # digest verify computes
        head = publish_head(led, scene.key, fresh)
        assert head.digest == report.digest
        assert load_heads(fresh) == (head,) and verify_head(head, scene.public_key)
        return

    # When a head is published to a new heads file, it is refused, naming the
    # problem verify names first and the check it fails
    expected = (
        f"no head signed: the log fails verify's {failing[0]} check: {report.problem} "
        "(run `provledger verify`)"
    )
    with pytest.raises(CorruptEventError) as refused:
        publish_head(led, scene.key, fresh)
    assert str(refused.value) == expected
    assert fresh.read_text() == ""  # created (and locked) to append to; nothing appended
    with pytest.raises(CorruptEventError) as refused:
        led.signed_head(scene.key)
    assert str(refused.value) == expected

    # And a bundle (whose head covers the whole log) is refused, writing nothing
    with pytest.raises(CorruptEventError, match=r"^bundle refused"):
        write_bundle(scene.reviewer, "M1", scene.key, out)
    assert not out.exists()
    # And the log and the views are as they were
    assert (led.position, led.views_digest()) == (position, views)


@pytest.mark.parametrize("ledger_url", ["sqlite", "postgres"], indirect=True)
def test_a_bundle_of_records_the_forgery_does_not_touch_is_refused_too(scene: Scene) -> None:
    # Given a forged acceptance of G1 by a ghost whose forged rows were removed
    ATTACKS["forged-grant"][1](scene)
    problem = scene.ledger.verify().problem
    assert problem is not None and "'ghost' held no valid token then" in problem

    # When a bundle of E1 (which the forged event does not touch) is written, it
    # is refused all the same: its head would sign the forged event into the log
    out = scene.key.parent / "e1.zip"
    with pytest.raises(CorruptEventError) as refused:
        write_bundle(scene.reviewer, "E1", scene.key, out)
    assert str(refused.value) == (
        f"bundle refused: the log fails verify's authorization check: {problem} "
        "(run `provledger verify`)"
    )
    assert not out.exists()


@pytest.mark.parametrize("ledger_url", ["sqlite", "postgres"], indirect=True)
def test_an_intact_ledger_signs_the_digest_verify_and_digest_compute(scene: Scene) -> None:
    led = scene.ledger
    head = led.signed_head(scene.key)
    assert head.digest == led.digest() == led.verify().digest
    out = scene.key.parent / "m1.zip"
    info = write_bundle(scene.reviewer, "M1", scene.key, out)
    assert info.head.digest == head.digest
    report = verify_bundle(out, scene.public_key)
    assert report.ok, report.problem


def _cli(url: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), env={"PROVLEDGER_URL": url})
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_the_head_and_bundle_commands_refuse_a_visibly_broken_tree(
    scene: Scene, tmp_path: Path, ledger_url: str
) -> None:
    # Given the leaf at position 5 zeroed in the database
    _leaf_zeroed(scene)
    url, key = ledger_url, str(scene.key)
    fresh = tmp_path / "fresh-heads.jsonl"
    kept = scene.heads.read_text()

    # When a head is signed onto a new heads file or the kept one, or a bundle
    # written, each is refused with exit 1, naming the position
    problem = (
        "the log fails verify's log check: the stored bytes at position 5 differ from "
        "what was appended (run `provledger verify`)"
    )
    for heads in (fresh, scene.heads):
        code, stdout, stderr = _cli(url, "head", "--key", key, "--append", str(heads))
        assert (code, stdout) == (1, "")
        assert stderr == f"error: no head signed: {problem}\n"
    assert (fresh.read_text(), scene.heads.read_text()) == ("", kept)
    code, stdout, stderr = _cli(url, "head", "--key", key)
    assert (code, stdout, stderr) == (1, "", f"error: no head signed: {problem}\n")
    env = {"PROVLEDGER_URL": url, "PROVLEDGER_TOKEN": scene.reviewer_token}
    out = tmp_path / "m1.zip"
    result = CliRunner().invoke(main, ["bundle", "M1", "--key", key, "-o", str(out)], env=env)
    assert result.exit_code == 1 and result.stderr == f"error: bundle refused: {problem}\n"
    assert not out.exists()

    # `digest` checks nothing (it signs nothing): it prints the stored leaves' root
    code, stdout, _ = _cli(url, "digest")
    assert code == 0 and stdout.strip() == str(scene.ledger.digest())


# -- verify-bundle names the key a bundle carries truly -------------------------------------


def _swapped(path: Path, out: Path, name: str, data: bytes) -> Path:
    """A copy of the bundle at ``path`` with member ``name`` replaced by ``data``."""
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info, data if info.filename == name else src.read(info))
    return out


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_bundle_whose_public_key_alone_was_swapped_is_not_said_signed_by_it(
    scene: Scene, tmp_path: Path
) -> None:
    # Given a genuine bundle whose public_key.pem alone is replaced by another key
    from ledger.heads import key_id, load_public_key

    path = tmp_path / "m1.zip"
    write_bundle(scene.reviewer, "M1", scene.key, path)
    other = tmp_path / "other"
    generate_key(other)
    swapped = _swapped(
        path, tmp_path / "swapped.zip", "public_key.pem", Path(f"{other}.pub").read_bytes()
    )

    # When it is verified with the trusted key, which made every signature in it
    report = verify_bundle(swapped, scene.public_key)

    # Then it fails, saying which key it carries, and that the trusted key signed it
    carried = key_id(load_public_key(Path(f"{other}.pub")))[:16]
    trusted = key_id(load_public_key(scene.public_key))[:16]
    assert not report.ok
    assert report.problem == (
        f"the bundle carries public key {carried}…, not the trusted key {trusted}…, though "
        "its manifest is signed with the trusted key: public_key.pem was replaced"
    )
    # And with a key that signed nothing in it pinned, it says only what it carries
    third = tmp_path / "third"
    generate_key(third)
    report = verify_bundle(swapped, Path(f"{third}.pub"))
    assert report.problem == (
        f"the bundle carries public key {carried}…, not the trusted key "
        f"{key_id(load_public_key(Path(f'{third}.pub')))[:16]}…"
    )
    # While a bundle written whole with another key is said to be signed by it
    resigned = tmp_path / "resigned.zip"
    write_bundle(scene.reviewer, "M1", other, resigned)
    assert verify_bundle(resigned, scene.public_key).problem == (
        f"the bundle was signed by key {carried}…, not by the trusted key {trusted}…"
    )


# -- the leaf bytes and bundle signatures docs/evidence.md specifies -------------------------


def _doc_block(start: str, fence: str = "text") -> str:
    """The body of the fenced block of docs/evidence.md whose first line starts with
    ``start``."""
    text = DOC.read_text(encoding="utf-8")
    found = re.search(rf"```{fence}\n({re.escape(start)}.*?)```", text, re.S)
    assert found is not None, f"docs/evidence.md has no {fence} block starting {start!r}"
    return found.group(1)


def _leaf_example() -> dict[str, str]:
    """The worked example's fields; a line starting with white space goes on the last."""
    fields: dict[str, str] = {}
    name = ""
    for line in _doc_block("position ").splitlines():
        if line[:1].isspace():
            fields[name] += line.strip()
        else:
            name, value = line.split(maxsplit=1)
            fields[name] = value.strip()
    return fields


def test_the_documented_leaf_example_is_what_msgpack_hashlib_and_the_ledger_make() -> None:
    example = _leaf_example()
    position, version = int(example["position"]), int(example["version"])
    state = bytes.fromhex(example["state"])
    items = [position, example["originator"], version, example["topic"], state]

    # The leaf bytes, by msgpack and hashlib alone, as the doc says
    data = msgpack.packb(items, use_bin_type=True)
    assert data.hex() == example["leaf_data"]
    assert hashlib.sha256(b"\x00" + data).hexdigest() == example["leaf"]
    # and as the ledger computes them
    assert (
        merkle.leaf_data(position, example["originator"], version, example["topic"], state) == data
    )
    assert merkle.leaf_hash(data).hex() == example["leaf"]

    # The byte-by-byte reading: an array of 5, fixint 8, str8 of 32, fixint 2,
    # fixstr of 29, bin8 of 77; a map of 4 whose timestamp is ext 2 [µs, 0]
    assert data[:3] == bytes([0x95, 0x08, 0xD9]) and data[3] == 32
    assert data[36] == 0x02 and data[37] == 0xA0 | 29
    assert data[67:69] == bytes([0xC4, 77]) and data[69:] == state
    fields = msgpack.unpackb(state, raw=False)
    assert list(fields) == ["timestamp", "actor", "note", "_salt"]
    stamp = fields["timestamp"]
    assert stamp.code == 2 and msgpack.unpackb(stamp.data) == [1772357400000000, 0]
    assert (fields["actor"], fields["note"], len(fields["_salt"])) == ("reviewer", "checked", 16)

    # The ledger reads the state so, and packs those fields into these very bytes
    decoded = MsgpackTranscoder().decode(state)
    when = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
    assert decoded == {"timestamp": when, "actor": "reviewer", "note": "checked"}
    assert pack({**decoded, "_salt": fields["_salt"]}) == state
    assert example["topic"] == f"{Record.Accepted.__module__}:{Record.Accepted.__qualname__}"


def test_the_documented_ext_types_are_the_ledger_s() -> None:
    text = DOC.read_text(encoding="utf-8")
    table = dict(re.findall(r"^\| (\d) \| (UUID|aware datetime|tuple) \|", text, re.M))
    assert table == {
        str(EXT_UUID): "UUID",
        str(EXT_DATETIME): "aware datetime",
        str(EXT_TUPLE): "tuple",
    }


def _mth(leaves: list[bytes]) -> bytes:
    """RFC 6962 MTH, by hashlib alone."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return hashlib.sha256(b"\x01" + _mth(leaves[:k]) + _mth(leaves[k:])).digest()


@pytest.mark.parametrize("ledger_url", ["sqlite", "postgres"], indirect=True)
def test_every_stored_leaf_is_the_documented_recipe_over_its_stored_row(scene: Scene) -> None:
    # Given events of every kind the scene makes (tuples of parents, datetimes,
    # principals, captures), and one with an expiry at another UTC offset
    led = scene.ledger
    scene.agent.propose(
        scope="proj-a", claim_key="later", value=[1, "x"], kind=Kind.INFERENCE,
        parents=["F1"], expires=datetime.fromisoformat("2099-01-01T12:00:00+02:00"),
    )  # fmt: skip

    # When each stored row is packed as the doc says, with msgpack and hashlib alone
    raw = Raw(led)
    rows = raw.one("SELECT POS, originator_id, originator_version, topic, state FROM EVENTS")
    stored = dict(raw.one("SELECT position, leaf FROM pl_merkle_leaves"))
    leaves = []
    for position, oid, version, topic, state in sorted(rows):
        hex_id = oid if isinstance(oid, str) else oid.hex  # SQLite's text, PostgreSQL's uuid
        assert re.fullmatch(r"[0-9a-f]{32}", hex_id)
        data = msgpack.packb([position, hex_id, version, topic, bytes(state)], use_bin_type=True)
        leaf = hashlib.sha256(b"\x00" + data).digest()
        # Then it is the leaf the ledger stored for it
        assert bytes(stored[position]) == leaf, position
        leaves.append(leaf)
    # And the leaves in position order make the root the ledger signs
    digest = led.digest()
    assert (digest.size, digest.position) == (len(rows), max(r[0] for r in rows))
    assert _mth(leaves).hex() == digest.root == led.signed_head(scene.key).root


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_the_documented_bundle_signature_checks_pass_on_a_bundle_and_fail_on_a_changed_one(
    scene: Scene, tmp_path: Path
) -> None:
    import base64

    from ledger.heads import load_public_key

    path = tmp_path / "m1.zip"
    write_bundle(scene.reviewer, "M1", scene.key, path)
    data = path.read_bytes()
    with zipfile.ZipFile(path) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
        assert archive.comment == data[-124:]
    assert len(members["manifest.sig"]) == 89 and members["manifest.sig"].endswith(b"\n")
    code = _doc_block("body, comment", "python")

    # The doc's lines verify the bundle's archive and manifest signatures
    namespace: dict[str, Any] = {"base64": base64, "key": load_public_key(scene.public_key)}
    exec(code, {**namespace, "data": data, "members": members})

    # and refuse a manifest whose line endings were converted
    from cryptography.exceptions import InvalidSignature

    crlf = {**members, "manifest.json": members["manifest.json"].replace(b"\n", b"\r\n")}
    with pytest.raises(InvalidSignature):
        exec(code, {**namespace, "data": data, "members": crlf})


def _doc_table(after: str) -> list[tuple[str, str]]:
    """The first two cells of each body row of the first table after the text
    ``after`` in docs/evidence.md."""
    text = DOC.read_text(encoding="utf-8")
    lines = text[text.index(after) :].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[first + 2 :]:  # past the header and its rule
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        table.append((cells[0], cells[1]))
    return table


def _named(cell: str) -> set[str]:
    """The names in backticks of a table cell, outside its parentheses."""
    return set(re.findall(r"`([^`]+)`", re.sub(r"\([^)]*\)", "", cell)))


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_the_documented_manifest_and_event_fields_are_the_ledger_s(
    scene: Scene, tmp_path: Path
) -> None:
    import typing

    # The manifest's fields and each event entry's, as the doc's table names them
    manifest_rows = dict(_doc_table("`manifest.json`, field by field"))
    path = tmp_path / "m1.zip"
    write_bundle(scene.reviewer, "M1", scene.key, path)
    with zipfile.ZipFile(path) as archive:
        manifest = json.loads(archive.read("manifest.json"))
        carried = [archive.read(e["file"]) for e in manifest["events"] if e["file"]]
    documented = {name.strip("`") for name in manifest_rows}
    assert set(manifest) <= documented and documented - set(manifest) == {"extends"}
    assert manifest["format"] == "provledger-bundle/1"
    for event in manifest["events"]:
        assert set(event) == _named(manifest_rows["`events`"]) - {"events/"}
    assert set(manifest["head"]) == _named(manifest_rows["`head`"])
    # An event's member is its whole leaf_data, hashed to its leaf
    assert carried and all(msgpack.unpackb(data)[0] > 0 for data in carried)

    # Each event type's own fields, as the doc's table names them
    base = set(typing.get_type_hints(Record.Event)) | {"originator_topic"}
    for types, fields in _doc_table("The fields, by type"):
        for name in _named(types):
            event = getattr(Record, name)
            assert _named(fields) == set(typing.get_type_hints(event)) - base, name
