"""``to_kafka``: a batched Kafka producer sink, at-least-once or exactly-once.

Producing.  Every record is handed to ``Producer.produce`` (no flush per
record); a task on the node's loop calls ``poll(0)`` while deliveries are
outstanding, so delivery callbacks run on the loop thread.  A record counts
as completed (its metadata references are released) only when the broker
acknowledged it.  ``in_flight`` counts unacknowledged records, so a
checkpoint barrier waits for every acknowledgement; ``pre_commit`` also
flushes; ``stop`` flushes.

Delivery failures.  The sink's error policy is its own: it does NOT inherit
an upstream's ``on_error`` (a ``map(json.loads, on_error="skip")`` above it
skips bad input, not lost output), nor ``Job(on_error=...)``.  By default
(``on_error="raise"``) a record the broker did not acknowledge fails the
node for good: the record is never completed (a source never commits past
it), the failure is logged as one line naming the topic and the input
record's position, and a running Job stops with its last checkpoint intact.
Pass ``on_error="skip"`` or a callable to the sink itself to drop or handle
such records.  A missing output topic is found at the job's start (when the
producer may not create it, ``allow.auto.create.topics=false``) and refused
with one line.

Exactly-once (``exactly_once=True``, run under a checkpoint Job).  The
records of epoch ``e`` (those between checkpoint ``e - 1`` and ``e``) are
written in one Kafka transaction of a producer whose ``transactional.id`` is
stable across restarts: ``transactional_id=``, else the id stored in the
checkpoint being restored (so moving the checkpoint directory keeps it),
else derived from the job id and the node's name/topic at the first start.
The protocol:

1. ``restore(handle)`` (recovery or first start): ``init_transactions()``
   fences zombies and aborts a transaction left open by a crash, then
   resolves the last epoch (below) and begins a transaction.
2. ``get_state()`` at the barrier: the records of the open epoch (the value
   and key bytes as produced, see ``EpochRecords``) go into the checkpoint
   with the node's state.
3. ``pre_commit(e)``: flush; every record of epoch ``e`` is acknowledged;
   the handle names the transactional id and the position
   (partition, offset) of the epoch's first acknowledged record.
4. ``commit(e, handle)`` after the checkpoint is durable: atomically with the
   records, the transaction commits the offset ``e`` of a marker partition
   (partition 0 of the output topic) for the consumer group
   ``rivermark-eos.<transactional.id>`` (``send_offsets_to_transaction``),
   then ``commit_transaction()`` and ``begin_transaction()``.  The commit
   has a deadline (``commit_timeout``) that the sink enforces itself: past
   it, the job stops with one line saying the broker was unreachable; a
   rerun resumes exactly (the epoch is resolved as below).

Recovery with an unknown outcome.  confluent-kafka cannot resume a
prepared transaction after a restart (``init_transactions`` always aborts it),
so the sink resolves the restored epoch ``e`` itself, from two witnesses:

* the marker group's committed offset ``C`` (``C >= e``: committed);
* the epoch's first record, read back with ``read_committed`` at the offset
  stored in the handle: returned at that offset means committed, skipped
  means aborted.  This witness lives as long as the output topic's
  retention, unlike the marker, which the broker expires after
  ``offsets.retention.minutes`` (7 days by default) without commits.

Committed: nothing to do (the stored records are dropped).  Aborted (a crash
after the manifest was durable, before the commit finished): the sink ROLLS
FORWARD, producing epoch ``e``'s records again from the checkpointed state in
a fresh transaction, and commits it.  When neither witness is available (the
marker expired and the first record was deleted by retention) the sink says
so in a WARNING and rolls forward (those records may then appear twice).  A
crash before the manifest of ``e`` was durable restores ``e - 1``; epoch
``e``'s transaction was aborted and its input is replayed.

Starting over (``Job(..., from_scratch=True)``): ``start_over()`` fences
and aborts like ``restore``, rolls nothing forward, and resets the marker to
epoch 0, so the new run's epochs form a new sequence; the records committed
by earlier runs stay in the topic.

Every handle, exactly-once or not, also records where the sink's output
stands: per partition, the offset after its last acknowledged record
(``offsets``), and the records it has written in all runs (``count``);
:mod:`rivermark.kafka.readback` reads the output between two handles back.

So a ``read_committed`` consumer sees every record exactly once.  Cost: the
output of one epoch is kept in memory and written into the checkpoint.
Limit: with several exactly-once sinks in one job each resolves its own
epoch independently (still exactly once per sink).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from rivermark.core.node import Stream
from rivermark.core.origin import describe_origin, record_origin
from rivermark.core.refs import Metadata, hold_refs, release_refs, retain_refs
from rivermark.errors import ConfigurationError
from rivermark.kafka.epochs import EpochRecords, EpochTransactions, encode
from rivermark.kafka.errors import (
    KafkaDeliveryError,
    KafkaDeliveryTimeoutError,
    KafkaFencedError,
    KafkaTopicError,
)
from rivermark.kafka.readback import OutputEnds
from rivermark.kafka.topic_ids import TopicIds
from rivermark.kafka.transactions import call_with_deadline

logger = logging.getLogger(__name__)

__all__ = ["ToKafka"]

_MAX_QUEUED = 100_000
#: ``produce``'s partition argument for "the partitioner chooses" (RD_KAFKA_PARTITION_UA).
#: ``produce`` is called with positional arguments (topic, value, key, partition,
#: on_delivery): parsing them as keywords cost confluent-kafka 2.16 about 0.4 us a record
_ANY_PARTITION = -1
#: ``linger.ms`` of an exactly-once sink's producer unless its config names one
_EXACTLY_ONCE_LINGER_MS = 50


@Stream.register_api(attribute_name="to_kafka")
class ToKafka(Stream, OutputEnds, EpochTransactions):
    """Produce every record to ``topic`` (see the module docs for guarantees).

    ``key`` is None, a constant, or a callable of the record; values and keys
    that are not bytes are encoded (``str`` as UTF-8, others via ``str``).
    ``on_error`` is the sink's own policy for records the broker did not
    acknowledge (default ``"raise"``: the job stops); it is never inherited.
    ``flush_timeout`` bounds waiting for acknowledgements, ``commit_timeout``
    an exactly-once epoch's commit.

    >>> src = Stream().map(int, on_error="skip")
    >>> sink = src.to_kafka("out", {"bootstrap.servers": "127.0.0.1:1"})
    >>> sink.topic, sink.exactly_once, sink.in_flight, sink.on_error
    ('out', False, 0, 'raise')
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
        commit_timeout: float = 60.0,
        on_error: Any = "raise",
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
        for arg, value in (("flush_timeout", flush_timeout), ("commit_timeout", commit_timeout)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigurationError(
                    f"to_kafka: {arg} must be a number of seconds > 0, got {value!r}"
                )
        # the sink's policy is its own: never inherited from an upstream node
        super().__init__(upstream=upstream, on_error=on_error or "raise", **kwargs)
        self.topic = topic
        self.producer_config: dict[str, Any] = dict(producer_config)
        self.key = key
        self.exactly_once = bool(exactly_once)
        self.transactional_id = transactional_id
        self._explicit_txid = transactional_id is not None
        self.flush_timeout = float(flush_timeout)
        self.commit_timeout = float(commit_timeout)
        #: set by a checkpoint job (used to derive the transactional.id)
        self.job_id: str | None = None
        self.producer: Any = None
        self.in_flight = 0
        self._poller: asyncio.Task[None] | None = None
        self._epoch_records = EpochRecords()
        self._epoch_first: tuple[int, int] | None = None
        self._restored_records: list[tuple[Any, Any]] | None = None
        self._in_txn = False
        self._stuck = False
        self._marker_consumer: Any = None
        self._topic_checked = False
        #: the output topic's id, looked up at the restore ('' when unknown)
        self._topic_id = ""
        self.delivered = 0
        OutputEnds.__init__(self)
        self.committed_epoch: int | None = None

    # ---------------------------------------------------------------- producer
    def _txid(self) -> str:
        if self.transactional_id is None:
            label = self.name or f"to_kafka-{self.topic}"
            self.transactional_id = f"rivermark-{self.job_id or 'job'}-{label}"
        return self.transactional_id

    def producer_settings(self) -> dict[str, Any]:
        """The config the sink's producer is made with: the caller's, plus the sink's defaults.

        >>> ToKafka(Stream(), "out", {"bootstrap.servers": "b:9092"}).producer_settings()["linger.ms"]
        5
        """
        conf = dict(self.producer_config)
        # exactly-once: the records are seen when their epoch commits, so waiting
        # longer to fill a request delays nothing a reader sees (a commit flushes
        # at once, whatever linger.ms says); with 5 ms and a record at a time, the
        # client's own threads took three times the CPU.  The caller's linger.ms wins.
        conf.setdefault("linger.ms", _EXACTLY_ONCE_LINGER_MS if self.exactly_once else 5)
        # a record not acknowledged within flush_timeout fails (the broker is
        # unreachable): a barrier or a stop never waits longer for it
        timeout_ms = int(self.flush_timeout * 1000)
        if self.exactly_once:  # librdkafka: at most the transaction timeout
            timeout_ms = min(timeout_ms, int(conf.get("transaction.timeout.ms", 60000)))
        conf.setdefault("message.timeout.ms", timeout_ms)
        if self.exactly_once:
            conf["transactional.id"] = self._txid()
            conf["enable.idempotence"] = True
        return conf

    def _ensure_producer(self) -> Any:
        if self.producer is None:
            import confluent_kafka as ck

            self.producer = ck.Producer(self.producer_settings())
        return self.producer

    def check_topic(self) -> None:
        """Refuse a missing output topic with one line (when the producer may not create it).

        With ``allow.auto.create.topics`` left on, a metadata request creates
        the topic on a broker that auto-creates topics, as a produce would.
        An unreachable broker is not an error here (the records wait for it).
        """
        if self._topic_checked:
            return
        import confluent_kafka as ck

        producer = self._ensure_producer()
        try:
            md = producer.list_topics(self.topic, timeout=10)
        except ck.KafkaException as e:
            logger.warning(
                "%s: cannot check that topic %r exists (%s)", self.display_name(), self.topic, e
            )
            return
        self._topic_checked = True
        tmd = md.topics.get(self.topic)
        if tmd is not None and tmd.error is None:
            return
        missing = (ck.KafkaError.UNKNOWN_TOPIC_OR_PART, ck.KafkaError._UNKNOWN_TOPIC)
        if (
            tmd is not None
            and tmd.error is not None
            and (tmd.error.code() in missing or not tmd.error.retriable())
        ):
            raise KafkaTopicError(
                f"{self.display_name()}: output topic {self.topic!r} does not exist on "
                f"{self.producer_config.get('bootstrap.servers')!r} ({tmd.error.str()}); "
                "create it (or let the producer create it: allow.auto.create.topics=true on "
                "a broker with auto.create.topics.enable) and run again"
            )

    def output_text(self, x: Any) -> str:
        """The message value produced for ``x`` as a line of text (undecodable bytes replaced)."""
        value = encode(x)
        return ("" if value is None else bytes(value).decode("utf-8", "replace")) + "\n"

    def _key_of(self, x: Any) -> Any:
        k = self.key
        if k is None:
            return None
        return encode(k(x) if callable(k) else k)

    # ---------------------------------------------------------------- data flow
    def update(
        self, x: Any, who: Stream | None = None, metadata: Metadata | None = None
    ) -> list[Awaitable[object]] | None:
        producer = self.producer
        if producer is None or self.failure is not None or (self.exactly_once and not self._in_txn):
            producer = self._ready(metadata)
            if producer is None:
                return None
        key = None
        if self.key is not None:
            try:
                key = self._key_of(x)
            except Exception as e:
                self._user_error(x, e, self.key)
                return None
        value = x.encode() if type(x) is str else encode(x)
        # the counters someone waits for are held until the acknowledgement
        # (under a job the sources' are not: the checkpoint waits for in_flight)
        held = hold_refs(metadata)
        cb = _Delivery((self, x, held, record_origin.get()))
        try:
            producer.produce(self.topic, value, key, _ANY_PARTITION, cb)
        except BufferError:
            return [asyncio.ensure_future(self._produce_when_room(value, key, cb))]
        except Exception as e:
            if self._failed_for_good(e):
                return None  # its refs stay held, never completed: the job stops
            release_refs(held)
            raise
        self._after_produce(value, key)
        if self.in_flight > _MAX_QUEUED:  # (not len(producer): a call into the client)
            return [asyncio.ensure_future(self._drain(_MAX_QUEUED // 2))]
        return None

    def _ready(self, metadata: Metadata | None) -> Any:
        """The producer, ready for a record; None if the sink failed for good.

        A failed sink holds the record's references: it is never completed
        and the job stops.
        """
        if self.failure is not None:
            retain_refs(metadata)
            return None
        producer = self._ensure_producer()
        if self.exactly_once and not self._in_txn:
            try:
                self._begin()
            except KafkaFencedError:
                retain_refs(metadata)
                return None
        return producer

    def _after_produce(self, value: Any, key: Any) -> None:
        self.in_flight += 1
        if self.exactly_once:
            self._epoch_records.add(value, key)
        poller = self._poller
        if poller is None or poller.done():
            self._poller = self.loop.create_task(self._poll_loop())

    async def _produce_when_room(self, value: Any, key: Any, cb: Callable[..., None]) -> None:
        while True:
            self._poll()
            if self.failure is not None:
                return  # not produced, never completed: the job stops at its barrier
            try:
                self.producer.produce(self.topic, value, key, _ANY_PARTITION, cb)
                break
            except BufferError:
                await asyncio.sleep(0.005)
            except Exception as e:
                if not self._failed_for_good(e):
                    raise
        self._after_produce(value, key)

    async def _drain(self, below: int) -> None:
        while len(self.producer) > below and self.failure is None:
            self._poll()
            await asyncio.sleep(0.002)

    async def _poll_loop(self) -> None:
        # goes on after a fatal error: the producer then hands back every
        # queued record with a delivery error, which ends ``in_flight``
        while self.in_flight > 0 and self.producer is not None:
            self._poll()
            if self.in_flight > 0:
                await asyncio.sleep(0.002)

    def _poll(self) -> None:
        """Serve delivery reports; a fatal error of the producer fails the sink for good.

        ``poll`` raises a fatal error (the producer was fenced) once; the
        sink then fails, so a barrier waiting for its records in flight ends
        with the failure instead of waiting for acknowledgements that will
        never come.
        """
        try:
            self.producer.poll(0)
        except Exception as e:
            if not self._failed_for_good(e):
                raise

    def _failed_for_good(self, e: BaseException) -> bool:
        """If ``e`` is a fatal error of the producer, fail the sink with it (once) and say so."""
        import confluent_kafka as ck

        fatal_codes = {
            ck.KafkaError._FATAL,  # what produce() raises once the producer failed
            ck.KafkaError._FENCED,
        }
        err = e.args[0] if isinstance(e, ck.KafkaException) and e.args else None
        if not isinstance(err, ck.KafkaError) or not (err.fatal() or err.code() in fatal_codes):
            return False
        fenced = (
            f"another producer with its transactional id {self._txid()!r} (a newer run of "
            "this job, or another process running this task) fenced it"
            if self.exactly_once
            else "the broker refused it"
        )
        self._fail_delivery(
            KafkaFencedError(
                f"{self.display_name()}: the Kafka producer failed for good ({err.str()}): "
                f"{fenced}; it can write and commit nothing more, so the job stops. A run "
                "resumes exactly from the last checkpoint"
            )
        )
        return True

    def _fail_delivery(self, exc: BaseException) -> None:
        """Fail the node for good with one log line (no traceback: not a bug)."""
        if self.failure is None:
            self.failure = exc
            logger.error("%s", exc)

    def record_delivered(self, msg: Any, metadata: Metadata | None) -> None:
        """A record the broker acknowledged: counted, noted, completed."""
        self.delivered += 1
        self._written += 1
        # where the record went: its partition's end of the output (OutputEnds)
        part, after = msg.partition(), msg.offset() + 1
        if after > self._ends.get(part, 0):
            self._ends[part] = after
        if self.exactly_once and self._epoch_first is None:
            self._epoch_first = (int(part), int(after - 1))
        if metadata:
            release_refs(metadata)

    def record_not_delivered(
        self, x: Any, metadata: Metadata | None, origin: dict[str, Any] | None, err: Any
    ) -> None:
        """A record the broker did not acknowledge: the sink's ``on_error`` decides."""
        rec = repr(x)
        if len(rec) > 200:
            rec = rec[:200] + "..."
        # callbacks run in the poll task: name the record's own origin
        token = record_origin.set(origin)
        try:
            self._delivery_failed(x, metadata, err, rec)
        finally:
            record_origin.reset(token)

    def _delivery_failed(self, x: Any, metadata: Metadata | None, err: Any, rec: str) -> None:
        """Apply the sink's policy to a record the broker did not acknowledge."""
        where = describe_origin()
        source = f" (input {where})" if where else ""
        if err.code() == err._MSG_TIMED_OUT:
            text = (
                f"{self.display_name()}: the broker was unreachable: record {rec}{source} "
                f"for topic {self.topic!r} was not acknowledged within "
                f"{self.flush_timeout:g}s; the job stops. Run it again when the broker is "
                "back: it resumes exactly from its last checkpoint"
            )
        else:
            text = (
                f"{self.display_name()}: the broker did not acknowledge record {rec}{source} "
                f"for topic {self.topic!r}: {err.str()}; the record is not completed and the "
                "job stops; fix the cause and run again (a checkpointed job resumes from its "
                "last checkpoint), or pass on_error='skip' or a callable to to_kafka itself"
            )
        kind = KafkaDeliveryTimeoutError if err.code() == err._MSG_TIMED_OUT else KafkaDeliveryError
        exc = kind(text, x, err)
        policy = self.on_error
        if policy is None or policy == "raise":
            self._fail_delivery(exc)
            return
        try:
            self._user_error(x, exc, self.producer)
        finally:
            release_refs(metadata)

    def flush(self) -> None:
        """Wait until every produced record is acknowledged; raise on a delivery error."""
        if self.producer is None:
            return
        left = self.producer.flush(self.flush_timeout)
        if left:
            raise KafkaDeliveryTimeoutError(
                f"{self.display_name()}: {left} records not acknowledged within "
                f"{self.flush_timeout:g}s: the broker was unreachable; the job stops, and a "
                "rerun resumes exactly from the last checkpoint"
            )
        if isinstance(self.failure, KafkaDeliveryError):
            raise self.failure

    # ---------------------------------------------------------------- transactions
    def _begin(self) -> None:
        self._ensure_producer()
        if self.committed_epoch is None:
            # started without restore() (no job): initialise like a fresh start
            self.restore(None)
            return
        self._begin_transaction()

    def _begin_transaction(self) -> None:
        """Open the next transaction; a fenced producer fails the sink (KafkaFencedError)."""
        try:
            self.producer.begin_transaction()
        except Exception as e:
            if self._failed_for_good(e):
                assert self.failure is not None
                raise self.failure from None
            raise
        self._in_txn = True

    # ---------------------------------------------------------------- checkpoint protocol
    def get_state(self) -> object:
        """The open epoch's records (exactly-once only; see the module docs)."""
        if not self.exactly_once:
            return None
        return self._epoch_records.state()

    def set_state(self, state: Any) -> None:
        if self.exactly_once and state:
            self._restored_records = EpochRecords.restored(state)

    def state_signature(self) -> str:
        return f"ToKafka(topic={self.topic!r}, exactly_once={self.exactly_once!r})"

    def pre_commit(self, epoch: int) -> dict[str, object]:
        """Flush: every record of ``epoch`` is acknowledged; return the handle."""
        self.flush()
        if self.failure is not None:
            raise self.failure
        handle: dict[str, Any] = {"epoch": epoch, "delivered": self.delivered}
        handle.update(self.output_ends())
        if self.exactly_once:
            handle["transactional_id"] = self._txid()
            handle["first"] = list(self._epoch_first) if self._epoch_first else None
            if self._topic_id:
                handle["topic_id"] = self._topic_id
        return handle

    def commit(self, epoch: int, handle: dict[str, object]) -> None:
        """Exactly-once: commit epoch ``epoch``'s transaction and open the next."""
        if not self.exactly_once:
            return
        if not self._in_txn:
            self._ensure_producer()
            if self.committed_epoch is None:
                self.restore(None)
            self._begin_transaction()
        self._commit_epoch(epoch)
        self._epoch_records = EpochRecords()
        self._epoch_first = None
        self._begin_transaction()

    def restore(self, handle: dict[str, Any] | None) -> None:
        """Check the topic; exactly-once: fence zombies, resolve the restored epoch, begin."""
        if not isinstance(handle, dict):
            handle = {}
        self._resume_count(handle)
        stored = handle.get("transactional_id")
        if self.exactly_once and isinstance(stored, str) and stored:
            if self._explicit_txid and stored != self.transactional_id:
                logger.warning(
                    "%s: the checkpoint's transactional id is %r, this run's %r: the output "
                    "of the restored epoch cannot be resolved against the old id",
                    self.display_name(),
                    stored,
                    self.transactional_id,
                )
            elif not self._explicit_txid:
                # the id the checkpoint was written with, wherever the directory is now
                self.transactional_id = stored
        self.check_topic()
        if not self.exactly_once:
            return
        producer = self._init_transactions()
        ids = TopicIds(
            self.producer_config,
            self.display_name(),
            what=f"the output topic {self.topic!r}",
            then="a topic deleted and recreated since a checkpoint is then not told apart "
            "when that checkpoint's epoch is resolved",
        )
        self._topic_id = ids.lookup([self.topic]).get(self.topic, "")
        committed = self._read_committed_epoch()
        epoch = handle.get("epoch")
        records = self._restored_records or []
        self._restored_records = None
        if epoch is not None and committed < epoch and records:
            done, known = self._epoch_outcome(epoch, handle, committed)
            if done:
                logger.warning(
                    "%s: epoch %d was checkpointed and committed (%s); nothing to redo",
                    self.display_name(),
                    epoch,
                    known,
                )
            else:
                self._roll_forward(epoch, records, known)
        elif epoch is not None and committed > epoch:
            logger.error(
                "%s: restoring checkpoint %d but epoch %d already committed output; "
                "its records will appear twice (was a newer checkpoint lost?)",
                self.display_name(),
                epoch,
                committed,
            )
        self.committed_epoch = max(committed, epoch if epoch is not None else -1)
        self._epoch_records = EpochRecords()
        self._epoch_first = None
        producer.begin_transaction()
        self._in_txn = True

    def start_over(self) -> None:
        """Start a new epoch sequence (the job starts from scratch).

        Records of earlier runs that were committed stay visible (Kafka cannot
        take them back); nothing of an earlier run is produced or committed
        again.  The marker group is reset to epoch 0 in an empty transaction,
        so no epoch number of the earlier sequence is mistaken for a committed
        epoch of the new one.
        """
        self._ends, self._written = {}, 0  # a new output: earlier runs' records are not counted
        if not self.exactly_once:
            return
        producer = self._init_transactions()
        self._restored_records = None
        self._epoch_records = EpochRecords()
        committed = self._read_committed_epoch()
        logger.warning(
            "%s: starting over from scratch: %r keeps the records committed by earlier runs "
            "(up to epoch %d); a new epoch sequence begins",
            self.display_name(),
            self.topic,
            committed,
        )
        producer.begin_transaction()
        self._commit_epoch(0)
        producer.begin_transaction()
        self._in_txn = True

    def unaccounted_output(self) -> str | None:
        """Not checked for a topic: other writers may share it (see the module docs)."""
        return None

    # ---------------------------------------------------------------- lifecycle
    def stop(self) -> None:
        super().stop()
        self.close()

    def close(self) -> None:
        """Flush outstanding records (at-least-once) and release the clients."""
        if self._stuck or (self.exactly_once and self.failure is not None):
            # a transactional call is still blocked inside librdkafka, or the
            # broker failed the sink: leave the producer and its open transaction
            # alone (the next run aborts it with init_transactions)
            logger.info("%s: leaving the producer behind", self.display_name())
        elif self.producer is not None and not self.exactly_once:
            self.producer.flush(self.flush_timeout)
        elif self.producer is not None and self.exactly_once and self._in_txn:
            # records after the last checkpoint belong to no checkpoint: they are
            # replayed by the next run, so the open transaction is aborted
            producer = self.producer
            try:
                call_with_deadline(
                    "abort_transaction",
                    lambda: producer.abort_transaction(self.flush_timeout),
                    self.commit_timeout,
                )
            except Exception as e:  # the broker may be gone at shutdown
                logger.warning(
                    "%s: aborting the open transaction failed: %s", self.display_name(), e
                )
            self._in_txn = False
        if self._marker_consumer is not None and not self._stuck:
            self._marker_consumer.close()
            self._marker_consumer = None


class _Delivery(tuple[Any, ...]):
    """The delivery report callback of one record: ``(sink, record, metadata, origin)``.

    One small object per record in flight.  A closure would be five objects
    for the garbage collector to walk (the function and its cells) for as
    long as the record waits for its acknowledgement; with a record per
    input in flight by the ten thousand, those walks were a fifth of the
    sink's time.  A tuple is made without running Python code, a third of
    the cost of a class with ``__init__``.
    """

    __slots__ = ()

    def __call__(self, err: object, msg: Any) -> None:
        sink, x, metadata, origin = self
        sink.in_flight -= 1
        if err is None:
            sink.record_delivered(msg, metadata)
        else:
            sink.record_not_delivered(x, metadata, origin, err)


if TYPE_CHECKING:  # the type checker holds the sink to the contract, with its handle type
    from rivermark.sinks.base import CheckpointedSink

    _checkpointed: type[CheckpointedSink[dict[str, Any]]] = ToKafka
