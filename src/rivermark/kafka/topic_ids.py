"""Topic identities of a Kafka source's input: a recreated topic is not the old one.

A topic that is deleted and created again under the same name gets a new
topic id from the broker.  Its offsets start again at 0, so a checkpointed
offset of the old topic means nothing in the new one; when the new topic
already holds more records than that offset, offsets alone do not show the
change (they do not go backwards) and the records below it would be skipped.

The source therefore records the id of each input topic when it first lists
the topic's partitions and keeps the ids in its position, next to the
offsets::

    {"orders:0": 42, "orders:1": 17, "topic_ids": {"orders": "951d0gBFQTeDsmfAPqaBiQ"}}

The ``topic_ids`` entry is the only key without a ``":partition"`` suffix
(topic names cannot contain ``:``).  A position written before ids were
recorded has no such entry; it restores as before and the ids are recorded
from then on.  :func:`split_position` is the one reader of this format.

The ids come from the admin API (``describe_topics``), asked at every
partition listing, never per record.  A broker that cannot describe topics
(too old, or an ACL that denies it) makes :class:`TopicIds` log one WARNING
and return no ids: the check is then skipped, the job is not failed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

logger = logging.getLogger(__name__)

__all__ = [
    "TOPIC_IDS_KEY",
    "TopicIds",
    "offsets_of",
    "recreated_message",
    "split_position",
    "with_topic_ids",
]

#: the key of a Kafka source's position that holds ``{topic: topic id}``
TOPIC_IDS_KEY = "topic_ids"

#: an all-zero id is what a broker without topic ids answers
_NO_ID = "AAAAAAAAAAAAAAAAAAAAAA"

#: consumer settings that also apply to an admin client (connection and security)
_ADMIN_KEYS = (
    "bootstrap.servers",
    "metadata.broker.list",
    "security.protocol",
    "sasl.",
    "ssl.",
    "ssl_key",
    "enable.ssl.",
    "enable.sasl.",
    "client.id",
    "client.dns.lookup",
    "socket.",
    "broker.address.",
    "broker.version.fallback",
    "api.version.",
    "oauth_cb",
    "error_cb",
    "logger",
)


def split_position(position: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, str]]:
    """The offsets ``{"topic:partition": offset}`` and topic ids ``{topic: id}`` of a position.

    >>> split_position({"t:0": 5, "topic_ids": {"t": "abc"}})
    ({'t:0': 5}, {'t': 'abc'})
    >>> split_position({"t:0": 5})  # written before topic ids were recorded
    ({'t:0': 5}, {})
    """
    offsets: dict[str, int] = {}
    ids: dict[str, str] = {}
    for key, value in position.items():
        if key == TOPIC_IDS_KEY and isinstance(value, Mapping):
            ids = {str(t): str(i) for t, i in value.items()}
        else:
            offsets[str(key)] = int(value)
    return offsets, ids


def offsets_of(position: Mapping[str, Any]) -> dict[str, int]:
    """Only the offsets of a position (see :func:`split_position`)."""
    return split_position(position)[0]


def with_topic_ids(offsets: Mapping[str, int], ids: Mapping[str, str]) -> dict[str, object]:
    """A position: ``offsets`` plus the ids (no ``topic_ids`` entry when there are none).

    >>> with_topic_ids({"t:0": 5}, {"t": "abc"})
    {'t:0': 5, 'topic_ids': {'t': 'abc'}}
    >>> with_topic_ids({"t:0": 5}, {})
    {'t:0': 5}
    """
    out: dict[str, Any] = dict(offsets)
    if ids:
        out[TOPIC_IDS_KEY] = dict(sorted(ids.items()))
    return out


class TopicIds:
    """Looks up the ids of topics through an admin client made from the consumer's settings.

    Blocking: call it from a thread, as the source's partition listing does.
    """

    def __init__(
        self,
        consumer_params: Mapping[str, Any],
        name: str,
        timeout: float = 5.0,
        what: str = "the input topics",
        then: str = "a topic deleted and recreated under the same name is then noticed only "
        "when its offsets go backwards",
    ):
        self._params = {
            k: v for k, v in consumer_params.items() if any(k.startswith(a) for a in _ADMIN_KEYS)
        }
        self._name = name
        self._what, self._then = what, then
        self._timeout = timeout
        self._admin: Any = None
        self.unavailable = False

    def lookup(self, topics: list[str]) -> dict[str, str]:
        """``{topic: id}`` for the topics the broker describes; ``{}`` when it cannot."""
        if not topics or self.unavailable:
            return {}
        import confluent_kafka as ck

        try:
            if self._admin is None:
                from confluent_kafka.admin import AdminClient

                self._admin = AdminClient(dict(self._params))
            futures = self._admin.describe_topics(
                ck.TopicCollection(list(topics)), request_timeout=self._timeout
            )
        except (ck.KafkaException, ValueError, TypeError, NotImplementedError) as e:
            self._give_up(e)
            return {}
        out: dict[str, str] = {}
        for topic, fut in futures.items():
            try:
                found = str(fut.result(self._timeout * 2).topic_id)
            except ck.KafkaException as e:
                err = e.args[0] if e.args else None
                code = err.code() if isinstance(err, ck.KafkaError) else None
                if code == ck.KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue  # deleted since it was listed: looked up at the next listing
                if code in (ck.KafkaError._TIMED_OUT, ck.KafkaError._TRANSPORT):
                    continue  # a slow broker: asked again at the next listing
                self._give_up(e)
                return {}
            except Exception as e:  # a timeout of the future itself
                logger.debug("%s: describing topic %r: %r", self._name, topic, e)
                continue
            if found == _NO_ID:
                self._give_up("the broker has no topic ids")
                return {}
            out[topic] = found
        return out

    def _give_up(self, why: object) -> None:
        self.unavailable = True
        logger.warning(
            "%s: cannot read the ids of %s (%s); %s", self._name, self._what, why, self._then
        )


def recreated_message(name: str, topic: str, old: str, new: str) -> str:
    """The one-line refusal for input ``topic`` whose id changed from ``old`` to ``new``.

    >>> print(recreated_message("src", "t", "a", "b"))  # doctest: +ELLIPSIS
    src: input topic 't' was deleted and recreated (its offsets are of topic id 'a', ...
    """
    return (
        f"{name}: input topic {topic!r} was deleted and recreated (its offsets are of topic "
        f"id {old!r}, the broker's topic {topic!r} now has id {new!r}); refusing to continue, "
        "since those offsets would skip records of the new topic or read them as if they "
        "were old. Check the topic; to read the new topic from its start, pass "
        "allow_offset_reset=True to the source and run again"
    )
