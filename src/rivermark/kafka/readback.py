"""Reading back what ``to_kafka`` wrote between two of its checkpoint handles.

``rivermark replay --diff`` compares a replay's side output with what the
live job wrote for the same input.  A ``to_kafka`` handle records, per
partition of the output topic, the offset after the sink's last record up
to that epoch (``offsets``) and how many records the sink wrote in all runs
(``count``).  The output of the epochs after handle ``first`` up to
``last`` is then, in each partition, the records from ``first``'s offset up
to ``last``'s, read with ``read_committed``: the records of an exactly-once
sink's aborted transactions are skipped, as every ``read_committed``
consumer of the topic skips them.

That is exactly what the sink wrote when the records read number
``last["count"] - first["count"]``.  Otherwise other records lie in
between, and the read is refused (``ValueError``) saying so: another
producer writes to the topic, records were written twice after a crash
(an at-least-once sink writes again what followed its last checkpoint),
or an exactly-once epoch's transaction was written again after a crash
("rolled forward") and landed after the handle that should end it.
Records deleted by retention, and handles of a rivermark that recorded
neither offsets nor counts, are refused too.

Partitions have no order between them: when the records come from more
than one partition, the output is marked unordered, and only the records,
not their order, can be compared with the replay's.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from rivermark.sinks.base import WrittenOutput

logger = logging.getLogger(__name__)

__all__ = ["OutputEnds", "read_written"]

#: the client settings a reader takes from the sink's producer config
_CLIENT_PREFIXES = ("bootstrap.", "security.", "sasl.", "ssl.", "client.")


class OutputEnds:
    """Where a ``to_kafka`` sink's output stands, for its handles (a part of ``ToKafka``)."""

    # what ToKafka has
    producer_config: dict[str, Any]
    topic: str
    output_text: Callable[[Any], str]

    def __init__(self) -> None:
        #: per partition, the offset after the sink's last acknowledged record
        self._ends: dict[int, int] = {}
        #: the records acknowledged in all runs (from the restored handle on)
        self._written = 0

    def _acknowledged(self, msg: Any) -> None:
        """Note where an acknowledged record went: its partition's end of the output."""
        part, after = int(msg.partition()), int(msg.offset()) + 1
        if after > self._ends.get(part, 0):
            self._ends[part] = after

    def _rolled(self, err: object, msg: object) -> None:
        """The delivery report of a record rolled forward (counted in its epoch's handle already)."""
        if err is None:
            self._acknowledged(msg)

    def output_ends(self) -> dict[str, object]:
        """What a handle records: ``offsets`` (partition -> end) and ``count``."""
        return {
            "offsets": {str(p): o for p, o in sorted(self._ends.items())},
            "count": self._written,
        }

    def _resume_count(self, handle: dict[str, object]) -> None:
        """Go on from the output's ends and record count in the restored ``handle``."""
        offsets, count = handle.get("offsets"), handle.get("count")
        self._ends = (
            {int(p): int(o) for p, o in offsets.items()} if isinstance(offsets, dict) else {}
        )
        # a handle of an older rivermark counts nothing: this run counts from 0
        self._written = count if isinstance(count, int) and not isinstance(count, bool) else 0

    def written_between(self, first: object, last: object) -> WrittenOutput:
        """The records written between two handles, read back from the topic."""
        return read_written(self.producer_config, self.topic, first, last, self.output_text)


def _ends(handle: object, which: str) -> tuple[dict[int, int], int]:
    """A handle's ``offsets`` (partition -> offset after the sink's records) and ``count``."""
    if not isinstance(handle, dict):
        raise ValueError(f"the {which} checkpoint holds no handle of it")
    offsets, count = handle.get("offsets"), handle.get("count")
    if not isinstance(offsets, dict) or not isinstance(count, int):
        raise ValueError(
            f"the {which} checkpoint's handle records no output offsets (written by a rivermark "
            "before they were recorded); compare checkpoints written since"
        )
    return {int(p): int(o) for p, o in offsets.items()}, count


def read_written(
    config: dict[str, object],
    topic: str,
    first: object,
    last: object,
    text: Callable[[object], str],
    timeout: float = 30.0,
) -> WrittenOutput:
    """The records ``to_kafka`` wrote to ``topic`` between handles ``first`` and ``last``.

    ``config`` is the sink's producer config (its connection settings are
    used), ``text`` turns a record's value into the sink's text
    (``ToKafka.output_text``).  ``ValueError`` says why the output cannot be
    known exactly (see the module docs).
    """
    begin, before = _ends(first, "first")
    end, after = _ends(last, "last")
    ranges = {p: (begin.get(p, 0), e) for p, e in sorted(end.items()) if e > begin.get(p, 0)}
    import confluent_kafka as ck

    conf = {k: v for k, v in config.items() if k.startswith(_CLIENT_PREFIXES)}
    conf.update(
        {
            # read only: no offsets are committed, so the group never exists on the broker
            "group.id": f"rivermark-readback-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer = ck.Consumer(conf)
    try:
        records = _read(consumer, topic, ranges, timeout)
    except ck.KafkaException as e:
        raise ValueError(f"reading topic {topic!r} failed: {e}") from None
    finally:
        consumer.close()
    found = sum(len(v) for v in records.values())
    where = ", ".join(f"{topic}[{p}] {b}..{e}" for p, (b, e) in ranges.items()) or f"{topic}: none"
    wrote = after - before
    if found > wrote:
        raise ValueError(
            f"{where} holds {found} committed records, but the sink wrote {wrote} there: "
            "other records lie in between (another producer writes to the topic, or after a "
            "crash records were written again past a checkpoint's offsets); compare between "
            "other checkpoints"
        )
    if found < wrote:
        raise ValueError(
            f"{where} holds {found} committed records, but the sink wrote {wrote} there: an "
            "epoch's transaction was aborted by a crash and written again after these offsets "
            "(rolled forward); compare between other checkpoints"
        )
    used = [p for p, v in records.items() if v]
    body = "".join(text(value) for p in sorted(records) for value in records[p])
    return WrittenOutput(body, where, ordered=len(used) <= 1)


def _read(
    consumer: Any, topic: str, ranges: dict[int, tuple[int, int]], timeout: float
) -> dict[int, list[Any]]:
    """Each partition's committed record values in its range ``[begin, end)``."""
    import confluent_kafka as ck

    out: dict[int, list[Any]] = {p: [] for p in ranges}
    if not ranges:
        return out
    for p, (b, e) in ranges.items():
        low, _ = consumer.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)
        if low > b:
            raise ValueError(
                f"{topic}[{p}] starts at offset {low} now: the records {b}..{min(low, e)} the "
                "sink wrote were deleted (retention); compare between later checkpoints"
            )
    consumer.assign([ck.TopicPartition(topic, p, b) for p, (b, _) in ranges.items()])
    left = set(ranges)
    deadline = time.monotonic() + timeout
    while left:
        if time.monotonic() > deadline:
            behind = ", ".join(f"{topic}[{p}]" for p in sorted(left))
            raise ValueError(
                f"{behind} could not be read up to the checkpoint's offsets within {timeout:g}s "
                "(a transaction still open, or the broker unreachable)"
            )
        for m in consumer.consume(num_messages=1000, timeout=0.5):
            if m.error() is not None:
                if m.error().fatal():
                    raise ValueError(f"reading topic {topic!r} failed: {m.error()}")
                continue
            p = m.partition()
            if p in ranges and m.offset() < ranges[p][1]:
                out[p].append(m.value())
        # transaction markers occupy offsets that no record is read at: ask where
        # the consumer would fetch next
        where = consumer.position([ck.TopicPartition(topic, p) for p in left])
        left -= {tp.partition for tp in where if tp.offset >= ranges[tp.partition][1]}
    return out
