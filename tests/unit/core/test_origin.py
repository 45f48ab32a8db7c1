from __future__ import annotations

import pytest

from rivermark import Stream
from rivermark.core.origin import describe_origin, record_origin
from rivermark.errors import UserFunctionError


def test_a_user_function_error_names_the_origin_of_the_record() -> None:
    source = Stream()
    source.map(int).sink(lambda x: None)
    token = record_origin.set({"topic": "orders", "partition": 3, "offset": 17})
    try:
        with pytest.raises(
            UserFunctionError, match=r"\(input topic 'orders' partition 3 offset 17\)"
        ):
            source.emit("x")
    finally:
        record_origin.reset(token)
    with pytest.raises(UserFunctionError) as err:
        source.emit("y")
    assert "(input" not in str(err.value)


def test_a_batch_origin_names_its_offset_range() -> None:
    token = record_origin.set({"topic": "t", "partition": 0, "offset": 100, "end": 150})
    try:
        assert describe_origin() == "topic 't' partition 0 offsets 100-149"
    finally:
        record_origin.reset(token)
