"""streamz's doors to the optional layers, each defined once and loaded on first call."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from rivermark import Stream, plugins

OPTIONAL = [
    "rivermark.dask",
    "rivermark.dataframe",
    "rivermark.batch",
    "rivermark.observe.notebook",
]


def _run(code: str) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter; it prints one JSON object."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_rivermark_loads_no_optional_layer_and_every_door_is_there() -> None:
    found = _run(
        f"""
        import json, sys
        import rivermark
        from rivermark import Stream
        s = Stream()
        doors = [callable(getattr(s, n)) for n in ("scatter", "to_dataframe", "to_batch")]
        print(json.dumps({{"loaded": [m for m in {OPTIONAL!r} if m in sys.modules], "doors": doors}}))
        """
    )
    assert found == {"loaded": [], "doors": [True, True, True]}


def test_each_door_loads_its_layer_on_first_call_in_a_fresh_process() -> None:
    found = _run(
        """
        import json, sys
        import pandas as pd
        import rivermark
        s = rivermark.Stream()
        batch = s.to_batch(example=[1])
        frame = s.to_dataframe(example=pd.DataFrame({"x": [1]}))
        scattered = s.scatter()
        print(json.dumps({
            "types": [type(batch).__name__, type(frame).__name__, type(scattered).__name__],
            "real": [type(rivermark.Stream.__dict__[n]).__name__ for n in ("to_batch", "scatter")],
        }))
        """
    )
    assert found == {
        "types": ["Batch", "DataFrame", "DaskScatter"],
        "real": ["function", "function"],
    }


def test_the_door_is_the_layers_own_definition_once_loaded() -> None:
    from rivermark.batch import Batch, to_batch
    from rivermark.dask.core import DaskScatter
    from rivermark.dataframe.core import to_dataframe

    assert Stream.__dict__["to_batch"].__wrapped__ is to_batch
    assert Stream.__dict__["to_dataframe"].__wrapped__ is to_dataframe
    assert Stream.__dict__["scatter"].__wrapped__ is DaskScatter
    assert isinstance(Stream().to_batch(), Batch)


def test_kafka_reaches_dask_through_the_registry() -> None:
    from rivermark.dask.kafka import from_kafka_batched_dask

    assert plugins.door("from_kafka_batched_dask") is from_kafka_batched_dask
