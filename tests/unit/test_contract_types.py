"""The connector contracts carry their types, and the types say what the values are.

``Source[P]`` names a source's position type, ``CheckpointedSink[H]`` a
sink's handle type; these tests hold the declared types to what the real
sources and sinks return, so that a new field in a position or a handle is
declared where the type checker sees it.
"""

from __future__ import annotations

import sqlite3
import typing
from pathlib import Path

from rivermark import Job, Stream
from rivermark.checkpoint.tools.inspection import read
from rivermark.sinks.base import CheckpointedSink, EpochSealingSink, StartOverSink
from rivermark.sinks.sql import SQLHandle, ToSQL
from rivermark.sinks.textfile import FileHandle, SinkToTextfile
from rivermark.sources.base import Source
from rivermark.sources.files import Filenames
from rivermark.sources.iterable import FromIterable
from rivermark.sources.textfile import FilePosition, FromTextfile


def _position_type(cls: type) -> object:
    (base,) = (b for b in cls.__orig_bases__ if typing.get_origin(b) is Source)  # type: ignore[attr-defined]
    (arg,) = typing.get_args(base)
    return arg


def test_each_source_names_the_type_of_its_position(tmp_path: Path) -> None:
    assert _position_type(FromIterable) is int
    assert _position_type(Filenames) == list[str]
    assert _position_type(FromTextfile) == int | FilePosition
    data = tmp_path / "in.txt"
    data.write_text("a\nb\n")
    source = Stream.from_textfile(str(data), stop_at_eof=True, name="lines")
    numbers = Stream.from_iterable([1, 2], name="numbers")
    for i, s in enumerate((source, numbers)):
        s.sink_to_list()
        Job(s, checkpoint=tmp_path / f"ck{i}", every=None).run()
    assert numbers.position() == 2
    names = Stream.filenames(str(tmp_path / "*.csv"), name="names")  # never ends: not run
    names.seek(["b.csv", "a.csv"])
    assert names.position() == ["a.csv", "b.csv"]
    position = source.position()
    assert isinstance(position, dict)
    assert set(position) <= set(FilePosition.__annotations__)
    assert {"offset", "tail_sha256"} <= set(position)


def test_each_checkpointed_sink_returns_the_handle_its_type_declares(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "db.sqlite") as db:
        db.execute("create table rows (id integer)")
    source = Stream.from_iterable([{"id": 1}, {"id": 2}], name="rows")
    text = source.map(str).sink_to_textfile(str(tmp_path / "out.txt"), name="text")
    table = source.to_sql(f"sqlite:///{tmp_path / 'db.sqlite'}", "rows", name="table")
    assert isinstance(text, SinkToTextfile) and isinstance(table, ToSQL)
    for sink in (text, table):
        assert isinstance(sink, CheckpointedSink)
        assert isinstance(sink, StartOverSink)
    assert isinstance(text, EpochSealingSink)
    Job(source, checkpoint=tmp_path / "ck", every=None).run()
    handles = read(tmp_path / "ck", as_pandas=False).sinks
    assert set(handles["text"]) <= set(FileHandle.__annotations__)
    assert {"path", "length"} <= set(handles["text"])
    assert set(handles["table"]) == set(SQLHandle.__annotations__)
    with sqlite3.connect(tmp_path / "db.sqlite") as db:
        assert db.execute("select count(*) from rows").fetchone() == (2,)
