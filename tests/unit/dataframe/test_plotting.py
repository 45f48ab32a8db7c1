"""Plot objects for each kind, through hvplot (an optional extra installed for the tests)."""

from __future__ import annotations

import re

import holoviews as hv
import pytest

from rivermark.errors import ConfigurationError

from .helpers import batches, example, source_and_sdf

ELEMENTS = {"line": hv.Curve, "bar": hv.Bars, "scatter": hv.Scatter, "area": hv.Area}


@pytest.mark.parametrize("kind", sorted(ELEMENTS))
def test_dataframe_plot_each_kind(kind: str) -> None:
    s, sdf = source_and_sdf()
    p = sdf[["amount", "x"]].plot(kind=kind, backlog=10, y="x")
    assert isinstance(p, hv.DynamicMap)
    for b in batches(4):
        s.emit(b)
    data = p.buffer.data
    assert len(data) == 10  # the backlog
    assert "index" in data.columns  # the index is made visible
    element = p[()]
    found = element if isinstance(element, ELEMENTS[kind]) else None
    if found is None:  # hvplot may wrap elements in an overlay
        found = next(iter(element.traverse(lambda e: e, [ELEMENTS[kind]])), None)
    assert found is not None


@pytest.mark.parametrize("kind", sorted(ELEMENTS))
def test_series_hvplot_each_kind(kind: str) -> None:
    s, sdf = source_and_sdf()
    p = sdf.x.hvplot(kind=kind, backlog=5)
    for b in batches(3):
        s.emit(b)
    assert list(p.buffer.data.columns) == ["index", "x"]
    assert len(p.buffer.data) == 5
    element = p[()]
    assert element.traverse(lambda e: e, [ELEMENTS[kind]])


def test_plot_errors() -> None:
    _, sdf = source_and_sdf(example())
    with pytest.raises(ConfigurationError, match=re.escape("kind must be one of")):
        sdf.plot(kind="pie")
    with pytest.raises(
        ConfigurationError, match=re.escape("backlog must be a positive int, got 0")
    ):
        sdf.plot(backlog=0)
