"""Where the record being processed came from (for error messages and dead letters).

A source that knows its records' positions (a Kafka source: topic, partition,
offset, key) sets :data:`record_origin` around each emit; the error policy
reads it to name the record's position in the context of a user function's exception and a
dead-letter handler copies it into headers.  It is a ``ContextVar``, so an
asynchronous task started while a record is emitted keeps that record's
origin.

>>> token = record_origin.set({"topic": "t", "partition": 0, "offset": 5})
>>> describe_origin()
"topic 't' partition 0 offset 5"
>>> record_origin.reset(token); describe_origin()
''
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

__all__ = ["describe_origin", "record_origin"]

#: ``{"topic", "partition", "offset"[, "end", "key"]}`` of the record being emitted, or None
record_origin: ContextVar[dict[str, Any] | None] = ContextVar(
    "rivermark_record_origin", default=None
)


def describe_origin() -> str:
    """``"topic 't' partition 0 offset 5"`` for the current record ('' when unknown)."""
    o = record_origin.get()
    if not o:
        return ""
    end = o.get("end")
    first = o.get("offset")
    if end is None or first is None or end == first + 1:
        where = f"offset {first}"
    else:
        where = f"offsets {first}-{end - 1}"
    return f"topic {o.get('topic')!r} partition {o.get('partition')} {where}"
