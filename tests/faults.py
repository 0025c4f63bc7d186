"""Storage faults for tests: a small disk that can be filled, and a PostgreSQL
server ending a ledger's sessions.

* :func:`small_disk` mounts a tmpfs of a given size (root only: otherwise the test
  is skipped; ``tests/test_storage_faults.py`` also uses a file size limit, which
  needs nothing);
* :meth:`SmallDisk.fill` takes every free byte, :meth:`SmallDisk.free` gives them
  back, :meth:`SmallDisk.full` does both around a block;
* :func:`end_sessions` runs ``pg_terminate_backend`` on every server session of the
  ledger at a URL (they are named ``provledger:SCHEMA``), and only on those.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from .conftest import _pg_dsn


class SmallDisk:
    """A mounted tmpfs; ``fill()`` takes every free byte, ``free()`` returns them."""

    def __init__(self, mount: Path) -> None:
        self.mount = mount
        self.filler = mount / "filler"

    def fill(self) -> None:
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for chunk in (1 << 16, 1 << 12, 1 << 9, 1):
                with suppress(OSError):
                    while True:
                        os.write(fd, b"\0" * chunk)
        finally:
            os.close(fd)
        assert os.statvfs(self.mount).f_bavail == 0

    def free(self) -> None:
        self.filler.unlink()

    @contextmanager
    def full(self) -> Iterator[None]:
        """The disk full for the duration of the block."""
        self.fill()
        try:
            yield
        finally:
            self.free()


@contextmanager
def small_disk(mount: Path, size: str, owner: str | None = None) -> Iterator[SmallDisk]:
    """A tmpfs of ``size`` (``"4m"``) mounted at the empty directory ``mount`` (and
    owned by ``owner``) for the duration of the block; skips the test unless it can."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    options = f"size={size}" + (",mode=0700" if owner else "")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        if owner:
            subprocess.run(["chown", owner, str(mount)], check=True)
        yield SmallDisk(mount)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def end_sessions(url: str) -> int:
    """``pg_terminate_backend`` on every server session of the ledger at ``url``, as
    an administrator or a server restart would; returns how many."""
    import psycopg

    schema = url.split("schema=")[1].split("&")[0]
    with psycopg.connect(_pg_dsn(), autocommit=True) as admin:
        return len(
            admin.execute(
                "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (f"provledger:{schema}",),
            ).fetchall()
        )
