from __future__ import annotations

import pytest

from rivermark import Stream
from rivermark.core.origin import describe_origin, record_origin
from rivermark.errors import describe


def test_a_user_function_error_names_the_origin_of_the_record() -> None:
    source = Stream()
    source.map(int).sink(lambda x: None)
    token = record_origin.set({"topic": "orders", "partition": 3, "offset": 17})
    try:
        with pytest.raises(ValueError) as first:  # the user's own exception
            source.emit("x")
    finally:
        record_origin.reset(token)
    assert first.value.rivermark_context.origin == "topic 'orders' partition 3 offset 17"
    assert "on record 'x' (input topic 'orders' partition 3 offset 17)" in describe(first.value)
    with pytest.raises(ValueError) as err:
        source.emit("y")
    assert err.value.rivermark_context.origin is None
    assert "(input" not in describe(err.value)


def test_a_batch_origin_names_its_offset_range() -> None:
    token = record_origin.set({"topic": "t", "partition": 0, "offset": 100, "end": 150})
    try:
        assert describe_origin() == "topic 't' partition 0 offsets 100-149"
    finally:
        record_origin.reset(token)
