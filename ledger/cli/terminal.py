"""What reaches a terminal: stored text is shown, never obeyed.

The library refuses C0 control characters in the text it stores (ids, claim keys,
reasons, notes), and the command line prints values as JSON, which escapes them.
What is left would still act on a terminal instead of being shown: the C1 controls
(U+0080 to U+009F; U+009B is an 8-bit CSI, U+009D an OSC) that a value, a claim key or
a reason may hold, the bidirectional marks, embeddings, overrides and isolates
(e.g. U+202E) that make text display in an order other than its own, so that what a
reviewer reads is not what is stored, and the other invisible format characters
(a zero-width space, U+200B, makes two claim keys look alike; see
:func:`ledger.validation.hidden_formats`).
While ``provledger`` writes to a terminal, each of those is printed as its
``\\uXXXX`` escape instead (inside JSON output that is the same string). Output
to a pipe or a file is left byte for byte as it is.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from ledger.validation import write_out_formats

#: Characters a terminal acts on rather than shows (the C1 controls).
ACTIVE = re.compile("[\x80-\x9f]")


def _escaped(ch: str) -> str:
    """``ch`` as JSON escapes it (a character beyond U+FFFF as its surrogate pair)."""
    point = ord(ch)
    if point <= 0xFFFF:
        return f"\\u{point:04x}"
    point -= 0x10000
    return f"\\u{0xD800 + (point >> 10):04x}\\u{0xDC00 + (point & 0x3FF):04x}"


def inert(text: str) -> str:
    """``text`` with every :data:`ACTIVE` character, direction control and other
    invisible format character (:func:`ledger.validation.hidden_formats`: a
    zero-width space makes two claim keys look alike) written as its ``\\uXXXX``
    escape."""
    return write_out_formats(ACTIVE.sub(lambda m: _escaped(m.group()), text), _escaped)


class Guarded:
    """A terminal's text stream that writes :func:`inert` text; everything else
    (``isatty``, ``fileno``, ``encoding``, ``buffer`` …) is the stream's own."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        """Write ``text`` made inert; returns the length of ``text`` as given."""
        self.stream.write(inert(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        """Write each line made inert."""
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _is_terminal(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except ValueError:  # a closed stream
        return False


@contextmanager
def guarded() -> Iterator[None]:
    """Within this block, ``sys.stdout`` and ``sys.stderr`` are :class:`Guarded`
    where they are terminals; both are put back afterwards."""
    saved = sys.stdout, sys.stderr
    if _is_terminal(sys.stdout) and not isinstance(sys.stdout, Guarded):
        sys.stdout = Guarded(sys.stdout)
    if _is_terminal(sys.stderr) and not isinstance(sys.stderr, Guarded):
        sys.stderr = Guarded(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
