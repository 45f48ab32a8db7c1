"""``to_parquet`` and ``to_delta``: layout, rolling, readers, bad input, locks and --from-scratch.

Every test writes real files (a local directory, or a bucket of a real S3
server where it says so) and reads them back with pyarrow, deltalake or DuckDB.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from rivermark import Job, Stream
from rivermark.checkpoint.errors import JobFailedError, UnaccountedOutputError
from rivermark.errors import ConfigurationError, RivermarkError
from rivermark.lake.delta import ToDelta
from rivermark.lake.files import LakeSinkError, RecordSchemaError
from rivermark.lake.parquet import ToParquet
from rivermark.testing.s3_server import S3Server

from .lakeread import parquet_rows

RECS = [{"id": i, "k": f"k{i % 37}", "v": i, "g": i % 3} for i in range(100)]


def _parquet_job(url: str, records: list[Any], ckpt: Path, from_scratch: bool = False, **kw: Any) -> Job:  # fmt: skip
    src = Stream.from_iterable(records)
    src.to_parquet(url, **kw)
    return Job(src, checkpoint=str(ckpt), from_scratch=from_scratch)


def _delta_job(url: str, records: list[Any], ckpt: Path, from_scratch: bool = False, **kw: Any) -> Job:  # fmt: skip
    src = Stream.from_iterable(records)
    src.to_delta(url, **kw)
    return Job(src, checkpoint=str(ckpt), from_scratch=from_scratch)


def _delta(url: str) -> list[tuple[Any, ...]]:
    t = DeltaTable(url).to_pyarrow_table()
    cols = [c for c in ("id", "k", "v", "g") if c in t.column_names]
    return sorted(zip(*(t.column(c).to_pylist() for c in cols)))


# ---------------------------------------------------------------- Parquet
def test_parquet_files_are_hive_partitioned_rolled_by_rows_and_named_per_epoch(tmp_path: Path) -> None:  # fmt: skip
    out = tmp_path / "out"
    _parquet_job(str(out), RECS, tmp_path / "c", partition_by=["g"], roll_rows=10, batch_rows=5, name="r").run()  # fmt: skip
    assert parquet_rows(str(out), None) == sorted((r["id"], r["k"], r["v"], r["g"]) for r in RECS)
    assert sorted(os.listdir(out)) == ["_rivermark", "g=0", "g=1", "g=2"]
    files = sorted(os.listdir(out / "g=0"))
    # 34 rows in g=0, files rolled at 10 rows: 4 files, the partition column not in them
    assert len(files) == 4 and all(re.fullmatch(r"part-[0-9a-f]{12}-\d{12}-\d{5}\.parquet", f) for f in files)  # fmt: skip
    assert [pq.read_metadata(out / "g=0" / f).num_rows for f in files] == [10, 10, 10, 4]
    assert pq.read_schema(out / "g=0" / files[0]).names == ["id", "k", "v"]
    # nothing left in progress after the job
    assert os.listdir(out / "_rivermark" / os.listdir(out / "_rivermark")[0] / "inprogress") == []


@pytest.mark.parametrize("batch_rows", [50_000, 7])
def test_parquet_a_file_never_holds_more_than_roll_rows(tmp_path: Path, batch_rows: int) -> None:
    out = tmp_path / "out"
    # one epoch: the buffer (batch_rows, or the default far above roll_rows) does not decide
    _parquet_job(str(out), RECS[:25], tmp_path / "c", roll_rows=10, batch_rows=batch_rows, name="r").run()  # fmt: skip
    assert sorted(pq.read_metadata(f).num_rows for f in out.glob("*.parquet")) == [5, 10, 10]
    assert sorted(parquet_rows(str(out), None)) == sorted((r["id"], r["k"], r["v"], r["g"]) for r in RECS[:25])  # fmt: skip


def test_parquet_in_progress_files_are_skipped_by_readers_until_commit(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = ToParquet(Stream(), str(out), partition_by=["g"], batch_rows=1, name="r")
    sink.restore(None)
    try:
        for r in RECS[:30]:
            sink.update(r)
        handle = sink.pre_commit(1)
        inprogress = [f for f in out.rglob("*") if f.is_file() and "inprogress" in f.parts]
        assert len(inprogress) == 3  # one per partition, durable, not yet published
        # pyarrow (and pandas) skip names starting with "_"; DuckDB's glob matches only *.parquet
        assert parquet_rows(str(out), None) == []
        assert duckdb.sql(f"SELECT count(*) FROM glob('{out}/**/*.parquet')").fetchall() == [(0,)]
        sink.commit(1, handle)
        assert len(parquet_rows(str(out), None)) == 30
        n = duckdb.sql(f"SELECT count(*) FROM read_parquet('{out}/**/*.parquet', hive_partitioning=true)").fetchall()  # fmt: skip
        assert n == [(30,)]
    finally:
        sink.close()


def test_parquet_on_s3_publishes_with_put_then_delete(s3_server: S3Server, s3_env: dict[str, str], tmp_path: Path) -> None:  # fmt: skip
    url = f"s3://{s3_server.new_bucket()}/data"
    sink = ToParquet(Stream(), url, name="r")
    sink.restore(None)
    try:
        for r in RECS:
            sink.update(r)
        handle = sink.pre_commit(1)
        fs = s3_server.filesystem()
        assert parquet_rows(url, s3_server) == []
        (src, dst), = handle["pending"][0]["files"]  # fmt: skip
        assert fs.exists(f"{url[5:]}/{src}") and not fs.exists(f"{url[5:]}/{dst}")
        sink.commit(1, handle)
        fs.invalidate_cache()
        assert not fs.exists(f"{url[5:]}/{src}") and fs.exists(f"{url[5:]}/{dst}")
        assert len(parquet_rows(url, s3_server)) == 100
        sink.commit(1, handle)  # again: already published, nothing to do
    finally:
        sink.close()


def test_parquet_dataframe_batches_are_written_partitioned(tmp_path: Path) -> None:
    out = tmp_path / "out"
    frames = [pd.DataFrame(RECS[:50]), pd.DataFrame(RECS[50:])]
    _parquet_job(str(out), frames, tmp_path / "c", partition_by=["g"], name="f").run()
    assert parquet_rows(str(out), None) == sorted((r["id"], r["k"], r["v"], r["g"]) for r in RECS)


def test_parquet_a_record_that_does_not_fit_the_schema_goes_through_the_error_policy(tmp_path: Path) -> None:  # fmt: skip
    out = tmp_path / "out"
    bad = [*RECS[:5], {"id": "five", "k": "x", "v": 5, "g": 0}, *RECS[6:10]]
    job = _parquet_job(str(out), bad, tmp_path / "a", name="r")
    with pytest.raises(RecordSchemaError, match=re.escape("to_parquet sink 'r': record does not fit the schema (")) as e:  # fmt: skip
        job.run()
    assert "\n" not in str(e.value) and "on_error='skip'" in str(e.value)
    assert parquet_rows(str(out), None) == []  # nothing of the failed epoch is visible
    _parquet_job(str(out), bad, tmp_path / "b", from_scratch=True, name="r", on_error="skip").run()
    assert [r[0] for r in parquet_rows(str(out), None)] == [0, 1, 2, 3, 4, 6, 7, 8, 9]


# a record as wide as the schema with another column in place of one (so that
# column is missing), a wider one, a narrower one (null there) and None values
ODD = [
    *RECS[:3],
    {"id": 3, "k": "x", "v": 3, "zz": 0},
    {"id": 4, "k": "x", "v": 4, "g": 1, "zz": 0},
    {"id": 5, "k": "x", "v": 5},
    {"id": 6, "k": None, "v": None, "g": None},
    *RECS[7:10],
]


@pytest.mark.parametrize("kind", ["parquet", "delta"])
def test_a_record_with_a_column_the_schema_lacks_goes_through_the_error_policy(tmp_path: Path, kind: str) -> None:  # fmt: skip
    out = str(tmp_path / "out")
    make, label = (_parquet_job, "to_parquet sink 'r'") if kind == "parquet" else (_delta_job, "to_delta sink 'r'")  # fmt: skip
    seen: list[tuple[Any, str]] = []
    make(out, ODD, tmp_path / "a", name="r", batch_rows=4, on_error=lambda x, e: seen.append((x, str(e)))).run()  # fmt: skip
    cols = "['id', 'k', 'v', 'g']"
    why = f"{label}: record has column(s) ['zz'] that the schema does not have (its columns: {cols}); pass schema= with them"  # fmt: skip
    assert seen == [(ODD[3], why), (ODD[4], why)]
    rows = parquet_rows(out, None) if kind == "parquet" else _delta(out)
    want = [(0, "k0", 0, 0), (1, "k1", 1, 1), (2, "k2", 2, 2), (5, "x", 5, None), (6, None, None, None), (7, "k7", 7, 1), (8, "k8", 8, 2), (9, "k9", 9, 0)]  # fmt: skip
    assert sorted(rows, key=lambda r: r[0]) == want
    # the default policy: the job stops at that record, naming it
    with pytest.raises(JobFailedError, match=re.escape(f"{label}: record has column(s) ['zz'] that the schema does not have (its columns: {cols}); pass schema= with them on record {ODD[3]!r}")):  # fmt: skip
        make(str(tmp_path / "out2"), ODD, tmp_path / "b", name="r", batch_rows=4).run()


@pytest.mark.parametrize("kind", ["parquet", "delta"])
def test_a_record_that_does_not_fit_is_refused_naming_the_column(tmp_path: Path, kind: str) -> None:  # fmt: skip
    make, label = (_parquet_job, "to_parquet sink 'r': record does not fit the schema") if kind == "parquet" else (_delta_job, "to_delta sink 'r': record does not fit the table's schema")  # fmt: skip
    seen: list[str] = []
    recs = [{"id": 1, "name": "a", "qty": 1}, {"id": 2, "name": "b", "qty": "three"}]
    make(str(tmp_path / "a"), recs, tmp_path / "ca", name="r", on_error=lambda x, e: seen.append(str(e))).run()  # fmt: skip
    assert seen == [f"{label} (column 'qty' of type int64 cannot take 'three': ArrowInvalid: Could not convert 'three' with type str: tried to convert to int64); fix the input, pass schema= with the right types, or set on_error='skip' or on_error=callable on this node"]  # fmt: skip
    # a column None in the first record: typed null, which no other value fits
    seen.clear()
    recs = [{"id": 1, "name": None}, {"id": 2, "name": "x"}]
    make(str(tmp_path / "b"), recs, tmp_path / "cb", name="r", on_error=lambda x, e: seen.append(str(e))).run()  # fmt: skip
    assert len(seen) == 1 and seen[0].startswith(f"{label} (column 'name' has type null, derived from a record where it was None, and cannot take 'x'); pass example= or schema= that gives it a type")  # fmt: skip


def test_parquet_a_batch_that_does_not_fit_is_refused_whole(tmp_path: Path) -> None:
    out = tmp_path / "out"
    frames = [pd.DataFrame(RECS[:5]), pd.DataFrame({"id": ["x"], "k": ["a"], "v": [1], "g": [0]})]
    seen: list[Any] = []
    _parquet_job(str(out), frames, tmp_path / "a", name="r", on_error=lambda x, e: seen.append(e)).run()  # fmt: skip
    assert len(parquet_rows(str(out), None)) == 5
    assert len(seen) == 1 and str(seen[0]).startswith("to_parquet sink 'r': DataFrame batch does not fit the schema (")  # fmt: skip


def test_parquet_schema_from_an_example_and_a_missing_partition_column(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=re.escape("to_parquet sink 'r': partition_by column(s) ['day'] are not in the schema (its columns: ['id'])")):  # fmt: skip
        Stream().to_parquet(str(tmp_path), partition_by=["day"], example={"id": 1}, name="r")
    out = tmp_path / "out"
    _parquet_job(str(out), [{"id": 1}], tmp_path / "c", schema=pa.schema([("id", pa.int32()), ("note", pa.string())]), name="r").run()  # fmt: skip
    assert pq.read_table(out).schema.names == ["id", "note"]
    assert pq.read_table(out).schema.field("id").type == pa.int32()


@pytest.mark.parametrize("where", ["local", "s3"])
def test_parquet_a_second_job_through_the_same_sink_id_is_refused(where: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:  # fmt: skip
    if where == "local":
        url = str(tmp_path / "out")
    else:
        request.getfixturevalue("s3_env")
        url = f"s3://{request.getfixturevalue('s3_server').new_bucket()}/out"
    first = ToParquet(Stream(), url, name="r")
    first.restore(None)
    try:
        with pytest.raises(LakeSinkError, match=re.escape("to_parquet sink 'r': another job writes through this sink id into")) as e:  # fmt: skip
            _parquet_job(url, RECS, tmp_path / "c", name="r").run()
        assert "Stop that job first, or give this sink another name" in str(e.value)
    finally:
        first.close()
    _parquet_job(url, RECS[:3], tmp_path / "d", name="other").run()  # another sink id: allowed


def test_parquet_earlier_output_is_refused_and_from_scratch_deletes_only_the_sinks_files(tmp_path: Path) -> None:  # fmt: skip
    out = tmp_path / "out"
    _parquet_job(str(out), RECS, tmp_path / "one", name="r").run()
    pq.write_table(pa.table({"id": [1000], "k": ["z"], "v": [0], "g": [0]}), out / "theirs.parquet")
    with pytest.raises(UnaccountedOutputError, match=re.escape("to_parquet sink 'r':")):
        _parquet_job(str(out), RECS, tmp_path / "two", name="r").run()
    _parquet_job(str(out), RECS[:10], tmp_path / "two", from_scratch=True, name="r").run()
    ids = sorted(pq.read_table(out).column("id").to_pylist())
    assert ids == [*range(10), 1000]


def test_parquet_restore_publishes_a_pending_epoch_and_drops_later_in_progress_files(tmp_path: Path) -> None:  # fmt: skip
    out = tmp_path / "out"
    a = ToParquet(Stream(), str(out), name="r", batch_rows=1)
    a.restore(None)
    for r in RECS[:10]:
        a.update(r)
    handle = a.pre_commit(1)  # the checkpoint is durable, then a crash before commit
    for r in RECS[10:20]:
        a.update(r)  # epoch 2, in progress
    a.pre_commit(2)
    a.close()
    b = ToParquet(Stream(), str(out), name="r")
    b.restore(handle)
    b.close()
    assert [r[0] for r in parquet_rows(str(out), None)] == list(range(10))
    assert list((out / "_rivermark").rglob("*.inprogress")) == []


# ---------------------------------------------------------------- Delta
def test_delta_each_epoch_is_one_commit_with_the_sinks_transaction_version(tmp_path: Path) -> None:  # fmt: skip
    url = str(tmp_path / "t")
    sink = ToDelta(Stream(), url, name="d", example=RECS[0])
    sink.restore(None)
    try:
        for e in (1, 2):
            for r in RECS[(e - 1) * 10 : e * 10]:
                sink.update(r)
            handle = sink.pre_commit(e)
            assert _delta(url) == sorted((r["id"], r["k"], r["v"], r["g"]) for r in RECS[: (e - 1) * 10])  # fmt: skip
            sink.commit(e, handle)
        dt = DeltaTable(url)
        assert dt.transaction_version("rivermark:d") == 2
        assert dt.version() == 2  # created, then one commit per epoch
    finally:
        sink.close()
    # a replayed commit (a crash after the Delta commit, before the sink knew) is skipped
    again = ToDelta(Stream(), url, name="d", example=RECS[0])
    again.restore({"sink": "d", "epoch": 2, "pending": [handle["pending"][-1]]})
    again.close()
    assert DeltaTable(url).version() == 2 and len(_delta(url)) == 20


def test_delta_partition_values_that_need_escaping_are_read_back(tmp_path: Path) -> None:
    import json

    from deltalake import write_deltalake

    def log_dirs(url: str) -> dict[str, str]:  # partition value -> the directory its add names
        out = {}
        for f in sorted((Path(url) / "_delta_log").glob("*.json")):
            for line in f.read_text().splitlines():
                add = json.loads(line).get("add")
                if add:
                    out[add["partitionValues"]["city"]] = add["path"].rsplit("/", 1)[0]
        return out

    cities = ["New York", "a/b", "x=y", "50%", "Zürich", "sp ace%20", "plain"]
    recs = [{"id": i, "city": c} for i, c in enumerate(cities)]
    url, ref = str(tmp_path / "t"), str(tmp_path / "ref")
    _delta_job(url, recs, tmp_path / "c", partition_by=["city"], name="p").run()
    write_deltalake(ref, pa.Table.from_pylist(recs), partition_by=["city"])
    assert log_dirs(url) == log_dirs(ref)  # the paths deltalake itself writes
    rows = DeltaTable(url).to_pyarrow_table().to_pylist()
    assert sorted(rows, key=lambda r: r["id"]) == recs


def test_delta_merge_dataframes_and_tombstones(tmp_path: Path) -> None:
    from rivermark.sinks.sql import delete

    url = str(tmp_path / "t")
    recs: list[Any] = [pd.DataFrame({"k": ["a", "b"], "n": [1, 2]}), {"k": "a", "n": 3}, delete(k="b"), pd.DataFrame({"k": ["c"], "n": [5]})]  # fmt: skip
    _delta_job(url, recs, tmp_path / "c", mode="merge", key=["k"], name="m").run()
    assert sorted(DeltaTable(url).to_pyarrow_table().to_pylist(), key=str) == [{"k": "a", "n": 3}, {"k": "c", "n": 5}]  # fmt: skip


def test_delta_a_record_that_does_not_fit_goes_through_the_error_policy(tmp_path: Path) -> None:
    url = str(tmp_path / "t")
    bad = [*RECS[:5], {"id": "five", "k": "x", "v": 5, "g": 0}]
    with pytest.raises(RecordSchemaError, match=re.escape("to_delta sink 'd': record does not fit the table's schema (")):  # fmt: skip
        _delta_job(url, bad, tmp_path / "a", name="d").run()
    _delta_job(url, bad, tmp_path / "b", name="d", on_error="skip").run()
    assert [r[0] for r in _delta(url)] == [0, 1, 2, 3, 4]


def test_delta_merge_into_an_existing_table_refuses_records_that_do_not_fit_its_schema(tmp_path: Path) -> None:  # fmt: skip
    from deltalake import write_deltalake

    url = str(tmp_path / "t")
    write_deltalake(url, pa.table({"k": ["a"], "v": ["x"]}))
    recs = [{"k": "b", "v": 2}, {"k": "c", "v": "z"}]  # v is a string column in the table
    with pytest.raises(RecordSchemaError, match=re.escape("to_delta sink 'm': record does not fit the table's schema (")):  # fmt: skip
        _delta_job(url, recs, tmp_path / "a", mode="merge", key=["k"], name="m").run()
    assert DeltaTable(url).version() == 0  # refused before any commit
    _delta_job(url, recs, tmp_path / "b", mode="merge", key=["k"], name="m", on_error="skip").run()  # fmt: skip
    assert sorted(DeltaTable(url).to_pyarrow_table().to_pylist(), key=str) == [{"k": "a", "v": "x"}, {"k": "c", "v": "z"}]  # fmt: skip


@pytest.mark.parametrize("table_v", [[1], ["x"]], ids=["int-table", "string-table"])
def test_delta_append_to_an_existing_table_refuses_records_that_do_not_fit_its_schema(tmp_path: Path, table_v: list[Any]) -> None:  # fmt: skip
    from deltalake import write_deltalake

    url = str(tmp_path / "t")
    write_deltalake(url, pa.table({"k": ["a"], "v": table_v}))
    other = "s5" if isinstance(table_v[0], int) else 5  # a value of the other type
    # the first record's types are not the table's: the table's decide
    recs = [{"k": "c", "v": other}, {"k": "b", "v": table_v[0]}, {"k": "d", "v": table_v[0], "w": 1}]  # fmt: skip
    with pytest.raises(RivermarkError, match=re.escape("to_delta sink 'a': record does not fit")):
        _delta_job(url, recs[:2], tmp_path / "a", name="a").run()
    assert DeltaTable(url).version() == 0  # refused before any commit
    _delta_job(url, recs, tmp_path / "b", name="a", on_error="skip").run()
    # the table stays readable, with its types: only the record that fits was added
    rows = DeltaTable(url).to_pyarrow_table().to_pylist()
    assert sorted(rows, key=str) == [{"k": "a", "v": table_v[0]}, {"k": "b", "v": table_v[0]}]


def test_delta_merge_of_staged_rows_that_do_not_fit_the_table_is_refused_in_one_line(tmp_path: Path) -> None:  # fmt: skip
    from deltalake import write_deltalake

    url = str(tmp_path / "t")
    write_deltalake(url, pa.table({"k": ["a"], "v": ["x"]}))
    sink = ToDelta(Stream(), url, mode="merge", key=["k"], name="m")
    # an epoch staged with other types than the table's (the table changed since)
    stage = f"{sink.home}/stage/epoch-000000000002.parquet"
    os.makedirs(os.path.dirname(os.path.join(url, stage)))
    pq.write_table(pa.table({"k": [1], "v": [2], "_rm_delete": [False]}), os.path.join(url, stage))
    handle = {"sink": "m", "epoch": 2, "pending": [{"epoch": 2, "stage": stage}]}
    try:
        with pytest.raises(LakeSinkError, match=re.escape("to_delta sink 'm': the rows staged for epoch 2 do not fit the table's schema in column(s) 'k' (int64, the table's string), 'v' (int64, the table's string) and cannot be merged (")):  # fmt: skip
            sink.restore(handle)
    finally:
        sink.close()


def test_delta_earlier_output_is_refused_and_from_scratch_empties_the_table(tmp_path: Path) -> None:  # fmt: skip
    url = str(tmp_path / "t")
    _delta_job(url, RECS, tmp_path / "one", name="d").run()
    with pytest.raises(UnaccountedOutputError, match=re.escape("to_delta sink 'd': the table")):
        _delta_job(url, RECS, tmp_path / "two", name="d").run()
    _delta_job(url, RECS[:10], tmp_path / "two", from_scratch=True, name="d").run()
    assert [r[0] for r in _delta(url)] == list(range(10))


def test_delta_a_second_job_through_the_same_sink_id_is_refused(tmp_path: Path) -> None:
    url = str(tmp_path / "t")
    first = ToDelta(Stream(), url, name="d")
    first.restore(None)
    try:
        with pytest.raises(LakeSinkError, match=re.escape("to_delta sink 'd': another job writes through this sink id")):  # fmt: skip
            _delta_job(url, RECS, tmp_path / "c", name="d").run()
    finally:
        first.close()


def test_delta_merge_needs_a_key() -> None:
    with pytest.raises(ConfigurationError, match=re.escape("to_delta: mode='merge' needs key=[...]")):  # fmt: skip
        Stream().to_delta("t", mode="merge")


@pytest.mark.parametrize("api", ["to_parquet", "to_delta"])
def test_a_url_the_sinks_cannot_write_to_is_refused_at_construction(api: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(f"{api}: cannot write to 'ftp://localhost/x': a file sink writes to a local directory, file://... or s3://bucket/prefix (where it can hold its lock), not to ftp://; write to one of those")):  # fmt: skip
        getattr(Stream(), api)("ftp://user:secret@localhost/x?token=t", name="f")
    with pytest.raises(ConfigurationError, match=re.escape(f"{api}: url 's3:/bucket/x' starts with 's3:', a mistyped scheme: write s3://... (two slashes), or ./s3:/bucket/x for a local directory of that name")):  # fmt: skip
        getattr(Stream(), api)("s3:/bucket/x", name="t")


def test_parquet_files_roll_by_size_and_by_age(tmp_path: Path) -> None:
    import time

    from rivermark.testing import wait_for

    by_size = tmp_path / "size"
    _parquet_job(str(by_size), RECS[:20], tmp_path / "a", roll_bytes=1, batch_rows=5, name="s").run()  # fmt: skip
    # every row group (5 records) passes one byte: a new file for each
    assert sorted(pq.read_metadata(f).num_rows for f in by_size.glob("*.parquet")) == [5, 5, 5, 5]
    by_age = tmp_path / "age"
    sink = ToParquet(Stream(), str(by_age), roll_seconds=0.05, batch_rows=1, name="t")
    sink.restore(None)
    try:
        sink.update(RECS[0])
        sink.update(RECS[1])  # the same file: younger than 0.05 s
        t0 = time.monotonic()
        wait_for(lambda: time.monotonic() - t0 > 0.1, timeout=5, what="the file to age")
        sink.update(RECS[2])  # the file is older than roll_seconds: a new one
        sink.commit(1, sink.pre_commit(1))
    finally:
        sink.close()
    assert sorted(pq.read_metadata(f).num_rows for f in by_age.glob("*.parquet")) == [1, 2]


def test_delta_a_tombstone_before_any_record_needs_a_schema(tmp_path: Path) -> None:
    from rivermark.sinks.sql import delete

    job = _delta_job(str(tmp_path / "t"), [delete(k="a")], tmp_path / "c", mode="merge", key=["k"], name="m")  # fmt: skip
    with pytest.raises(JobFailedError, match=re.escape("to_delta sink 'm': a tombstone Delete(key={'k': 'a'}) came before any record, so the table's schema is unknown; pass example={...}")):  # fmt: skip
        job.run()
    _delta_job(str(tmp_path / "t"), [delete(k="a"), {"k": "b", "n": 1}], tmp_path / "d", mode="merge", key=["k"], example={"k": "", "n": 0}, name="m").run()  # fmt: skip
    assert DeltaTable(str(tmp_path / "t")).to_pyarrow_table().to_pylist() == [{"k": "b", "n": 1}]
