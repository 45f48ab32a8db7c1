"""Plot objects for each kind, through hvplot (an optional extra installed for the tests)."""

from __future__ import annotations

import re

import holoviews as hv
import pandas as pd
import pytest

from rivermark.errors import ConfigurationError

from .helpers import NAMES, batches, example, source_and_sdf

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


def test_updating_frame_plots_the_current_result_only() -> None:
    s, sdf = source_and_sdf()
    totals = sdf.groupby("name").amount.sum()
    assert totals._stream_type == "updating"
    p = totals.hvplot.bar()
    data = batches(5, sizes=(3, 4))
    for b in data:
        s.emit(b)
    expected = pd.concat(data).groupby("name").amount.sum()
    current = p.pipe.data
    assert list(current["name"]) == list(expected.index)
    assert list(current["amount"]) == list(expected)
    bars = p[()].traverse(lambda e: e, [hv.Bars])[0]
    # one bar per name, not one per name and batch
    assert len(bars.data) == len(expected) <= len(NAMES) < sum(len(b) for b in data)


def test_growing_frame_keeps_a_buffer() -> None:
    s, sdf = source_and_sdf()
    p = sdf.x.hvplot.line(backlog=100)
    data = batches(5, sizes=(3, 4))
    for b in data:
        s.emit(b)
    assert len(p.buffer.data) == sum(len(b) for b in data)


@pytest.mark.parametrize(
    "kind, kwargs, element",
    [
        ("hist", {"y": "x"}, hv.Histogram),
        ("box", {"y": "x"}, hv.BoxWhisker),
        ("violin", {"y": "x"}, hv.Violin),
        ("kde", {"y": "x"}, hv.Distribution),
        ("step", {"y": "x"}, hv.Curve),
        ("heatmap", {"x": "name", "y": "amount", "C": "x"}, hv.HeatMap),
        ("table", {}, hv.Table),
    ],
)
def test_every_hvplot_kind_is_passed_through(
    kind: str, kwargs: dict[str, str], element: type
) -> None:
    s, sdf = source_and_sdf()
    by_attribute = getattr(sdf.hvplot, kind)(backlog=50, **kwargs)
    by_call = sdf.plot(kind=kind, backlog=50, **kwargs)
    for b in batches(4):
        s.emit(b)
    for p in (by_attribute, by_call):
        drawn = p[()]
        assert isinstance(drawn, element) or drawn.traverse(lambda e: e, [element]), drawn


def test_unknown_kind_names_the_known_ones() -> None:
    _, sdf = source_and_sdf(example())
    with pytest.raises(
        AttributeError, match="hvplot has no plot kind 'pie'; the kinds are: .*hist"
    ):
        sdf.hvplot.pie()
    with pytest.raises(ConfigurationError, match="got 'pie'"):
        sdf.hvplot(kind="pie")
