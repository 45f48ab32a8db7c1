"""The checkpoint store and the file sinks open object storage through one function."""

from __future__ import annotations

import re

import pytest
import s3fs

from rivermark.checkpoint.stores.filesystems import open_filesystem, s3_defaults, s3_options
from rivermark.checkpoint.stores.objectstore import ObjectStore
from rivermark.errors import ConfigurationError
from rivermark.lake.files import Location

ENDPOINT = {"endpoint_url": "http://127.0.0.1:9", "key": "k", "secret": "s"}


def _settings(fs: object) -> tuple[object, ...]:
    assert isinstance(fs, s3fs.S3FileSystem)
    return (fs.config_kwargs, fs.retries, fs.client_kwargs, fs.key, fs.secret)


def test_the_store_and_a_sink_open_s3_with_the_same_client_settings() -> None:
    store = ObjectStore("s3://bucket/ckpt", storage_options=ENDPOINT, lease=False)
    sink = Location("s3://bucket/out", ENDPOINT, "to_parquet sink 'rows'", timeout=30.0)
    assert _settings(store.fs) == _settings(sink.fs)
    assert store.fs.config_kwargs == s3_defaults()["config_kwargs"]
    assert store.fs.retries == 2  # not s3fs's 5 on top of botocore's 3 attempts
    assert (store.root, sink.root) == ("bucket/ckpt", "bucket/out")


def test_a_sinks_timeout_bounds_its_client_and_the_users_options_win() -> None:
    sink = Location("s3://bucket/out", ENDPOINT, "to_delta sink 'rows'", timeout=2.0)
    assert sink.fs.config_kwargs["read_timeout"] == 2.0
    assert sink.fs.config_kwargs["connect_timeout"] == 2.0
    mine = {"connect_timeout": 1, "read_timeout": 1}
    opts = s3_options("s3", {**ENDPOINT, "config_kwargs": mine}, 2.0)
    assert opts["config_kwargs"] == mine and opts["use_listings_cache"] is False


def test_an_unknown_scheme_is_one_line_naming_the_package_for_both() -> None:
    remedy = "install the filesystem package (s3fs for s3://, gcsfs for gs://"
    with pytest.raises(ConfigurationError, match=re.escape(remedy)):
        ObjectStore("nosuchfs://bucket/prefix")
    with pytest.raises(
        ConfigurationError,
        match=re.escape("to_parquet sink 'x': 'nosuchfs://b/p': fsspec cannot open 'nosuchfs'"),
    ):
        Location("nosuchfs://b/p", None, "to_parquet sink 'x'")
    with pytest.raises(ConfigurationError, match=re.escape(remedy)):
        open_filesystem("nosuchfs://b/p", {}, "who")
