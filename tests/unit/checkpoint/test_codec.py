"""The data encoding of state files: exact round trips, and nothing runs when read."""

from __future__ import annotations

import logging
import os
import pickle
import re
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pandas as pd
import pytest

from rivermark import KeyedState, Stream
from rivermark.checkpoint import Job, LocalDirectoryStore
from rivermark.checkpoint.errors import UntrustedStateError
from rivermark.checkpoint.state import codec
from rivermark.operators.stateful import no_default
from rivermark.state import DELETED

VALUES: list[Any] = [
    None, True, 0, -(2**63), 2**64, -(2**90), 1.5, float("inf"), 1 + 2j, "é", b"\x00",
    [1, [2]], (1, (2, "a")), {(1, "a"): {2}}, frozenset({(1, 2)}), set(), {"x": DELETED},
    no_default, KeyedState({1: (2, 3)}), np.int64(7), np.float32(1.5), np.dtype("<M8[ns]"),
]  # fmt: skip


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_builtin_values_round_trip_exactly_without_pickle(value: Any) -> None:
    blob = codec.dumps(value)
    assert not codec.has_pickle(blob)
    back = codec.loads(blob)
    assert back == value and type(back) is type(value)
    if isinstance(value, tuple):
        assert type(back[1]) is tuple


def _frames() -> list[Any]:
    times = pd.date_range("2026-01-01", periods=3, freq="s", name="t")
    multi = pd.MultiIndex.from_tuples([("a", 1), ("b", 2)], names=["k", "n"])
    return [
        np.arange(12, dtype="<i4").reshape(3, 4),
        np.array(["x", None, 3], dtype=object),
        pd.Series([1.0, 2.0, 3.0], index=times, name="v"),
        pd.Series([1, 2], index=pd.CategoricalIndex(["a", "b"], ordered=True)),
        pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}, index=multi),
        pd.DataFrame({"when": pd.to_datetime(["2026-01-01", "2026-01-02"])}),
        pd.CategoricalDtype(["a", "b"]),
        pd.Timestamp("2026-01-01 00:00:01.5"),
        pd.Timedelta("1.5s"),
        # extension dtypes on their own, as a frame's schema holds them
        pd.Series(["a"]).dtype,  # "str" with pandas 3, object before
        pd.StringDtype(),
        pd.Int64Dtype(),
        pd.BooleanDtype(),
        pd.DatetimeTZDtype("ns", "UTC"),
        pd.DataFrame({"k": ["a"], "n": pd.array([1], dtype="Int64")}).dtypes,
        # times with a time zone, categoricals and nullable columns, as windows hold them
        pd.Timestamp("2026-01-01 12:00:00.25", tz="Europe/Paris"),
        pd.Series(pd.to_datetime(["2026-01-01", None], utc=True).tz_convert("Asia/Tokyo")),
        pd.DataFrame(
            {
                "when": pd.to_datetime([1, 2], unit="ms", utc=True),
                "cat": pd.Categorical(["a", "b"], categories=["b", "a"], ordered=True),
                "n": pd.array([1, None], dtype="Int64"),
                "ok": pd.array([None, True], dtype="boolean"),
            },
            index=pd.DatetimeIndex(pd.to_datetime([5, 6], unit="s", utc=True), name="t"),
        ),
        pd.Series(["x", "y", "x"], dtype="category"),
    ]


@pytest.mark.parametrize("value", _frames(), ids=lambda v: type(v).__name__)
def test_numpy_and_pandas_values_round_trip_without_pickle(value: Any) -> None:
    blob = codec.dumps(value)
    assert not codec.has_pickle(blob)
    back = codec.loads(blob)
    assert type(back) is type(value)
    if isinstance(value, (pd.Series, pd.DataFrame)):
        assert value.equals(back) and value.index.equals(back.index)
        assert list(map(str, value.dtypes if hasattr(value, "columns") else [value.dtype])) == list(
            map(str, back.dtypes if hasattr(back, "columns") else [back.dtype])
        )
        assert getattr(value.index, "freq", None) == getattr(back.index, "freq", None)
    elif isinstance(value, np.ndarray):
        assert back.dtype == value.dtype and back.shape == value.shape
        assert (back == value).all()
    else:
        assert back == value
        assert getattr(back, "tz", None) == getattr(value, "tz", None)


class Marker:
    """An object of an app's own class: unpickling it creates a file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.path}",))


def test_a_pickled_part_is_refused_unless_allowed(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    blob = codec.dumps({"ok": 1, "user": Marker(marker)})
    assert codec.has_pickle(blob) and not marker.exists()
    with pytest.raises(UntrustedStateError, match="nope"):
        codec.loads(blob, what="nope")
    with pytest.raises(UntrustedStateError):
        codec.loads(pickle.dumps(Marker(marker)))  # an older rivermark's file: one pickle
    assert not marker.exists()
    codec.loads(blob, allow_pickle=True)
    assert marker.exists()


def test_a_class_name_in_the_file_is_never_looked_up(tmp_path: Path) -> None:
    part = msgpack.packb(["system", {"command": "true"}], use_bin_type=True)
    blob = codec.MAGIC + msgpack.packb(msgpack.ExtType(int(codec.Tag.DATACLASS), part))
    with pytest.raises(ValueError, match="not a data class of rivermark's state"):
        codec.loads(blob)
    with pytest.raises(ValueError, match="not a valid state file"):
        codec.loads(codec.MAGIC + b"\xc1")


def test_a_job_without_a_key_says_once_that_its_checkpoints_are_unsigned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = Stream.from_iterable(range(10))
    source.accumulate(lambda a, x: a + x, start=0, name="total").sink_to_list()
    with caplog.at_level(logging.INFO, logger="rivermark.checkpoint.protocol.job"):
        Job(source, checkpoint=tmp_path, every=None).run()
    unsigned = [r for r in caplog.records if "not signed" in r.getMessage()]
    assert len(unsigned) == 1
    store = LocalDirectoryStore(tmp_path)
    assert store.read_manifest(store.list_epochs()[-1]).signature is None


def test_a_dataframe_aggregation_over_string_keys_resumes_without_a_key(tmp_path: Path) -> None:
    # its state holds the frame's schema (dtypes): written as data, so an
    # unsigned, untrusted store restores it
    from rivermark.dataframe import DataFrame

    frames = [
        pd.DataFrame({"k": ["a", "b", "a"], "v": [1, 2, 3]}),
        pd.DataFrame({"k": ["c", "b"], "v": [4, 5]}),
    ]
    results = []
    for run in (1, 2):
        source = Stream.from_iterable(frames * run, name="frames")
        sums = DataFrame(source, example=frames[0]).groupby("k").v.sum()
        out = sums.stream.sink_to_list()
        Job(source, checkpoint=tmp_path, every=None).run()
        results.append(out[-1].to_dict())
    assert results == [{"a": 4, "b": 7, "c": 4}, {"a": 8, "b": 14, "c": 8}]
    store = LocalDirectoryStore(tmp_path)
    last = store.list_epochs()[-1]
    assert not any(
        codec.has_pickle(store.read_state(last, nid)) for nid in store.read_manifest(last).state
    )


def test_event_time_results_held_in_state_are_data() -> None:
    # a sink_to_list of window results keeps them in its state
    from rivermark.operators.eventtime import WindowResult

    held = {"L": [WindowResult(0.0, 10.0, "k", (1.5, 2), True), WindowResult(10.0, 20.0, None, 3)]}
    blob = codec.dumps(held)
    assert not codec.has_pickle(blob)
    back = codec.loads(blob)
    assert back == held and all(type(r) is WindowResult for r in back["L"])


def test_a_sql_tombstone_held_in_state_is_data() -> None:
    # an accumulator that returns to_sql's tombstone keeps it as its last output
    from rivermark.sinks.sql import delete

    held = ({"a": 3}, delete(k="a"))
    blob = codec.dumps(held)
    assert not codec.has_pickle(blob)
    assert codec.loads(blob) == held


def test_a_mapping_of_tuples_is_written_by_columns_and_reads_back_the_same() -> None:
    from rivermark.checkpoint.state.codec import Table
    from rivermark.state import DELETED

    windows = {(k % 7, float(k)): (float(k) + 10.0, k, (k, 1)) for k in range(200)}
    windows[(3, 5000.0)] = DELETED
    table = Table.of(windows)
    assert isinstance(table, Table)
    blob = codec.dumps({"keyed": {"open": table}})
    assert codec.loads(blob) == {"keyed": {"open": windows}}
    assert not codec.has_pickle(blob)
    # by columns, it is smaller than tuple by tuple
    assert len(blob) < len(codec.dumps({"keyed": {"open": windows}}))
    # other shapes stay dicts: short, keys of several lengths, values not tuples
    assert Table.of({(1, 2): (3,)}) == {(1, 2): (3,)}
    mixed = {**{(k, 0.0): (k,) for k in range(100)}, (1,): (2,)}
    assert Table.of(mixed) is mixed
    scalars = {(k, 0.0): k for k in range(100)}
    assert Table.of(scalars) is scalars


def test_a_process_reads_dataframe_state_before_importing_the_dataframe_layer(
    tmp_path: Path,
) -> None:
    # the codec imports no layer: the DataFrame layer registers its classes,
    # and the package's top level loads it when a name is not known yet
    import subprocess
    import sys

    from rivermark.dataframe.partials import KeyedAcc, Moments

    acc = KeyedAcc.from_partial([pd.Series([1, 2], index=["a", "b"], name="v")])
    blob = codec.dumps({"acc": acc, "m": Moments(3, 2.0, 2.0)})
    assert not codec.has_pickle(blob)
    (tmp_path / "state").write_bytes(blob)
    code = (
        "import sys\n"
        "from rivermark.checkpoint.state.codec import loads\n"
        "before = 'rivermark.dataframe' in sys.modules\n"
        f"v = loads(open({str(tmp_path / 'state')!r}, 'rb').read())\n"
        "print(before, type(v['acc']).__module__, v['acc'].keys.tolist(), tuple(v['m']))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == (
        "False rivermark.dataframe.partials ['a', 'b'] (3, 2.0, 2.0)"
    )


def test_two_state_classes_of_one_name_are_refused() -> None:
    from rivermark.operators.eventtime import WindowResult
    from rivermark.statedata import register_state_class, registered

    class WindowResult2:
        pass

    WindowResult2.__qualname__ = "WindowResult"
    with pytest.raises(ValueError, match=re.escape("'WindowResult' is registered already")):
        register_state_class(WindowResult2, ("start",))
    assert registered(WindowResult) == ("start", "end", "key", "value", "final")
    assert registered(WindowResult2) is None
