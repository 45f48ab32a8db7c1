"""``to_kafka``: a batched Kafka producer sink, at-least-once or exactly-once.

Producing.  Every record is handed to ``Producer.produce`` (no flush per
record); a task on the node's loop calls ``poll(0)`` while deliveries are
outstanding, so delivery callbacks run on the loop thread.  A record counts
as completed (its metadata references are released) only when the broker
acknowledged it.  A failed delivery goes through the node's error policy
(``on_error``): ``"raise"`` (default) makes the next ``update`` raise a
:class:`~rivermark.kafka.errors.KafkaDeliveryError` (naming the node and
the record) and leaves the record incomplete (so a source never
commits past it); ``"skip"`` or a callable count/handle it and complete it.
``_inflight`` counts unacknowledged records, so a checkpoint barrier waits
for every acknowledgement; ``pre_commit`` also flushes; ``stop`` flushes.

Exactly-once (``exactly_once=True``, run under a checkpoint Job).  The
records of epoch ``e`` (those between checkpoint ``e - 1`` and ``e``) are
written in one Kafka transaction of a producer whose ``transactional.id`` is
stable across restarts (``transactional_id=``, else derived from the job id
and the node's name/topic).  The protocol:

1. ``restore(handle)`` (recovery or first start): ``init_transactions()``
   fences zombies and aborts a transaction left open by a crash, then
   resolves the last epoch (below) and begins a transaction.
2. ``get_state()`` at the barrier: the records of the open epoch (values and
   keys) go into the checkpoint with the node's state.
3. ``pre_commit(e)``: flush; every record of epoch ``e`` is acknowledged.
4. ``commit(e, handle)`` after the checkpoint is durable: atomically with the
   records, the transaction commits the offset ``e`` of a marker partition
   (partition 0 of the output topic) for the consumer group
   ``rivermark-eos.<transactional.id>`` (``send_offsets_to_transaction``),
   then ``commit_transaction()`` and ``begin_transaction()``.

Recovery with an unknown outcome.  confluent-kafka cannot resume a
prepared transaction after a restart (``init_transactions`` always aborts it),
so the sink resolves the epoch itself.  On ``restore`` of checkpoint ``e`` it
reads the marker group's committed offset ``C`` (the newest committed epoch):

* ``C >= e``: the crash came after ``commit_transaction``; epoch ``e`` is
  visible; nothing to do (the stored records are dropped).
* ``C < e`` (crash after the manifest was durable, before the commit
  finished): the transaction was aborted by ``init_transactions``; the sink
  ROLLS FORWARD: it produces epoch ``e``'s records again from the
  checkpointed state in a fresh transaction tagged ``e`` and commits it.
* a crash before the manifest of ``e`` was durable restores ``e - 1``;
  epoch ``e``'s transaction was aborted and its input is replayed.

So a ``read_committed`` consumer sees every record exactly once.  Cost: the
output of one epoch is kept in memory and written into the checkpoint.
Limit: with several exactly-once sinks in one job each resolves its own
epoch independently (still exactly once per sink).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..core.node import Stream
from ..core.refs import Metadata, release_refs, retain_refs
from ..errors import ConfigurationError
from .errors import KafkaDeliveryError

logger = logging.getLogger(__name__)

__all__ = ["ToKafka"]

_MAX_QUEUED = 100_000


def _encode(v: Any) -> Any:
    if v is None or isinstance(v, (bytes, bytearray)):
        return v
    if isinstance(v, str):
        return v.encode()
    return str(v).encode()


@Stream.register_api(attribute_name="to_kafka")
class ToKafka(Stream):
    """Produce every record to ``topic`` (see the module docs for guarantees).

    ``key`` is None, a constant, or a callable of the record; values and keys
    that are not bytes are encoded (``str`` as UTF-8, others via ``str``).

    >>> src = Stream()
    >>> sink = src.to_kafka("out", {"bootstrap.servers": "127.0.0.1:1"})
    >>> sink.topic, sink.exactly_once, sink._inflight
    ('out', False, 0)
    """

    _is_async = True

    def __init__(
        self,
        upstream: Stream,
        topic: str,
        producer_config: dict[str, Any],
        key: Any = None,
        exactly_once: bool = False,
        transactional_id: str | None = None,
        flush_timeout: float = 60.0,
        **kwargs: Any,
    ) -> None:
        if not isinstance(topic, str) or not topic:
            raise ConfigurationError(
                f"to_kafka: topic must be a non-empty string, got {topic!r}; pass e.g. 'out'"
            )
        if not isinstance(producer_config, dict) or "bootstrap.servers" not in producer_config:
            raise ConfigurationError(
                f"to_kafka: producer_config must be a dict with 'bootstrap.servers', got "
                f"{producer_config!r}; pass e.g. {{'bootstrap.servers': 'localhost:9092'}}"
            )
        if transactional_id is not None and (
            not isinstance(transactional_id, str) or not transactional_id
        ):
            raise ConfigurationError(
                f"to_kafka: transactional_id must be a non-empty string or None, got {transactional_id!r}"
            )
        super().__init__(upstream=upstream, **kwargs)
        self.topic = topic
        self.producer_config: dict[str, Any] = dict(producer_config)
        self.key = key
        self.exactly_once = bool(exactly_once)
        self.transactional_id = transactional_id
        self.flush_timeout = flush_timeout
        #: set by a checkpoint job (used to derive the transactional.id)
        self.job_id: str | None = None
        self.producer: Any = None
        self._inflight = 0
        self._poller: asyncio.Task[None] | None = None
        self._errors: list[tuple[Any, Any]] = []
        self._epoch_records: list[tuple[Any, Any]] = []
        self._restored_records: list[tuple[Any, Any]] | None = None
        self._in_txn = False
        self._marker_consumer: Any = None
        self.delivered = 0
        self.committed_epoch: int | None = None

    # ---------------------------------------------------------------- producer
    def _txid(self) -> str:
        if self.transactional_id is None:
            label = self.name or f"to_kafka-{self.topic}"
            self.transactional_id = f"rivermark-{self.job_id or 'job'}-{label}"
        return self.transactional_id

    def _ensure_producer(self) -> Any:
        if self.producer is None:
            import confluent_kafka as ck

            conf = dict(self.producer_config)
            conf.setdefault("linger.ms", 5)
            if self.exactly_once:
                conf["transactional.id"] = self._txid()
                conf["enable.idempotence"] = True
            self.producer = ck.Producer(conf)
        return self.producer

    def _key_of(self, x: Any) -> Any:
        k = self.key
        if k is None:
            return None
        return _encode(k(x) if callable(k) else k)

    # ---------------------------------------------------------------- data flow
    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> list[Awaitable[Any]] | None:
        if self._errors:
            self._raise_pending()
        producer = self._ensure_producer()
        if self.exactly_once and not self._in_txn:
            self._begin()
        try:
            key = self._key_of(x)
        except Exception as e:
            self._user_error(x, e, self.key)
            return None
        value = _encode(x)
        retain_refs(metadata)
        cb = self._delivery_callback(x, metadata)
        try:
            producer.produce(self.topic, value=value, key=key, on_delivery=cb)
        except BufferError:
            return [asyncio.ensure_future(self._produce_when_room(value, key, cb, x))]
        except Exception:
            release_refs(metadata)
            raise
        self._after_produce(x, key)
        if len(producer) > _MAX_QUEUED:
            return [asyncio.ensure_future(self._drain(_MAX_QUEUED // 2))]
        return None

    def _after_produce(self, x: Any, key: Any) -> None:
        self._inflight += 1
        if self.exactly_once:
            self._epoch_records.append((x, key))
        if self._poller is None or self._poller.done():
            self._poller = self.loop.create_task(self._poll_loop())

    async def _produce_when_room(
        self, value: Any, key: Any, cb: Callable[..., None], x: Any
    ) -> None:
        while True:
            self.producer.poll(0)
            try:
                self.producer.produce(self.topic, value=value, key=key, on_delivery=cb)
                break
            except BufferError:
                await asyncio.sleep(0.005)
        self._after_produce(x, key)

    async def _drain(self, below: int) -> None:
        while len(self.producer) > below:
            self.producer.poll(0)
            await asyncio.sleep(0.002)

    async def _poll_loop(self) -> None:
        while self._inflight > 0 and self.producer is not None:
            self.producer.poll(0)
            if self._inflight > 0:
                await asyncio.sleep(0.002)

    def _delivery_callback(self, x: Any, metadata: Metadata | None) -> Callable[[Any, Any], None]:
        def on_delivery(err: Any, msg: Any) -> None:
            self._inflight -= 1
            if err is None:
                self.delivered += 1
                release_refs(metadata)
                return
            policy = self.on_error
            if policy is None or policy == "raise":
                logger.error("%s: delivery of %r failed: %s", self._display_name(), x, err)
                self._errors.append((x, err))
                return
            try:
                self._user_error(
                    x, KafkaDeliveryError(f"delivery failed: {err}", x, err), self.producer
                )
            finally:
                release_refs(metadata)

        return on_delivery

    def _raise_pending(self) -> None:
        x, err = self._errors.pop(0)
        exc = KafkaDeliveryError(
            f"{self._display_name()}: the broker did not acknowledge record {x!r}: {err}", x, err
        )
        self._user_error(x, exc, self.producer)

    def flush(self) -> None:
        """Wait until every produced record is acknowledged; raise on a delivery error."""
        if self.producer is None:
            return
        left = self.producer.flush(self.flush_timeout)
        if left:
            raise KafkaDeliveryError(
                f"{self._display_name()}: {left} records not acknowledged within "
                f"{self.flush_timeout}s; is the broker reachable?"
            )
        if self._errors:
            self._raise_pending()

    # ---------------------------------------------------------------- transactions
    def _begin(self) -> None:
        producer = self._ensure_producer()
        if self.committed_epoch is None:
            # started without restore() (no job): initialise like a fresh start
            self.restore(None)
            return
        producer.begin_transaction()
        self._in_txn = True

    def _marker_group(self) -> str:
        return f"rivermark-eos.{self._txid()}"

    def _marker(self) -> Any:
        if self._marker_consumer is None:
            import confluent_kafka as ck

            conf = {
                k: v
                for k, v in self.producer_config.items()
                if k.startswith(("bootstrap.", "security.", "sasl.", "ssl.", "client."))
            }
            conf.update({"group.id": self._marker_group(), "enable.auto.commit": False})
            self._marker_consumer = ck.Consumer(conf)
        return self._marker_consumer

    def _retrying(self, what: str, call: Callable[[], Any], attempts: int = 60) -> Any:
        """Run ``call``, retrying retriable Kafka errors (coordinator moving or loading)."""
        import confluent_kafka as ck

        retriable_codes = {
            ck.KafkaError.NOT_COORDINATOR,
            ck.KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
            ck.KafkaError.COORDINATOR_NOT_AVAILABLE,
            ck.KafkaError._TIMED_OUT,
            ck.KafkaError._TRANSPORT,
        }
        for attempt in range(attempts):
            try:
                return call()
            except ck.KafkaException as e:
                err = e.args[0] if e.args else None
                retriable = err is not None and (err.retriable() or err.code() in retriable_codes)
                if not retriable or attempt == attempts - 1:
                    raise
                logger.info("%s: %s failed (%s), retrying", self._display_name(), what, err)
                time.sleep(min(0.05 * (attempt + 1), 0.5))
        raise AssertionError("unreachable")

    def _read_committed_epoch(self) -> int:
        import confluent_kafka as ck

        marker = self._marker()
        tps = self._retrying(
            "reading the committed epoch",
            lambda: marker.committed([ck.TopicPartition(self.topic, 0)], timeout=30),
        )
        off = tps[0].offset
        return off if off >= 0 else -1

    def _commit_epoch(self, epoch: int) -> None:
        import confluent_kafka as ck

        producer = self._ensure_producer()
        producer.flush(self.flush_timeout)
        group = self._marker().consumer_group_metadata()
        self._retrying(
            "send_offsets_to_transaction",
            lambda: producer.send_offsets_to_transaction(
                [ck.TopicPartition(self.topic, 0, epoch)], group, 30
            ),
        )
        self._retrying(
            "commit_transaction", lambda: producer.commit_transaction(self.flush_timeout)
        )
        self._in_txn = False
        self.committed_epoch = epoch

    # ---------------------------------------------------------------- checkpoint protocol
    def get_state(self) -> Any:
        """The open epoch's records (exactly-once only; see the module docs)."""
        if not self.exactly_once:
            return None
        return {"records": list(self._epoch_records)}

    def set_state(self, state: Any) -> None:
        if self.exactly_once and state:
            self._restored_records = list(state.get("records", []))

    def state_signature(self) -> str:
        return f"ToKafka(topic={self.topic!r}, exactly_once={self.exactly_once!r})"

    def pre_commit(self, epoch: int) -> Any:
        """Flush: every record of ``epoch`` is acknowledged; return the handle."""
        self.flush()
        handle: dict[str, Any] = {"epoch": epoch, "delivered": self.delivered}
        if self.exactly_once:
            handle["transactional_id"] = self._txid()
        return handle

    def commit(self, epoch: int, handle: Any) -> None:
        """Exactly-once: commit epoch ``epoch``'s transaction and open the next."""
        if not self.exactly_once:
            return
        if not self._in_txn:
            self._ensure_producer()
            if self.committed_epoch is None:
                self.restore(None)
            self.producer.begin_transaction()
            self._in_txn = True
        self._commit_epoch(epoch)
        self._epoch_records = []
        self.producer.begin_transaction()
        self._in_txn = True

    def restore(self, handle: Any) -> None:
        """Fence zombies, resolve the restored epoch (roll forward or nothing), begin."""
        if not self.exactly_once:
            return
        producer = self._ensure_producer()
        self._retrying("init_transactions", lambda: producer.init_transactions(self.flush_timeout))
        self._in_txn = False
        committed = self._read_committed_epoch()
        epoch = handle.get("epoch") if isinstance(handle, dict) else None
        records = self._restored_records or []
        self._restored_records = None
        if epoch is not None and committed < epoch:
            logger.warning(
                "%s: epoch %d was checkpointed but its transaction did not commit "
                "(last committed epoch %d); rolling forward: producing its %d records again",
                self._display_name(),
                epoch,
                committed,
                len(records),
            )
            producer.begin_transaction()
            for x, key in records:
                producer.produce(self.topic, value=_encode(x), key=key)
                producer.poll(0)
            self._commit_epoch(epoch)
        elif epoch is not None and committed > epoch:
            logger.error(
                "%s: restoring checkpoint %d but epoch %d already committed output; "
                "its records will appear twice (was a newer checkpoint lost?)",
                self._display_name(),
                epoch,
                committed,
            )
        self.committed_epoch = max(committed, epoch if epoch is not None else -1)
        self._epoch_records = []
        producer.begin_transaction()
        self._in_txn = True

    # ---------------------------------------------------------------- lifecycle
    def stop(self) -> None:
        super().stop()
        self.close()

    def close(self) -> None:
        """Flush outstanding records (at-least-once) and release the clients."""
        if self.producer is not None and not self.exactly_once:
            self.producer.flush(self.flush_timeout)
        if self.producer is not None and self.exactly_once and self._in_txn:
            # records after the last checkpoint belong to no checkpoint: they are
            # replayed by the next run, so the open transaction is aborted
            try:
                self.producer.abort_transaction(self.flush_timeout)
            except Exception as e:  # the broker may be gone at shutdown
                logger.warning(
                    "%s: aborting the open transaction failed: %s", self._display_name(), e
                )
            self._in_txn = False
        if self._marker_consumer is not None:
            self._marker_consumer.close()
            self._marker_consumer = None
