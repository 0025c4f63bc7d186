"""Quicker ways to compute a thing give what the plain definition gives."""

from __future__ import annotations

import sqlite3
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ledger import redaction
from ledger.values import HIDDEN
from projections import record_table, validity


def ids_by_definition(
    values: list[str], hidden: set[str], names: dict[str, str]
) -> tuple[str, ...]:
    """``redaction.ids`` as first written: one HIDDEN, other ids in order."""
    out: list[str] = []
    for value in values:
        shown = HIDDEN if value in hidden else names.get(value, value)
        if shown not in out or shown != HIDDEN:
            out.append(shown)
    return tuple(out)


_IDS = st.sampled_from(["a", "b", "c", "d", "e@@s", HIDDEN])


@given(
    st.lists(_IDS, max_size=30),
    st.sets(_IDS, max_size=4),
    st.dictionaries(_IDS, _IDS, max_size=3),
)
def test_shown_ids_are_those_of_the_definition(
    values: list[str], hidden: set[str], names: dict[str, str]
) -> None:
    assert redaction.ids(values, frozenset(hidden), names) == ids_by_definition(
        values, hidden, names
    )


def test_a_thousand_hidden_ids_show_as_one() -> None:
    values = [f"r{i}" for i in range(1000)]
    assert redaction.ids(values, frozenset(values[1:]), {}) == ("r0", HIDDEN)


def _rows(select: str) -> list[Any]:
    con = sqlite3.connect(":memory:")
    con.row_factory = sqlite3.Row
    ddl = record_table.DDL[0].format(
        t="", bigint="INTEGER", blob="BLOB", clustered=" WITHOUT ROWID", bytewise=""
    )
    con.execute(ddl)
    con.execute(
        "INSERT INTO pl_records (record_id, from_pos, scope, claim_key, kind, value, status, "
        "proposer, created_pos, created_at, parents, agg_id) "
        "VALUES ('m1', 3, 's', 'k', 'fact', x'81a161', 'ACCEPTED', 'p', 3, 17, x'90', "
        "'0190a1b2c3d47e5f8a9b0c1d2e3f4a5b')"
    )
    return list(con.execute(select).fetchall())


def test_a_view_row_as_a_dict_is_its_columns_by_name() -> None:
    for select in (
        "SELECT * FROM pl_records",  # the quick path
        "SELECT *, 1 AS has_deliveries FROM pl_records",  # a listing's row
        f"SELECT {', '.join(reversed(record_table.COLUMNS))} FROM pl_records",
    ):
        (row,) = _rows(select)
        by_name = {name: row[name] for name in record_table.COLUMNS}
        assert validity._as_dict(row) == by_name
        assert list(validity._as_dict(row)) == list(record_table.COLUMNS)
        assert validity._as_dict(dict(by_name)) == by_name  # PostgreSQL's dict rows
