"""The optional layers (DataFrame, Batch, Dask, the notebook display), imported on first use.

``import rivermark`` imports none of them (each needs an optional dependency:
pandas, dask and distributed, IPython).  The lower layers reach them through
registries they own and this module fills, each with a function that imports
the layer with an ordinary ``import`` statement (so the layer test sees it):

* :data:`rivermark.plugins.DOORS`: streamz's methods on every stream that an
  optional layer defines (``scatter``, ``to_dataframe``, ``to_batch``, the
  notebook display);
* :data:`rivermark.plugins.LAYER_FUNCTIONS`: a function one connector calls in
  another layer (``from_kafka_batched(dask=True)``);
* :func:`rivermark.statedata.add_state_loader`: the layers whose classes a
  checkpoint's state may hold, for a process that reads a checkpoint before
  it imported them.

Only the package's top level imports this module.
"""

from __future__ import annotations

from collections.abc import Callable

from rivermark import plugins
from rivermark.statedata import add_state_loader

__all__ = ["install", "load_dask", "DASK_NAMES"]

#: streamz's top-level names that the Dask layer defines (``rivermark.scatter``)
DASK_NAMES = frozenset({"scatter", "DaskStream"})


def load_dask() -> None:
    """Import the Dask layer (it registers ``scatter`` and ``Remote``)."""
    from rivermark import dask  # noqa: F401


def _dataframe() -> None:
    from rivermark.dataframe import core, keyed  # noqa: F401  (registers to_dataframe, the partials)


def _batch() -> None:
    from rivermark import batch  # noqa: F401  (registers to_batch)


def _notebook() -> None:
    from rivermark.observe import notebook  # noqa: F401  (registers _ipython_display_)


def _from_kafka_batched_dask() -> Callable[..., object]:
    from rivermark.dask.kafka import from_kafka_batched_dask

    return from_kafka_batched_dask


def install() -> None:
    """Fill the registries of the lower layers (run once, by ``import rivermark``)."""
    plugins.add_door("scatter", "rivermark.dask.core", load_dask)
    plugins.add_door("to_dataframe", "rivermark.dataframe.core", _dataframe)
    plugins.add_door("to_batch", "rivermark.batch", _batch)
    plugins.add_door("_ipython_display_", "rivermark.observe.notebook", _notebook)
    plugins.add_layer_function("from_kafka_batched_dask", _from_kafka_batched_dask)
    add_state_loader(_dataframe)
    add_state_loader(load_dask)
