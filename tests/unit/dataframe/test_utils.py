"""streamz's frame helpers (``rivermark.dataframe.utils``) on pandas objects."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from rivermark.dataframe.utils import (
    get_base_frame_type,
    get_dataframe_package,
    is_dataframe_like,
    is_index_like,
    is_series_like,
)

DF = pd.DataFrame({"x": [1.0, 2.0], "y": [3, 4]})


@pytest.mark.parametrize(
    ("obj", "kinds"),
    [
        (DF, (True, False, False)),
        (DF.x, (False, True, False)),
        (DF.index, (False, False, True)),
        ([1, 2], (False, False, False)),
    ],
)
def test_kinds(obj: object, kinds: tuple[bool, bool, bool]) -> None:
    assert (is_dataframe_like(obj), is_series_like(obj), is_index_like(obj)) == kinds


def test_base_frame_type() -> None:
    assert get_base_frame_type("DataFrame", is_dataframe_like, DF) is pd.DataFrame
    assert get_base_frame_type("DataFrame", is_dataframe_like, DF.x) is pd.DataFrame
    assert get_base_frame_type("DataFrame", is_dataframe_like, DF.index) is pd.DataFrame
    assert get_base_frame_type("Series", is_series_like, DF.x) is pd.Series
    assert issubclass(get_base_frame_type("Index", is_index_like, DF.index), pd.Index)
    with pytest.raises(TypeError, match=re.escape("a streaming Series needs a Series-like")):
        get_base_frame_type("Series", is_series_like, DF)
    with pytest.raises(TypeError, match="got NoneType"):
        get_base_frame_type("DataFrame", is_dataframe_like, None)


def test_package() -> None:
    assert get_dataframe_package(DF) is pd
    assert get_dataframe_package(DF.x) is pd
    assert get_dataframe_package(DF.index) is pd
