"""Checkpoints published as Dask datasets on a real LocalCluster."""

from __future__ import annotations

import re
import uuid

import pytest
from distributed import Client

from rivermark.dask.store import DaskDatasetStore
from rivermark.errors import ConfigurationError

pytestmark = pytest.mark.dask


def test_write_keeps_last_n_and_latest_is_newest(client: Client) -> None:
    prefix = f"job-{uuid.uuid4().hex}"
    store = DaskDatasetStore(client, prefix=prefix, keep=2)
    assert store.ids() == []
    assert store.latest() is None
    for i in (1, 2, 3):
        store.write(i, b"state %d" % i)
    assert store.ids() == [2, 3]
    assert store.latest() == (3, b"state 3")
    assert store.read(1) is None, "checkpoints beyond keep are deleted"
    # a second process (here: a second store object) sees the same checkpoints
    assert DaskDatasetStore(client, prefix=prefix).latest() == (3, b"state 3")


def test_missing_data_falls_back_to_older_checkpoint(client: Client) -> None:
    store = DaskDatasetStore(client, prefix=f"job-{uuid.uuid4().hex}", keep=3)
    store.write(1, b"one")
    store.write(2, b"two")
    client.unpublish_dataset(store._data_name(2))
    assert store.latest() == (1, b"one")


def test_ids_must_increase_and_args_are_checked(client: Client) -> None:
    store = DaskDatasetStore(client, prefix=f"job-{uuid.uuid4().hex}")
    store.write(5, b"x")
    with pytest.raises(ConfigurationError, match=re.escape("checkpoint_id 5 is not newer")):
        store.write(5, b"y")
    assert store.latest() == (5, b"x")
    with pytest.raises(ConfigurationError, match=re.escape("keep must be an integer >= 1")):
        DaskDatasetStore(client, keep=0)
    with pytest.raises(ConfigurationError, match=re.escape("prefix must be a non-empty")):
        DaskDatasetStore(client, prefix="")
