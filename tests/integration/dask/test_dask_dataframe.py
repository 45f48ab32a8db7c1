"""Streaming DataFrames on a Dask stream (``DataFrame(example=..., stream=DaskStream())``).

Element-wise operations run on the cluster (their functions are pickled and
sent to the workers); reductions and other stateful operations gather the
futures first and keep their state in the pipeline's process.
"""

from __future__ import annotations

import pickle
from operator import add

import pandas as pd
import pytest
from distributed import Client

from rivermark.dask import DaskStream
from rivermark.dataframe import DataFrame
from rivermark.dataframe.core import _Apply, _ApplyEach
from rivermark.testing import wait_for

pytestmark = pytest.mark.dask

DF = pd.DataFrame({"x": [1, 2, 3], "y": [4.0, 5.0, 6.0]})


def test_partition_functions_pickle_without_the_graph() -> None:
    sdf = DataFrame(example=DF.iloc[:0], stream=DaskStream())
    apply = _Apply(add, (sdf, 1), {})
    each = _ApplyEach(add, (sdf.x, sdf.y), {})
    # plain pickle: nothing of the stream graph (nodes, loops) is captured
    assert pickle.loads(pickle.dumps(apply))(DF).equals(DF + 1)
    assert pickle.loads(pickle.dumps(each))(DF).equals(DF.x + DF.y)


def test_elementwise_on_the_cluster_and_reductions_gathered(client: Client) -> None:
    sdf = DataFrame(example=DF.iloc[:0], stream=DaskStream())
    summed = (sdf.x + sdf.y).stream.gather().sink_to_list()
    doubled = (sdf * 2).stream.gather().sink_to_list()
    total = sdf.x.sum().stream.gather().sink_to_list()
    running = sdf.cumsum().stream.gather().sink_to_list()
    for _ in range(2):
        sdf.emit(DF)
    wait_for(lambda: len(summed) == len(doubled) == len(total) == len(running) == 2, timeout=30)
    pd.testing.assert_series_equal(summed[1], DF.x + DF.y)
    pd.testing.assert_frame_equal(doubled[0], DF * 2)
    assert total == [6, 12]
    pd.testing.assert_frame_equal(pd.concat(running), pd.concat([DF, DF]).cumsum())


def test_random_dask_true_runs_on_the_cluster(client: Client) -> None:
    # streamz's PeriodicDataFrame(dask=True): the batches are scattered as they come
    from rivermark.dataframe import Random

    # the client is shared by the session: data of earlier tests may still be held
    before = set(client.who_has())
    sdf = Random(freq="2ms", interval="20ms", dask=True)
    try:
        assert isinstance(sdf.stream, DaskStream)
        xs = sdf.x.stream.gather().sink_to_list()
        wait_for(lambda: len(xs) >= 3, timeout=30)
    finally:
        sdf.stop()
    assert all(isinstance(v, pd.Series) and v.name == "x" for v in xs)
    assert all(((v >= 0) & (v < 1)).all() for v in xs)
    # nothing of this stream is left on the cluster once the results were gathered
    wait_for(lambda: not set(client.who_has()) - before, timeout=30)
