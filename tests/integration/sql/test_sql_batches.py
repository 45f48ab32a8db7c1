"""``to_sql``'s two ways of taking a record, and SQLite's staging table shared and moved.

A plain dict with exactly the table's columns becomes its row in one call;
any other record (fewer columns, another mapping, a DataFrame row, a
tombstone) takes the long way.  Both must give the same rows, the same
errors and, in upsert mode, fold by the same key.  SQLite stages each epoch
in one table per target table, shared by every sink id writing that table.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from rivermark import Job, Stream
from rivermark.checkpoint.errors import JobFailedError
from rivermark.sinks.sql import ToSQL, delete

COLS = {"id": "INTEGER", "k": "TEXT", "v": "INTEGER"}
TOTALS = {"k": "TEXT", "v": "INTEGER", "w": "INTEGER"}


def _rows(db: Path, sql: str = "SELECT id, k, v FROM out ORDER BY id") -> list[tuple[Any, ...]]:
    c = sqlite3.connect(db)
    try:
        return list(c.execute(sql))
    finally:
        c.close()


def _run(db: Path, records: list[Any], ckpt: Path, **kwargs: Any) -> None:
    src = Stream.from_iterable(records)
    src.to_sql(f"sqlite:///{db}", "out", create=True, **kwargs)
    Job(src, checkpoint=str(ckpt), every_batches=3).run()


def test_a_record_with_the_tables_number_of_columns_but_one_it_lacks_is_named(
    tmp_path: Path,
) -> None:
    db = tmp_path / "out.db"
    good = {"id": 0, "k": "a", "v": 1}
    bad = {"id": 1, "k": "a", "colour": "red"}  # three keys, as the table has columns
    with pytest.raises(
        JobFailedError,
        match=re.escape(
            f"to_sql sink 'out' (table 'out'): record {bad!r} has column(s) ['colour'] that the "
            "table does not have (its columns: ['id', 'k', 'v'])"
        ),
    ):
        _run(db, [good, bad], tmp_path / "ckpt", columns=COLS)
    assert _rows(db) == []


def test_records_of_both_ways_give_the_same_rows(tmp_path: Path) -> None:
    db = tmp_path / "out.db"

    class Record(Mapping[str, Any]):
        """A mapping that is not a dict: it takes the long way."""

        def __init__(self, **d: Any) -> None:
            self.d = d

        def __getitem__(self, k: str) -> Any:
            return self.d[k]

        def __iter__(self) -> Any:
            return iter(self.d)

        def __len__(self) -> int:
            return len(self.d)

    records: list[Any] = [
        {"id": 1, "k": "a", "v": 10},
        {"id": 2, "k": "b"},  # a column left out: NULL
        Record(id=3, k="c", v=30),
        {"v": 40, "id": 4, "k": "d"},  # another key order: the table's order all the same
    ]
    _run(db, records, tmp_path / "ckpt", columns=COLS)
    assert _rows(db) == [(1, "a", 10), (2, "b", None), (3, "c", 30), (4, "d", 40)]


def test_upsert_folds_both_ways_by_one_key(tmp_path: Path) -> None:
    db = tmp_path / "out.db"
    records: list[Any] = [
        {"k": "a", "v": 1, "w": 1},
        {"k": "a", "v": 2},  # the long way, the same key: replaces the row above
        {"k": "b", "v": 3, "w": 3},
        delete(k="b"),  # the tombstone's key must meet the row's in the same epoch
        {"k": "c", "v": 5},
        {"w": 6, "k": "c", "v": 6},
    ]
    # one epoch for all: every_batches is larger than the input
    src = Stream.from_iterable(records)
    src.to_sql(f"sqlite:///{db}", "out", mode="upsert", key=["k"], columns=TOTALS, create=True)
    Job(src, checkpoint=str(tmp_path / "ckpt"), every_batches=100).run()
    assert _rows(db, "SELECT k, v, w FROM out ORDER BY k") == [("a", 2, None), ("c", 6, 6)]


def test_upsert_by_two_key_columns_folds_both_ways(tmp_path: Path) -> None:
    db = tmp_path / "out.db"
    records: list[Any] = [
        {"k": "a", "v": 1, "w": 1},
        {"k": "a", "v": 2, "w": 1},  # the same key (a, 2): replaces the row above
        {"k": "a", "v": 2},  # the long way: key (a, 2) again, w NULL
        {"k": "b", "v": 3, "w": 3},
        delete(k="b", v=3),
        {"k": "b", "v": 4, "w": 4},
    ]
    src = Stream.from_iterable(records)
    src.to_sql(f"sqlite:///{db}", "out", mode="upsert", key=["k", "v"], columns=TOTALS, create=True)  # fmt: skip
    Job(src, checkpoint=str(tmp_path / "ckpt"), every_batches=100).run()
    assert _rows(db, "SELECT k, v, w FROM out ORDER BY k, v") == [
        ("a", 1, 1),
        ("a", 2, None),
        ("b", 4, 4),
    ]


def test_two_sink_ids_stage_in_one_table_and_every_row_lands_once(tmp_path: Path) -> None:
    db = tmp_path / "out.db"
    n = 40
    src = Stream.from_iterable(range(n))
    rec = src.map(lambda i: {"id": i, "k": "x", "v": i})
    url = f"sqlite:///{db}"
    rec.filter(lambda r: r["id"] % 2 == 0).to_sql(url, "out", columns=COLS, create=True, sink_id="even")  # fmt: skip
    rec.filter(lambda r: r["id"] % 2 == 1).to_sql(url, "out", columns=COLS, create=True, sink_id="odd")  # fmt: skip
    Job(src, checkpoint=str(tmp_path / "ckpt"), every_batches=7).run()
    assert _rows(db) == [(i, "x", i) for i in range(n)]
    assert _rows(db, "SELECT count(*) FROM _rivermark_stage_out") == [(0,)]


@pytest.mark.parametrize("sink_id", ["it's", "a\x00b"])
def test_a_sink_id_with_a_quote_or_a_nul_stages_and_moves_its_rows(
    sink_id: str, tmp_path: Path
) -> None:
    db = tmp_path / "out.db"
    records = [{"id": i, "k": "a", "v": i} for i in range(10)]
    _run(db, records, tmp_path / "ckpt", columns=COLS, sink_id=sink_id)
    assert _rows(db) == [(i, "a", i) for i in range(10)]
    assert _rows(db, "SELECT sink_id FROM _rivermark_epochs") == [(sink_id,)]


def test_epochs_staged_before_one_commit_land_in_their_order(tmp_path: Path) -> None:
    db = tmp_path / "out.db"
    node = Stream().to_sql(
        f"sqlite:///{db}", "out", mode="upsert", key=["k"], columns=TOTALS, create=True
    )
    assert isinstance(node, ToSQL)
    try:
        node.restore(None)
        node.update({"k": "a", "v": 1, "w": 1})
        node.update({"k": "b", "v": 1, "w": 1})
        node.pre_commit(1)
        node.update({"k": "a", "v": 2, "w": 2})
        node.update(delete(k="b"))
        handle = node.pre_commit(2)
        node.commit(2, handle)  # moves epoch 1, then epoch 2
    finally:
        node.close()
    assert _rows(db, "SELECT k, v, w FROM out ORDER BY k") == [("a", 2, 2)]
    assert _rows(db, "SELECT sink_id, epoch FROM _rivermark_epochs") == [("out", 2)]
    assert _rows(db, "SELECT count(*) FROM _rivermark_stage_out") == [(0,)]
